// File access for jobs: every file the runtime reads or writes on behalf of a job (model
// files, shards, tokenizer, data, token caches, checkpoints, exports, job files) is
// opened through here, so that
//  - opening never blocks and only regular files are read: a FIFO, a socket, a device
//    or a directory is refused (INVALID_ARGUMENT naming the path and what it is), never
//    waited on;
//  - when the process has set allowed roots (the daemon does, once at start, from its
//    --model_roots, --data_roots and --output_roots), what was actually opened lies
//    inside them at the moment of opening. The check is on the open descriptor (its
//    /proc/self/fd link), not on the name, so a symlink or a directory swapped after the
//    daemon's path check cannot lead a read or a write outside. Writes go through a
//    directory descriptor that was checked (openat / renameat relative to it).
// Unrestricted by default (slidedp-train, tests). The roots are set before any job runs
// and read by any thread; the functions are safe from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace slidedp {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// Canonical absolute directories (no symlinks, no trailing '/'): a file may be read when
// it lies under one of `read`, a file written when its directory lies under one of `write`.
struct FileRoots {
  std::vector<std::string> read;
  std::vector<std::string> write;
};

// Restricts every later open to `roots`. The daemon calls it once at start.
void SetFileRoots(FileRoots roots);
// Back to unrestricted (the default).
void ClearFileRoots();
// The current roots; nullopt when unrestricted.
std::optional<FileRoots> CurrentFileRoots();

// For tests: sets `roots` for its lifetime and restores what was there before.
class ScopedFileRoots {
 public:
  explicit ScopedFileRoots(FileRoots roots);
  ~ScopedFileRoots();
  ScopedFileRoots(const ScopedFileRoots&) = delete;
  ScopedFileRoots& operator=(const ScopedFileRoots&) = delete;

 private:
  std::optional<FileRoots> previous_;
};

// True when canonical path `path` is `root` or lies below it.
bool PathIsUnderRoot(std::string_view path, std::string_view root);

// A path as repeated in an error message: Echo (valid UTF-8, one line), cut at 256 bytes.
std::string EchoPath(std::string_view path);

// The path the kernel has for open descriptor `fd` (readlink of /proc/self/fd/FD).
absl::StatusOr<std::string> RealPathOfFd(int fd);

// Opens `path` for reading: O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, then fstat; the
// descriptor is returned in blocking mode. Errors, each naming the path: NOT_FOUND when
// it does not exist; PERMISSION_DENIED when access is denied or, with roots set, when
// the opened file lies outside every read root; INVALID_ARGUMENT when it is not a
// regular file (a directory, FIFO, socket, device; the message says which); INTERNAL
// for other system errors.
// Whose file it is: a job's (checked against the roots of SetFileRoots) or the daemon's
// own, named by its operator (--tls_cert, --tls_key, --token_file: no job's roots apply).
enum class FileOwner { kJob, kDaemon };
absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, FileOwner owner = FileOwner::kJob);

// The whole content of `path`, opened with OpenRegularFile. INVALID_ARGUMENT naming the
// file when it holds more than `max_bytes`.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            FileOwner owner = FileOwner::kJob);

// Opens existing directory `dir` to create, rename and remove files in it (relative to
// the returned descriptor: openat, renameat, unlinkat). PERMISSION_DENIED, naming the
// path and the roots, when with roots set the directory opened lies outside every write
// root; NOT_FOUND when it does not exist; INVALID_ARGUMENT when it is not a directory.
absl::StatusOr<UniqueFd> OpenDirForWrite(const std::string& dir);

// Like OpenDirForWrite, creating `dir` and its missing parents first (mode 0755). Each
// missing directory is made with mkdirat under a descriptor that was checked against the
// write roots and opened without following a symlink, so nothing is created outside
// them either.
absl::StatusOr<UniqueFd> CreateDirForWrite(const std::string& dir);

// Creates file `name` (a plain name, no '/') in directory `dir_fd` for writing: O_CREAT
// | O_EXCL | O_NOFOLLOW (a name that exists, symlink or not, is replaced: it is unlinked
// first). `shown` names the file in errors.
absl::StatusOr<UniqueFd> CreateFileAt(int dir_fd, const std::string& name, const std::string& shown,
                                      int mode = 0644);

}  // namespace slidedp
