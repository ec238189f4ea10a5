// Helpers for the daemon's tests: temporary directories, waiting for a condition with
// a deadline, reading files. Used from the test's main thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace slidedp::server::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Polls `done` every 10 ms until it returns true (true) or `timeout` passes (false).
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

std::string ReadFileOrEmpty(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

}  // namespace slidedp::server::testing
