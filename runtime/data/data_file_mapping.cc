// DataFileMapping: see data_file_mapping.h.
#include "runtime/data/data_file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/io/file_access.h"

namespace slidedp {
namespace {

absl::Status ErrnoError(int err, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataFileMapping>> DataFileMapping::Open(const std::string& path) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(path);  // never blocks; regular files only
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) {
    const int err = errno;
    return ErrnoError(err, absl::StrCat("cannot stat ", EchoPath(path)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd->get(), 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      return ErrnoError(err, absl::StrCat("cannot mmap ", EchoPath(path)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  // The descriptor is closed on return; the mapping keeps the file alive.
  return std::unique_ptr<DataFileMapping>(new DataFileMapping(path, data, size));
}

DataFileMapping::~DataFileMapping() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace slidedp
