// File access for jobs: see file_access.h.
#include "runtime/io/file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

constexpr size_t kEchoPathBytes = 256;

std::mutex roots_mu;
std::shared_ptr<const FileRoots> roots;  // null: unrestricted

std::shared_ptr<const FileRoots> Roots() {
  std::lock_guard<std::mutex> lock(roots_mu);
  return roots;
}

absl::Status ErrnoError(int err, const char* what, std::string_view path) {
  std::string message = absl::StrCat(what, " ", EchoPath(path), ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  if (err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG || err == EISDIR) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a plain file";
}

// OK when the file open as `fd` (named `path`) lies under one of `allowed`.
absl::Status CheckInside(int fd, std::string_view path, const std::vector<std::string>& allowed,
                         const char* what) {
  absl::StatusOr<std::string> real = RealPathOfFd(fd);
  if (!real.ok()) return real.status();
  for (const std::string& root : allowed) {
    if (PathIsUnderRoot(*real, root)) return absl::OkStatus();
  }
  std::string shown = EchoPath(path);
  if (*real != path) absl::StrAppend(&shown, " (resolved to ", EchoPath(*real), ")");
  return absl::PermissionDeniedError(absl::StrCat(
      shown, " is outside the allowed ", what, " roots [",
      Echo(absl::StrJoin(allowed, ", "), kEchoPathBytes), "]"));
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void SetFileRoots(FileRoots r) {
  auto next = std::make_shared<const FileRoots>(std::move(r));
  std::lock_guard<std::mutex> lock(roots_mu);
  roots = std::move(next);
}

void ClearFileRoots() {
  std::lock_guard<std::mutex> lock(roots_mu);
  roots.reset();
}

std::optional<FileRoots> CurrentFileRoots() {
  std::shared_ptr<const FileRoots> r = Roots();
  if (r == nullptr) return std::nullopt;
  return *r;
}

ScopedFileRoots::ScopedFileRoots(FileRoots r) : previous_(CurrentFileRoots()) {
  SetFileRoots(std::move(r));
}

ScopedFileRoots::~ScopedFileRoots() {
  if (previous_.has_value()) {
    SetFileRoots(*std::move(previous_));
  } else {
    ClearFileRoots();
  }
}

bool PathIsUnderRoot(std::string_view path, std::string_view root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  if (root.empty() || path.size() < root.size() || path.compare(0, root.size(), root) != 0) {
    return false;
  }
  return path.size() == root.size() || path[root.size()] == '/';
}

std::string EchoPath(std::string_view path) { return Echo(path, kEchoPathBytes); }

absl::StatusOr<std::string> RealPathOfFd(int fd) {
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  std::string buf(4096, '\0');
  for (;;) {
    const ssize_t n = ::readlink(link.c_str(), buf.data(), buf.size());
    if (n < 0) return ErrnoError(errno, "cannot resolve", link);
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    buf.resize(buf.size() * 2);
  }
}

absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, FileOwner owner) {
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(EchoPath(path), ": path contains a NUL byte"));
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENXIO || err == EOPNOTSUPP) {  // a socket, or a device without a driver
      struct stat st;
      const char* kind = ::stat(path.c_str(), &st) == 0 ? KindOf(st.st_mode) : "not a plain file";
      return absl::InvalidArgumentError(
          absl::StrCat(EchoPath(path), " is ", kind, ", not a regular file"));
    }
    return ErrnoError(err, "cannot open", path);
  }
  if (std::shared_ptr<const FileRoots> r = owner == FileOwner::kJob ? Roots() : nullptr) {
    if (absl::Status s = CheckInside(fd.get(), path, r->read, "read"); !s.ok()) return s;
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(EchoPath(path), " is ", KindOf(st.st_mode), ", not a regular file"));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError(errno, "cannot set blocking mode on", path);
  }
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes, FileOwner owner) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(path, owner);
  if (!fd.ok()) return fd.status();
  auto too_large = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(EchoPath(path), " is larger than the limit of ", max_bytes, " bytes"));
  };
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "cannot read", path);
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) return too_large();  // it grew
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

absl::StatusOr<UniqueFd> OpenDirForWrite(const std::string& dir) {
  if (dir.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(EchoPath(dir), ": path contains a NUL byte"));
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(errno, "cannot open the folder", dir);
  if (std::shared_ptr<const FileRoots> r = Roots()) {
    if (absl::Status s = CheckInside(fd.get(), dir, r->write, "output"); !s.ok()) return s;
  }
  return fd;
}

absl::StatusOr<UniqueFd> CreateDirForWrite(const std::string& dir) {
  if (dir.empty() || dir.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("folder \"", EchoPath(dir), "\" is not a path"));
  }
  std::error_code ec;
  fs::path target = fs::path(dir).lexically_normal();
  if (target.is_relative()) target = (fs::current_path(ec) / target).lexically_normal();
  if (ec) return absl::InternalError(absl::StrCat("cannot resolve ", EchoPath(dir), ": ", ec.message()));
  std::vector<std::string> parts;
  for (const fs::path& part : target.relative_path()) {
    if (!part.empty()) parts.push_back(part.string());
  }
  // The deepest directory of the path that exists.
  size_t have = parts.size();
  UniqueFd base;
  for (;; --have) {
    fs::path prefix = target.root_path();
    for (size_t i = 0; i < have; ++i) prefix /= parts[i];
    const int fd = ::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const int err = errno;
    base = UniqueFd(fd);
    if (base.valid()) break;
    if (err != ENOENT || have == 0) return ErrnoError(err, "cannot open the folder", prefix.string());
  }
  if (have == parts.size()) return OpenDirForWrite(target.string());
  if (std::shared_ptr<const FileRoots> r = Roots()) {
    fs::path prefix = target.root_path();
    for (size_t i = 0; i < have; ++i) prefix /= parts[i];
    absl::Status s = CheckInside(base.get(), prefix.string(), r->write, "output");
    if (!s.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", EchoPath(target.string()), ": ", s.message()));
    }
  }
  for (size_t i = have; i < parts.size(); ++i) {
    if (::mkdirat(base.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError(errno, "cannot create the folder", target.string());
    }
    UniqueFd next(::openat(base.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return ErrnoError(errno, "cannot open the folder", target.string());
    base = std::move(next);
  }
  if (std::shared_ptr<const FileRoots> r = Roots()) {
    if (absl::Status s = CheckInside(base.get(), target.string(), r->write, "output"); !s.ok()) return s;
  }
  return base;
}

absl::StatusOr<UniqueFd> CreateFileAt(int dir_fd, const std::string& name, const std::string& shown,
                                      int mode) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(EchoPath(shown), ": not a plain file name"));
  }
  if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "cannot replace", shown);
  }
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoError(errno, "cannot create", shown);
  return fd;
}

}  // namespace slidedp
