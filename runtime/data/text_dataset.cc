// Text datasets: see text_dataset.h.
#include "runtime/data/text_dataset.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/data/data_file_mapping.h"
#include "runtime/data/document_encoder.h"
#include "runtime/data/token_cache.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/io/stop_token.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

// The tokens: a mapped cache, or (when no cache folder could be written) in memory.
struct Opened {
  std::unique_ptr<CachedTokenSource> cache;
  TokenizedCorpus memory;  // when cache is null
  int64_t tokens = 0, documents = 0, bad_lines = 0;
  int32_t max_id = -1;
  std::string where;  // "cache reused PATH", "cache written PATH" or "no cache"
};

absl::StatusOr<int64_t> ModificationTimeNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot stat ", path));
  }
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// A valid cache among `dirs`, or null (stale or corrupt ones are reported and left
// for the rebuild to replace).
// CANCELLED when `stop` asks to stop while a cache is verified.
absl::StatusOr<std::unique_ptr<CachedTokenSource>> FindCache(const std::vector<std::string>& dirs,
                                                             const std::string& name, const std::string& key,
                                                             const StopToken* stop) {
  for (const std::string& dir : dirs) {
    absl::StatusOr<std::unique_ptr<CachedTokenSource>> cache = OpenTokenCache(dir + "/" + name, key, stop);
    if (cache.ok()) return *std::move(cache);
    if (absl::IsCancelled(cache.status())) return cache.status();
    if (!absl::IsNotFound(cache.status())) {
      std::fprintf(stderr, "%s; tokenizing again\n", std::string(cache.status().message()).c_str());
    }
  }
  return std::unique_ptr<CachedTokenSource>();
}

// Writes `corpus` into the first folder of `dirs` that takes it and maps it back.
absl::StatusOr<Opened> StoreCorpus(TokenizedCorpus corpus, const std::vector<std::string>& dirs,
                                   const std::string& name, const std::string& key,
                                   bool explicit_dir, const StopToken* stop) {
  std::string failures;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + name;
    absl::Status s = WriteTokenCache(path, key, corpus, stop);
    absl::StatusOr<std::unique_ptr<CachedTokenSource>> cache =
        s.ok() ? OpenTokenCache(path, key, stop) : absl::StatusOr<std::unique_ptr<CachedTokenSource>>(s);
    if (absl::IsCancelled(cache.status())) return cache.status();
    if (cache.ok()) {
      return Opened{*std::move(cache), {}, static_cast<int64_t>(corpus.ids.size()),
                    corpus.documents, corpus.bad_lines, corpus.max_id, "cache written " + path};
    }
    absl::StrAppend(&failures, failures.empty() ? "" : "; ", cache.status().message());
  }
  if (explicit_dir) {
    return absl::PermissionDeniedError(absl::StrCat("data.cache_dir: ", failures));
  }
  std::fprintf(stderr, "no token cache written (%s); keeping the tokens in memory\n",
               failures.c_str());
  const int64_t tokens = static_cast<int64_t>(corpus.ids.size());
  const int64_t documents = corpus.documents, bad_lines = corpus.bad_lines;
  const int32_t max_id = corpus.max_id;
  return Opened{nullptr, std::move(corpus), tokens, documents, bad_lines, max_id, "no cache"};
}

