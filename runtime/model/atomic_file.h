// AtomicFile: a file written under a temporary name and renamed over its path by
// Commit() (after fsync; the folder is fsynced too), so readers see the old file or the
// whole new one. Removed if not committed. One thread at a time.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace slidedp {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates `tmp_path` (default PATH.tmp; give a unique one when several processes may
  // write `path` at once), truncating it.
  absl::Status Open(const std::string& path, const std::string& tmp_path = "");
  absl::Status Append(const void* data, size_t n);
  // fsync, close, rename over the path, fsync of the folder. Errors name the file.
  absl::Status Commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace slidedp
