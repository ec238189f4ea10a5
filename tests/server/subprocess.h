// Running the real slidedpd and slidedp binaries from tests: a command with captured
// output and a time limit, and a daemon process started on ephemeral ports. Used from
// the test's main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace slidedp::server::testing {

struct CommandResult {
  int exit_code = -1;  // -1: killed after the time limit
  std::string out;
  std::string err;
};

// Runs argv[0] with `args`; kills it after `limit`.
CommandResult RunCommand(const std::vector<std::string>& args, std::chrono::seconds limit);

// A background child process (stdout and stderr to files); the destructor stops it.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  bool spawned() const { return spawned_; }
  bool running();  // has not exited
  // SIGTERM and wait up to `limit`; the exit code (-1 if it had to be killed).
  int Stop(std::chrono::seconds limit = std::chrono::seconds(60));
  // SIGKILL (a crash: no cleanup runs) and reap it.
  void Kill();

 private:
  pid_t pid_ = -1;
  bool spawned_ = false;
  int exit_code_ = -1;
};

// slidedpd as a child process; the destructor stops it (SIGTERM, then SIGKILL).
class DaemonProcess {
 public:
  // Starts `binary` with --listen (default 127.0.0.1:0), --metrics_listen=127.0.0.1:0,
  // --state_dir=state_dir, --ready_file and `extra` flags; waits up to 30 s for the
  // ready file. started() says whether it came up; log() has its stderr.
  DaemonProcess(const std::string& binary, const std::string& state_dir,
                const std::vector<std::string>& extra = {}, const std::string& listen = "127.0.0.1:0");
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  bool started() const { return !address_.empty(); }
  bool running() { return child_ && child_->running(); }
  // SIGTERM and wait up to `limit`; returns the exit code (-1 if it had to be killed).
  int Stop(std::chrono::seconds limit = std::chrono::seconds(60));
  // kill -9: the daemon dies mid-whatever, as in a crash or an OOM kill.
  void Kill();

  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  std::string log() const;

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string log_path_;
  std::string address_;
  std::string metrics_address_;
};

}  // namespace slidedp::server::testing
