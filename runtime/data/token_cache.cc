// Token cache: see token_cache.h.
#include "runtime/data/token_cache.h"
#include "runtime/io/stop_token.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/io/file_access.h"
#include "runtime/model/atomic_file.h"

namespace slidedp {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'D', 'P', 'T', 'O', 'K', '\0'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t key_bytes;
  int64_t tokens;
  int64_t documents;
  int64_t bad_lines;
  int32_t max_id;
  uint32_t reserved;
  uint64_t checksum;
  uint64_t reserved2;
};
static_assert(sizeof(Header) == 64, "the cache header is 64 bytes");

int64_t Pad8(int64_t n) { return (n + 7) / 8 * 8; }

// Bytes of a file of `tokens` tokens and a key of `key_bytes` bytes.
int64_t FileBytes(int64_t key_bytes, int64_t tokens) {
  return static_cast<int64_t>(sizeof(Header)) + Pad8(key_bytes) + tokens * 5;
}

// The header (its checksum field zero), then the padded key, the ids and the flags.
// CANCELLED when `stop` asks to stop meanwhile.
absl::StatusOr<uint64_t> Checksum(Header h, absl::string_view key, absl::string_view ids,
                                  absl::string_view flags, const StopToken* stop) {
  h.checksum = 0;
  uint64_t c = HashBytes(absl::string_view(reinterpret_cast<const char*>(&h), sizeof h));
  for (absl::string_view part : {key, ids, flags}) {
    absl::StatusOr<uint64_t> next = HashBytes(part, c, stop);
    if (!next.ok()) return next.status();
    c = *next;
  }
  return c;
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("token cache ", EchoPath(path), ": ", what));
}

}  // namespace

absl::StatusOr<uint64_t> HashBytes(absl::string_view bytes, uint64_t seed, const StopToken* stop) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  // Slices of 64 MiB (a multiple of 8, so the value is that of one pass), with a stop
  // check between them: a multi-GB file is hashed at a few GB/s.
  uint64_t h = seed ^ (bytes.size() * kMul);
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    if (absl::Status s = CheckStop(stop, "hashing the data file"); !s.ok()) return s;
    const char* end = p + (std::min(n, kStopCheckBytes) & ~size_t{7});
    n -= end - p;
    for (; p < end; p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
    }
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  h = (h ^ tail ^ (uint64_t{n} << 56)) * kMul;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  return h ^ (h >> 32);
}

uint64_t HashBytes(absl::string_view bytes, uint64_t seed) { return *HashBytes(bytes, seed, nullptr); }

absl::StatusOr<std::string> TokenCacheKey(const std::string& path, absl::string_view content, int64_t mtime_ns,
                                          uint64_t tokenizer_fingerprint, const std::string& settings,
                                          const StopToken* stop) {
  absl::StatusOr<uint64_t> hash = HashBytes(content, 0, stop);
  if (!hash.ok()) return hash.status();
  return absl::StrFormat(
      "slidedp token cache %d\nfile=%s\nsize=%d\nmtime_ns=%d\ncontent=%016x\ntokenizer=%016x\n%s\n",
      kTokenCacheVersion, path, content.size(), mtime_ns, *hash, tokenizer_fingerprint, settings);
}

std::vector<std::string> TokenCacheDirs(const std::string& cache_dir, const std::string& data_path) {
  if (!cache_dir.empty()) return {cache_dir};
  std::vector<std::string> dirs;
  std::string parent = std::filesystem::path(data_path).parent_path().string();
  dirs.push_back((parent.empty() ? std::string(".") : parent) + "/.slidedp-cache");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg != nullptr && xdg[0] == '/') {
    dirs.push_back(absl::StrCat(xdg, "/slidedp"));
  } else if (home != nullptr && home[0] == '/') {
    dirs.push_back(absl::StrCat(home, "/.cache/slidedp"));
  }
  return dirs;
}

std::string TokenCacheFileName(const std::string& data_path, const std::string& key) {
  return absl::StrFormat("%s.%016x.slidedp-tokens",
                         std::filesystem::path(data_path).filename().string(), HashBytes(key));
}

absl::Status CachedTokenSource::Read(int64_t start, absl::Span<int32_t> out) const {
  absl::Status range = CheckTokenRange(start, static_cast<int64_t>(out.size()), tokens_, path());
  if (!range.ok()) return range;
  std::memcpy(out.data(), ids_ + start, out.size() * sizeof(int32_t));
  return absl::OkStatus();
}

