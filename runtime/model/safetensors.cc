// Safetensors reader and writer: see safetensors.h. The reader validates the whole
// header up front; after that every access is within ranges already checked.
#include "runtime/model/safetensors.h"
#include "runtime/model/atomic_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reader assumes a little-endian host");

using nlohmann::json;

namespace {

// Debian's abseil has its own string_view; StrCat takes that one.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct DtypeEntry {
  SafetensorsDtype dtype;
  const char* name;
  int size;
};

constexpr DtypeEntry kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},       {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},           {SafetensorsDtype::kU16, "U16", 2},
    {SafetensorsDtype::kI16, "I16", 2},         {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kI32, "I32", 4},         {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kI64, "I64", 8},         {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},       {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},         {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
};

const DtypeEntry& Entry(SafetensorsDtype d) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == d) return e;
  }
  return kDtypes[0];  // unreachable for valid enum values
}

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr int kMaxHeaderNesting = 32;

absl::Status Bad(absl::string_view file, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors file '", EchoPath(std::string_view(file.data(), file.size())), "': ", msg));
}

absl::Status BadTensor(absl::string_view file, absl::string_view tensor, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors file '", EchoPath(std::string_view(file.data(), file.size())),
                   "': tensor '", Echo(std::string_view(tensor.data(), tensor.size())), "': ", msg));
}

// True, with *out set, when `v` is a non-negative integer that fits int64.
bool NonNegativeInt(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  return false;
}

// A JSON value for an error message, cut short.
std::string Clip(const json& v) {
  return Echo(v.dump(-1, ' ', false, json::error_handler_t::replace), 80);
}

absl::Status ParseShape(absl::string_view file, const json& v, SafetensorsTensorInfo& t) {
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return BadTensor(file, t.name, "'shape' missing or not an array");
  uint64_t numel = 1;
  for (const json& d : *sh) {
    int64_t dim = 0;
    if (!NonNegativeInt(d, &dim)) {
      return BadTensor(file, t.name, absl::StrCat("shape entry ", Clip(d), " is not a non-negative integer"));
    }
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadTensor(file, t.name, absl::StrCat("shape ", Clip(*sh), " overflows the element count"));
    }
    t.shape.push_back(dim);
  }
  t.numel = static_cast<int64_t>(numel);
  return absl::OkStatus();
}

absl::Status ParseOffsets(absl::string_view file, const json& v, uint64_t data_size, SafetensorsTensorInfo& t) {
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2) {
    return BadTensor(file, t.name, "'data_offsets' missing or not an array of two integers");
  }
  int64_t begin = 0, end = 0;
  if (!NonNegativeInt((*off)[0], &begin) || !NonNegativeInt((*off)[1], &end)) {
    return BadTensor(file, t.name, absl::StrCat("data_offsets ", Clip(*off), " are not non-negative integers"));
  }
  t.begin = static_cast<uint64_t>(begin);
  t.end = static_cast<uint64_t>(end);
  if (t.begin > t.end) {
    return BadTensor(file, t.name, absl::StrFormat("data_offsets [%d, %d]: begin > end", t.begin, t.end));
  }
  if (t.end > data_size) {
    return BadTensor(file, t.name, absl::StrFormat("data_offsets [%d, %d] out of range (data section is %d bytes)",
                                                   t.begin, t.end, data_size));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(t.numel), static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype)),
                             &bytes)) {
    return BadTensor(file, t.name, "byte size overflows");
  }
  if (bytes != t.end - t.begin) {
    return BadTensor(file, t.name, absl::StrFormat("shape [%s] of %s needs %d bytes but data_offsets span %d",
                                                   absl::StrJoin(t.shape, ","), SafetensorsDtypeName(t.dtype), bytes,
                                                   t.end - t.begin));
  }
  return absl::OkStatus();
}

// One header entry {"dtype", "shape", "data_offsets"}, checked against the data section.
absl::StatusOr<SafetensorsTensorInfo> ParseEntry(absl::string_view file, const std::string& key,
                                                 const json& v, uint64_t data_size) {
  SafetensorsTensorInfo t;
  t.name = key.size() <= 4096 ? key : key.substr(0, 4096);  // only messages can see a clipped name
  if (!v.is_object()) return BadTensor(file, t.name, "header entry is not a JSON object");
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return BadTensor(file, t.name, "'dtype' missing or not a string");
  absl::StatusOr<SafetensorsDtype> dtype = ParseSafetensorsDtype(dt->get_ref<const std::string&>());
  if (!dtype.ok()) return BadTensor(file, t.name, dtype.status().message());
  t.dtype = *dtype;
  absl::Status s = ParseShape(file, v, t);
  if (s.ok()) s = ParseOffsets(file, v, data_size, t);
  if (!s.ok()) return s;
  t.name = key;
  return t;
}

