// AtomicFile: see atomic_file.h.
#include "runtime/model/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

absl::Status ErrnoStatus(const char* what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " '", path, "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

}  // namespace

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

absl::Status AtomicFile::Open(const std::string& path, const std::string& tmp_path) {
  path_ = path;
  tmp_ = tmp_path.empty() ? path + ".tmp" : tmp_path;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    absl::Status s = ErrnoStatus("cannot create", tmp_);
    tmp_.clear();  // not ours to remove
    return s;
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Append(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoStatus("cannot write", tmp_);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (::fsync(fd_) != 0) return ErrnoStatus("cannot fsync", tmp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoStatus("cannot close", tmp_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return ErrnoStatus("cannot rename to", path_);
  committed_ = true;
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("cannot open folder", dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return ErrnoStatus("cannot fsync folder", dir);
  return absl::OkStatus();
}

}  // namespace slidedp
