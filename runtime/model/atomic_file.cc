// AtomicFile: see atomic_file.h.
#include "runtime/model/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

absl::Status ErrnoStatus(const char* what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " '", EchoPath(path), "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

}  // namespace

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_name_.empty() && dir_.valid()) ::unlinkat(dir_.get(), tmp_name_.c_str(), 0);
}

absl::Status AtomicFile::Open(const std::string& path, const std::string& tmp_path) {
  namespace fs = std::filesystem;
  path_ = path;
  tmp_ = tmp_path.empty() ? path + ".tmp" : tmp_path;
  const fs::path p(path_), t(tmp_);
  if (p.parent_path() != t.parent_path() || !p.has_filename() || !t.has_filename()) {
    return absl::InvalidArgumentError(absl::StrCat("AtomicFile: '", EchoPath(tmp_),
                                                   "' is not a file beside '", EchoPath(path_), "'"));
  }
  std::string dir = p.parent_path().string();
  if (dir.empty()) dir = ".";
  absl::StatusOr<UniqueFd> d = OpenDirForWrite(dir);
  if (!d.ok()) {
    return absl::Status(d.status().code(),
                        absl::StrCat("cannot create '", EchoPath(tmp_), "': ", d.status().message()));
  }
  dir_ = *std::move(d);
  absl::StatusOr<UniqueFd> f = CreateFileAt(dir_.get(), t.filename().string(), tmp_);
  if (!f.ok()) return f.status();  // nothing of ours to remove
  name_ = p.filename().string();
  tmp_name_ = t.filename().string();
  fd_ = f->Release();
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
  if (::renameat(dir_.get(), tmp_name_.c_str(), dir_.get(), name_.c_str()) != 0) {
    return ErrnoStatus("cannot rename to", path_);
  }
  committed_ = true;
  if (::fsync(dir_.get()) != 0) return ErrnoStatus("cannot fsync the folder of", path_);
  return absl::OkStatus();
}

}  // namespace slidedp