absl::Status CheckNoOverlap(absl::string_view file, const std::vector<SafetensorsTensorInfo>& tensors) {
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const SafetensorsTensorInfo& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->end > by_offset[i]->begin) {
      return BadTensor(file, by_offset[i]->name,
                       absl::StrFormat("bytes [%d, %d) overlap tensor '%s' [%d, %d)", by_offset[i]->begin,
                                       by_offset[i]->end, by_offset[i - 1]->name, by_offset[i - 1]->begin,
                                       by_offset[i - 1]->end));
    }
  }
  return absl::OkStatus();
}

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " '", EchoPath(path), "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return Entry(dtype).name; }

int SafetensorsDtypeSize(SafetensorsDtype dtype) { return Entry(dtype).size; }

absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (name == e.name) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", AV(name.substr(0, 32)), "'"));
}

uint16_t FloatToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;  // round to nearest, ties to even; overflows to inf as it should
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    const float f = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    return sign ? -f : f;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- reader ----

struct SafetensorsFile::Storage {
  std::string bytes;       // FromBuffer
  void* map = nullptr;     // Open
  size_t map_len = 0;
  const uint8_t* data = nullptr;
  uint64_t size = 0;

  ~Storage() {
    if (map != nullptr) munmap(map, map_len);
  }
};

SafetensorsFile::SafetensorsFile(std::string name, std::unique_ptr<Storage> storage)
    : name_(std::move(name)), storage_(std::move(storage)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBuffer(std::string name, std::string bytes) {
  auto storage = std::make_unique<Storage>();
  storage->bytes = std::move(bytes);
  storage->data = reinterpret_cast<const uint8_t*>(storage->bytes.data());
  storage->size = storage->bytes.size();
  SafetensorsFile file(std::move(name), std::move(storage));
  absl::Status s = file.ParseHeader();
  if (!s.ok()) return s;
  return file;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  // Never blocks, regular files only, inside the read roots (runtime/io/file_access.h).
  absl::StatusOr<UniqueFd> opened = OpenRegularFile(path);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("safetensors file: ", opened.status().message()));
  }
  const int fd = opened->get();
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("cannot stat", path);
  auto storage = std::make_unique<Storage>();
  storage->size = static_cast<uint64_t>(st.st_size);
  if (storage->size >= 8) {  // shorter files are rejected by ParseHeader; mmap(0) is invalid
    void* map = mmap(nullptr, storage->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return ErrnoStatus("cannot mmap", path);
    storage->map = map;
    storage->map_len = storage->size;
    storage->data = static_cast<const uint8_t*>(map);
  }
  // The descriptor is closed on return; the mapping stays valid.
  SafetensorsFile file(path, std::move(storage));
  absl::Status s = file.ParseHeader();
  if (!s.ok()) return s;
  return file;
}

