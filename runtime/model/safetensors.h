// Safetensors: reader and writer of the safetensors file format, written from its
// specification: an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data section (offsets are relative to its start).
//
// The reader validates everything before handing out a byte (header length, JSON
// types, offsets inside the data section, sizes against shapes, no overlaps), so a
// malformed or hostile file gives an error naming the file and the tensor, never a
// read past the buffer. A SafetensorsFile is immutable once opened: any thread may read
// from it concurrently. The writer is used by one thread at a time per output path.
// No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace slidedp {

// The element types the format defines. Only kF32, kBF16 and kF16 can be read as float;
// the others are recognized (so their files open) but ReadAsFloat refuses them.
enum class SafetensorsDtype {
  kBool, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64,
  kF16, kBF16, kF32, kF64, kF8E4M3, kF8E5M2,
};

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);  // "F32", "BF16", ...
// Parses a dtype name as it appears in a header ("F32", "BF16", "F8_E4M3", ...).
absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name);
int SafetensorsDtypeSize(SafetensorsDtype dtype);  // bytes per element

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;   // product of shape (1 for a scalar)
  uint64_t begin = 0;  // byte range [begin, end) within the data section
  uint64_t end = 0;
};

// Largest header accepted (the format's own reference implementation uses 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

class SafetensorsFile {
 public:
  // Memory-maps `path` read-only and validates its header. NotFound if the file does not
  // exist; InvalidArgument, naming the file (and the tensor), for any malformed content.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // Same validation over an in-memory image of a file; `name` is used in messages.
  static absl::StatusOr<SafetensorsFile> FromBuffer(std::string name, std::string bytes);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& name() const { return name_; }
  // All tensors, sorted by name.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor called `name`, or nullptr. The pointer lives as long as this object.
  const SafetensorsTensorInfo* Find(std::string_view name) const;

  // The raw little-endian bytes of tensor `name` (no alignment guaranteed). The span
  // lives as long as this object. NotFound if there is no such tensor.
  absl::StatusOr<absl::Span<const uint8_t>> RawBytes(std::string_view name) const;

  // Converts tensor `name` (F32, BF16 or F16) to fp32 into dst[0..n). `n` must equal the
  // tensor's numel; dst must hold n floats. NotFound for no such tensor, InvalidArgument
  // for another n, Unimplemented for a dtype that is not a float type read here.
  absl::Status ReadAsFloat(std::string_view name, float* dst, int64_t n) const;

 private:
  struct Storage;
  SafetensorsFile(std::string name, std::unique_ptr<Storage> storage);
  absl::Status ParseHeader();

  std::string name_;
  std::unique_ptr<Storage> storage_;
  const uint8_t* data_section_ = nullptr;  // inside storage_
  uint64_t data_size_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor for WriteSafetensors: fp32 source data of product(shape) elements, stored
// as F32 or BF16 (round to nearest even). `data` must stay valid during the call.
struct TensorToWrite {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes a safetensors file atomically (PATH.tmp, fsync, rename, fsync of the folder).
// Tensors are stored in sorted-name order with contiguous offsets; the header is padded
// with spaces to a multiple of 8 bytes. Names must be unique, non-empty and not
// "__metadata__"; dtypes F32 or BF16. On error PATH is untouched and PATH.tmp removed.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes `contents` to `path` atomically (PATH.tmp, fsync, rename, fsync of the folder).
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Element conversions used by the reader and the writer.
uint16_t FloatToBf16(float x);  // round to nearest even; NaN stays a (quiet) NaN
float Bf16ToFloat(uint16_t bits);
float HalfToFloat(uint16_t bits);  // IEEE binary16, subnormals and inf/NaN included

}  // namespace slidedp
