// DataFileMapping: a whole file memory-mapped read-only (POSIX mmap), unmapped on
// destruction. The pages are loaded on demand by the kernel, so huge files cost no RAM
// up front. Immutable after Open; safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace slidedp {

class DataFileMapping {
 public:
  // Maps `path` read-only, opened by OpenRegularFile (runtime/io/file_access.h: never
  // blocks, inside the read roots). NotFound if it does not exist, InvalidArgument if it
  // is not a regular file (a FIFO, a directory, a device), PermissionDenied if access is
  // denied or it lies outside the read roots, Internal on other system errors. An empty file maps to size() == 0
  // and data() == nullptr (mmap of zero bytes is not allowed).
  static absl::StatusOr<std::unique_ptr<DataFileMapping>> Open(const std::string& path);

  ~DataFileMapping();
  DataFileMapping(const DataFileMapping&) = delete;
  DataFileMapping& operator=(const DataFileMapping&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  DataFileMapping(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace slidedp