absl::Status SafetensorsFile::ParseHeader() {
  const uint64_t size = storage_->size;
  if (size < 8) return Bad(name_, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  const uint64_t n = LoadLe64(storage_->data);
  if (n > kMaxSafetensorsHeaderBytes) {
    return Bad(name_, absl::StrCat("header length ", n, " exceeds the limit of ", kMaxSafetensorsHeaderBytes));
  }
  if (n > size - 8) {
    return Bad(name_, absl::StrCat("header length ", n, " is larger than the ", size - 8, " bytes after it"));
  }
  const char* h = reinterpret_cast<const char*>(storage_->data + 8);
  data_section_ = storage_->data + 8 + n;
  data_size_ = size - 8 - n;
  if (JsonNestingDepth(std::string_view(h, n)) > kMaxHeaderNesting) {
    return Bad(name_, absl::StrCat("header JSON is nested deeper than ", kMaxHeaderNesting));
  }
  json j;
  try {
    j = json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return Bad(name_, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (j.is_discarded()) return Bad(name_, "header is not valid JSON");
  if (!j.is_object()) return Bad(name_, "header JSON is not an object");
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Bad(name_, "__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return Bad(name_, absl::StrCat("__metadata__ value of '", Echo(mk), "' is not a string"));
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<SafetensorsTensorInfo> t = ParseEntry(name_, key, value, data_size_);
    if (!t.ok()) return t.status();
    tensors_.push_back(*std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return CheckNoOverlap(name_, tensors_);
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

absl::StatusOr<absl::Span<const uint8_t>> SafetensorsFile::RawBytes(std::string_view name) const {
  const SafetensorsTensorInfo* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("safetensors file '", name_, "': no tensor '", AV(name), "'"));
  }
  return absl::Span<const uint8_t>(data_section_ + t->begin, t->end - t->begin);
}

absl::Status SafetensorsFile::ReadAsFloat(std::string_view name, float* dst, int64_t n) const {
  const SafetensorsTensorInfo* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("safetensors file '", name_, "': no tensor '", AV(name), "'"));
  }
  if (n != t->numel) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file '", name_, "': tensor '", AV(name), "' has ",
                                                   t->numel, " elements, caller asked for ", n));
  }
  const uint8_t* src = data_section_ + t->begin;
  switch (t->dtype) {
    case SafetensorsDtype::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    case SafetensorsDtype::kBF16:
    case SafetensorsDtype::kF16: {
      const bool bf16 = t->dtype == SafetensorsDtype::kBF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16 ? Bf16ToFloat(b) : HalfToFloat(b);
      }
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(absl::StrCat("safetensors file '", name_, "': tensor '", AV(name), "' has dtype ",
                                                   AV(SafetensorsDtypeName(t->dtype)),
                                                   ", which cannot be read as float (F32, BF16, F16 only)"));
  }
}

// ---- writer ----

namespace {

absl::Status CheckTensorToWrite(const std::string& path, const TensorToWrite& t, int64_t* numel) {
  if (t.name.empty() || t.name == "__metadata__") {
    return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': invalid tensor name '", t.name, "'"));
  }
  if (t.dtype != SafetensorsDtype::kF32 && t.dtype != SafetensorsDtype::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': tensor '", t.name, "': dtype ",
                                                   AV(SafetensorsDtypeName(t.dtype)), " not supported (F32, BF16)"));
  }
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)) {
      return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': tensor '", t.name, "': bad shape"));
    }
  }
  if (n > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': tensor '", t.name, "': no data"));
  }
  *numel = n;
  return absl::OkStatus();
}

absl::Status AppendTensorData(AtomicFile& f, const TensorToWrite& t, int64_t numel) {
  if (t.dtype == SafetensorsDtype::kF32) return f.Append(t.data, static_cast<size_t>(numel) * 4);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(numel, kChunk)));
  for (int64_t i = 0; i < numel; i += kChunk) {
    const int64_t m = std::min(kChunk, numel - i);
    for (int64_t k = 0; k < m; ++k) buf[k] = FloatToBf16(t.data[i + k]);
    absl::Status s = f.Append(buf.data(), static_cast<size_t>(m) * 2);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  std::vector<int64_t> numels;
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    if (i > 0 && sorted[i - 1]->name == t.name) {
      return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': duplicate tensor '", t.name, "'"));
    }
    int64_t numel = 0;
    absl::Status s = CheckTensorToWrite(path, t, &numel);
    if (!s.ok()) return s;
    numels.push_back(numel);
    const uint64_t bytes = static_cast<uint64_t>(numel) * SafetensorsDtypeSize(t.dtype);
    header[t.name] = {{"dtype", SafetensorsDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const std::exception& e) {  // names or metadata that are not valid UTF-8
    return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  AtomicFile f;
  absl::Status s = f.Open(path);
  if (s.ok()) s = f.Append(len, 8);
  if (s.ok()) s = f.Append(text.data(), text.size());
  for (size_t i = 0; s.ok() && i < sorted.size(); ++i) s = AppendTensorData(f, *sorted[i], numels[i]);
  if (s.ok()) s = f.Commit();
  return s;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  AtomicFile f;
  absl::Status s = f.Open(path);
  if (s.ok()) s = f.Append(contents.data(), contents.size());
  if (s.ok()) s = f.Commit();
  return s;
}

}  // namespace slidedp
