// AtomicFile: a file written under a temporary name and renamed over its path by
// Commit() (after fsync; the folder is fsynced too), so readers see the old file or the
// whole new one. Removed if not committed. Everything goes through a descriptor of the
// folder, opened and checked against the write roots once in Open (runtime/io/
// file_access.h): the temporary file is created there with O_EXCL | O_NOFOLLOW and
// renamed there, so a folder swapped for a symlink afterwards cannot redirect the write.
// One thread at a time.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "runtime/io/file_access.h"

namespace slidedp {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates `tmp_path` (default PATH.tmp; give a unique one when several processes may
  // write `path` at once; it must be in the same folder), replacing any file of that
  // name. The folder must exist. PERMISSION_DENIED when it lies outside the write roots.
  absl::Status Open(const std::string& path, const std::string& tmp_path = "");
  absl::Status Append(const void* data, size_t n);
  // fsync, close, rename over the path, fsync of the folder. Errors name the file.
  absl::Status Commit();

 private:
  std::string path_, tmp_;            // for messages
  std::string name_, tmp_name_;       // inside the folder
  UniqueFd dir_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace slidedp