absl::Status CachedTokenSource::ReadFlags(int64_t start, absl::Span<uint8_t> out) const {
  absl::Status range = CheckTokenRange(start, static_cast<int64_t>(out.size()), tokens_, path());
  if (!range.ok()) return range;
  std::memcpy(out.data(), flags_ + start, out.size());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CachedTokenSource>> OpenTokenCache(const std::string& path,
                                                                  const std::string& key,
                                                                  const StopToken* stop) {
  absl::StatusOr<std::unique_ptr<DataFileMapping>> file = DataFileMapping::Open(path);
  if (!file.ok()) return file.status();
  const uint8_t* data = (*file)->data();
  const int64_t size = static_cast<int64_t>((*file)->size());
  Header h;
  if (size < static_cast<int64_t>(sizeof h)) return Corrupt(path, "shorter than its header");
  std::memcpy(&h, data, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return Corrupt(path, "not a token cache");
  if (h.version != kTokenCacheVersion) {
    return Corrupt(path, absl::StrCat("version ", h.version, ", not ", kTokenCacheVersion));
  }
  if (h.tokens < 1 || h.tokens > (int64_t{1} << 40) || h.key_bytes > (1u << 20) ||
      size != FileBytes(h.key_bytes, h.tokens)) {
    return Corrupt(path, absl::StrCat(size, " bytes, not what its header announces (truncated?)"));
  }
  const absl::string_view rest(reinterpret_cast<const char*>(data) + sizeof h, size - sizeof h);
  if (rest.substr(0, h.key_bytes) != key) return Corrupt(path, "made for another file or setting");
  const int64_t key_end = Pad8(h.key_bytes), ids_end = key_end + 4 * h.tokens;
  absl::StatusOr<uint64_t> sum = Checksum(h, rest.substr(0, key_end), rest.substr(key_end, ids_end - key_end),
                                          rest.substr(ids_end), stop);
  if (!sum.ok()) return sum.status();
  if (*sum != h.checksum) return Corrupt(path, "checksum mismatch");
  auto source = std::unique_ptr<CachedTokenSource>(new CachedTokenSource());
  source->ids_ = reinterpret_cast<const int32_t*>(data + sizeof h + Pad8(h.key_bytes));
  source->flags_ = data + sizeof h + Pad8(h.key_bytes) + 4 * h.tokens;
  source->tokens_ = h.tokens;
  source->documents_ = h.documents;
  source->bad_lines_ = h.bad_lines;
  source->max_id_ = h.max_id;
  source->file_ = *std::move(file);
  source->description_ = path;
  return source;
}

absl::Status WriteTokenCache(const std::string& path, const std::string& key,
                             const TokenizedCorpus& corpus, const StopToken* stop) {
  // Created below a folder inside the write roots, never through a symlink; AtomicFile
  // then writes through a checked descriptor of the folder (runtime/io/file_access.h).
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    absl::StatusOr<UniqueFd> d = CreateDirForWrite(dir.string());
    if (!d.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create the token cache folder: ", d.status().message()));
    }
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kTokenCacheVersion;
  h.key_bytes = static_cast<uint32_t>(key.size());
  h.tokens = static_cast<int64_t>(corpus.ids.size());
  h.documents = corpus.documents;
  h.bad_lines = corpus.bad_lines;
  h.max_id = corpus.max_id;
  std::string padded_key = key;
  padded_key.resize(Pad8(key.size()), '\0');
  const absl::string_view ids(reinterpret_cast<const char*>(corpus.ids.data()), 4 * corpus.ids.size());
  const absl::string_view flags(reinterpret_cast<const char*>(corpus.flags.data()), corpus.flags.size());
  absl::StatusOr<uint64_t> sum = Checksum(h, padded_key, ids, flags, stop);
  if (!sum.ok()) return sum.status();
  h.checksum = *sum;
  AtomicFile f;
  std::random_device random;
  absl::Status s = f.Open(path, absl::StrFormat("%s.tmp.%d.%08x", path, ::getpid(), random()));
  if (s.ok()) s = f.Append(&h, sizeof h);
  if (s.ok()) s = f.Append(padded_key.data(), padded_key.size());
  // The ids and flags in slices of 64 MiB, with a stop check between them (an abandoned
  // temporary file is removed by AtomicFile).
  for (absl::string_view part : {ids, flags}) {
    for (size_t done = 0; s.ok() && done < part.size(); done += kStopCheckBytes) {
      s = CheckStop(stop, absl::StrCat("writing the token cache ", EchoPath(path)));
      if (s.ok()) s = f.Append(part.data() + done, std::min(kStopCheckBytes, part.size() - done));
    }
  }
  if (s.ok()) s = f.Commit();
  return s;
}

}  // namespace slidedp