// Tokens of `path`, from a cache or freshly tokenized.
absl::StatusOr<Opened> LoadTokens(const DataConfig& data, const std::string& path,
                                  const DocumentEncoder& encoder, const CorpusOptions& options) {
  absl::StatusOr<std::unique_ptr<DataFileMapping>> file = DataFileMapping::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<int64_t> mtime = ModificationTimeNs(path);
  if (!mtime.ok()) return mtime.status();
  const absl::string_view text(reinterpret_cast<const char*>((*file)->data()), (*file)->size());
  absl::StatusOr<std::string> keyed = TokenCacheKey(path, text, *mtime, encoder.tokenizer().fingerprint(),
                                                    encoder.Settings(), options.stop);
  if (!keyed.ok()) return keyed.status();
  const std::string& key = *keyed;
  // Hashing a large file takes a while: a stop asked meanwhile is seen here.
  if (absl::Status st = CheckStop(options.stop, absl::StrCat("reading ", path)); !st.ok()) return st;
  const std::vector<std::string> dirs = TokenCacheDirs(data.cache_dir, path);
  const std::string name = TokenCacheFileName(path, key);
  absl::StatusOr<std::unique_ptr<CachedTokenSource>> found = FindCache(dirs, name, key, options.stop);
  if (!found.ok()) return found.status();
  std::unique_ptr<CachedTokenSource> cache = *std::move(found);
  // A cache that skipped bad lines is no answer for a job that must fail on them.
  if (cache != nullptr && (cache->bad_lines() == 0 || data.skip_bad_lines)) {
    const int64_t tokens = cache->size(), documents = cache->documents();
    const int64_t bad_lines = cache->bad_lines();
    const int32_t max_id = cache->max_id();
    std::string where = "cache reused " + cache->path();
    return Opened{std::move(cache), {}, tokens, documents, bad_lines, max_id, std::move(where)};
  }
  if (absl::Status st = CheckStop(options.stop, absl::StrCat("reading ", path)); !st.ok()) return st;
  CorpusOptions corpus_options = options;
  corpus_options.skip_bad_lines = data.skip_bad_lines;
  absl::StatusOr<TokenizedCorpus> corpus = TokenizeCorpus(text, path, encoder, corpus_options);
  if (!corpus.ok()) return corpus.status();
  if (!corpus->first_bad_line.empty()) {
    std::fprintf(stderr, "skipped %lld bad lines; the first: %s\n",
                 static_cast<long long>(corpus->bad_lines), corpus->first_bad_line.c_str());
  }
  return StoreCorpus(*std::move(corpus), dirs, name, key, !data.cache_dir.empty(), options.stop);
}

}  // namespace

absl::StatusOr<std::string> ResolveTokenizerPath(const std::string& tokenizer,
                                                 const std::string& model_dir) {
  std::error_code ec;
  if (!tokenizer.empty()) {
    const std::string file = fs::is_directory(tokenizer, ec) ? tokenizer + "/tokenizer.json" : tokenizer;
    if (!fs::is_regular_file(file, ec)) {
      return absl::FailedPreconditionError(absl::StrCat("data.tokenizer: ", file, " does not exist"));
    }
    return file;
  }
  if (model_dir.empty()) {
    return absl::FailedPreconditionError(
        "data.tokenizer must be set (a tokenizer.json or a directory holding one): the model is "
        "a preset, without a tokenizer");
  }
  const std::string file = model_dir + "/tokenizer.json";
  if (!fs::is_regular_file(file, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model directory ", model_dir,
        " has no tokenizer.json; set data.tokenizer (a tokenizer.json or a directory holding one)"));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<TokenSource>> OpenTextSource(const DataConfig& data,
                                                            const std::string& path,
                                                            const DataModel& model,
                                                            const CorpusOptions& options) {
  absl::StatusOr<TextFormat> format = TextFormatOf(data.format);
  if (!format.ok()) return absl::InvalidArgumentError(absl::StrCat("data.format: ", format.status().message()));
  absl::StatusOr<std::string> tokenizer_path = ResolveTokenizerPath(data.tokenizer, model.directory);
  if (!tokenizer_path.ok()) return tokenizer_path.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(*tokenizer_path);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<DocumentEncoder> encoder = DocumentEncoder::Create(**tokenizer, *format, model.family);
  if (!encoder.ok()) return encoder.status();
  absl::StatusOr<Opened> opened = LoadTokens(data, path, *encoder, options);
  if (!opened.ok()) return opened.status();
  if (opened->max_id >= model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokenizer %s produces token id %d, not below the model's vocab_size %d",
        path, *tokenizer_path, opened->max_id, model.vocab_size));
  }
  std::string description = absl::StrFormat(
      "%s %s (%s tokens in %d documents%s; tokenizer %s, %s; %s)", NameOf(data.format), path,
      FormatTokenCount(opened->tokens), opened->documents,
      opened->bad_lines > 0 ? absl::StrFormat(", %d bad lines skipped", opened->bad_lines) : "",
      *tokenizer_path, FamilyName(model.family), opened->where);
  if (opened->cache != nullptr) {
    opened->cache->set_description(std::move(description));
    return std::unique_ptr<TokenSource>(std::move(opened->cache));
  }
  return std::unique_ptr<TokenSource>(new InMemoryTokenSource(
      std::move(opened->memory.ids), std::move(description), std::move(opened->memory.flags)));
}

}  // namespace slidedp
