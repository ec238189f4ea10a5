// Token cache: a tokenized corpus (ids, TokenFlag bytes, counts) on disk, so that a text
// dataset is tokenized once. A cache file is written atomically (temporary name, fsync,
// rename, directory fsync) and memory-mapped when read. Its name carries a hash of the
// key and its header the key itself: the dataset file (path, size, mtime, a hash of its
// bytes), the tokenizer's fingerprint and the encoder's settings (format, chat style,
// end token). A file whose key, size or checksum disagrees is reported, never trusted.
// Layout (host byte order, x86-64 little-endian):
//   header (64 bytes: "SLDPTOK\0", version, key bytes, tokens, documents, bad lines,
//   max id, checksum) | key, padded to 8 bytes | int32 ids[tokens] | uint8 flags[tokens]
// The checksum (a 64-bit hash) covers the header (checksum field zero) and all after it.
// Where caches live: data.cache_dir when set; otherwise `.slidedp-cache` beside the
// dataset file, then $XDG_CACHE_HOME/slidedp (or ~/.cache/slidedp) when that is not
// writable. Plain functions and an immutable source; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/data/corpus_tokenizer.h"
#include "runtime/data/data_file_mapping.h"
#include "runtime/data/token_source.h"

namespace slidedp {

inline constexpr uint32_t kTokenCacheVersion = 1;

class StopToken;

// A fast, stable 64-bit hash of `bytes` (not cryptographic), chained through `seed`.
uint64_t HashBytes(absl::string_view bytes, uint64_t seed = 0);
// The same value, checking `stop` (may be null) every 64 MiB: CANCELLED when it asks to
// stop.
absl::StatusOr<uint64_t> HashBytes(absl::string_view bytes, uint64_t seed, const StopToken* stop);

// The key of the dataset at `path` whose bytes are `content` and whose modification
// time is `mtime_ns`, tokenized by a tokenizer with `tokenizer_fingerprint` under
// encoder `settings`.
// CANCELLED when `stop` (may be null) asks to stop while the content is hashed.
absl::StatusOr<std::string> TokenCacheKey(const std::string& path, absl::string_view content,
                                          int64_t mtime_ns, uint64_t tokenizer_fingerprint,
                                          const std::string& settings, const StopToken* stop = nullptr);

// The directories to look in and write to, in order (see the top comment).
std::vector<std::string> TokenCacheDirs(const std::string& cache_dir, const std::string& data_path);

// "<basename of data_path>.<16 hex digits of the key's hash>.slidedp-tokens".
std::string TokenCacheFileName(const std::string& data_path, const std::string& key);

// A cache file, mapped; tokens are trusted (the caller checks max_id()).
class CachedTokenSource final : public TokenSource {
 public:
  int64_t size() const override { return tokens_; }
  absl::Status Read(int64_t start, absl::Span<int32_t> out) const override;
  std::string Describe() const override { return description_; }
  bool has_flags() const override { return true; }
  absl::Status ReadFlags(int64_t start, absl::Span<uint8_t> out) const override;

  int64_t documents() const { return documents_; }
  int64_t bad_lines() const { return bad_lines_; }
  int32_t max_id() const { return max_id_; }
  const std::string& path() const { return file_->path(); }
  void set_description(std::string description) { description_ = std::move(description); }

 private:
  friend absl::StatusOr<std::unique_ptr<CachedTokenSource>> OpenTokenCache(const std::string&,
                                                                           const std::string&,
                                                                           const StopToken*);
  CachedTokenSource() = default;

  std::unique_ptr<DataFileMapping> file_;
  const int32_t* ids_ = nullptr;
  const uint8_t* flags_ = nullptr;
  int64_t tokens_ = 0, documents_ = 0, bad_lines_ = 0;
  int32_t max_id_ = -1;
  std::string description_;
};

// Opens the cache at `path` for `key`. NotFound when there is no file; DataLoss naming
// the file and the fault when it is truncated, of another version or key, or fails
// its checksum (callers rebuild it); CANCELLED when `stop` (may be null) asks to stop
// while the checksum is verified.
absl::StatusOr<std::unique_ptr<CachedTokenSource>> OpenTokenCache(const std::string& path,
                                                                  const std::string& key,
                                                                  const StopToken* stop = nullptr);

// Writes `corpus` under `key` to `path` atomically, creating the directory. The error
// names the file and the cause; nothing is left behind on error (CANCELLED when `stop`
// asks to stop meanwhile).
absl::Status WriteTokenCache(const std::string& path, const std::string& key,
                             const TokenizedCorpus& corpus, const StopToken* stop = nullptr);

}  // namespace slidedp
