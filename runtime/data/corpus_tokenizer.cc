// TokenizeCorpus: see corpus_tokenizer.h.
#include "runtime/data/corpus_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/io/stop_token.h"
#include "runtime/io/file_access.h"
#include "runtime/state/thread_pool.h"

namespace slidedp {
namespace {

std::atomic<int64_t> g_runs{0};

// One chunk's share: its lines encoded, or its first bad line.
struct Chunk {
  absl::string_view text;
  int64_t lines = 0;
  TokenizedCorpus out;
  int64_t error_line = 0;  // 1-based within the chunk; 0: none (or skipped)
  std::string error;
};

// Line-aligned pieces of `text` of about `target` bytes.
std::vector<Chunk> SplitChunks(absl::string_view text, int64_t target) {
  std::vector<Chunk> chunks;
  while (!text.empty()) {
    size_t end = std::min<size_t>(text.size(), static_cast<size_t>(target));
    if (end < text.size()) {
      const size_t nl = text.find('\n', end - 1);
      end = nl == absl::string_view::npos ? text.size() : nl + 1;
    }
    chunks.emplace_back();
    chunks.back().text = text.substr(0, end);
    text.remove_prefix(end);
  }
  return chunks;
}

// At most one stderr line a second, from whichever thread finishes a chunk.
class Progress {
 public:
  Progress(const std::string& source, int64_t total, bool enabled)
      : source_(source), total_(total), enabled_(enabled), start_(Clock::now()) {}

  void Add(int64_t bytes, int64_t documents, int64_t bad) {
    bytes_ += bytes;
    documents_ += documents;
    bad_ += bad;
    const int64_t now = Millis();
    int64_t last = last_ms_.load();
    if (!enabled_ || now - last < 1000 || !last_ms_.compare_exchange_strong(last, now)) return;
    Print(now, "");
  }

  // The closing line, if any progress line was printed.
  void Finish() {
    if (last_ms_.load() > 0) Print(Millis(), ", done");
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t Millis() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
  }
  void Print(int64_t ms, const char* tail) const {
    const double mb = bytes_.load() / 1e6;
    std::fprintf(stderr, "tokenizing %s: %.1f of %.1f MB, %.1f MB/s, %lld documents, %lld bad lines%s\n",
                 source_.c_str(), mb, total_ / 1e6, mb / std::max(ms, int64_t{1}) * 1e3,
                 static_cast<long long>(documents_.load()), static_cast<long long>(bad_.load()), tail);
  }

  const std::string& source_;
  const int64_t total_;
  const bool enabled_;
  const Clock::time_point start_;
  std::atomic<int64_t> bytes_{0}, documents_{0}, bad_{0}, last_ms_{0};
};

// Returns false when stopped part-way.
bool EncodeChunk(const DocumentEncoder& encoder, bool skip, const StopToken* stop, Chunk& chunk) {
  BpeCache cache;
  absl::string_view text = chunk.text;
  while (!text.empty()) {
    if (StopRequested(stop)) return false;
    ++chunk.lines;
    const size_t end = text.find('\n');
    absl::string_view line = absl::StripAsciiWhitespace(text.substr(0, end));
    text.remove_prefix(end == absl::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    absl::StatusOr<TextRecord> record = ParseTextRecord(line, encoder.format());
    if (!record.ok()) {
      if (chunk.error_line == 0) {
        chunk.error_line = chunk.lines;
        chunk.error = std::string(record.status().message());
      }
      if (!skip) return true;
      ++chunk.out.bad_lines;
      continue;
    }
    encoder.Encode(*record, &chunk.out.ids, &chunk.out.flags, &cache);
    ++chunk.out.documents;
  }
  return true;
}

}  // namespace

int64_t TokenizeCorpusRuns() { return g_runs.load(); }

absl::StatusOr<TokenizedCorpus> TokenizeCorpus(absl::string_view text, const std::string& source,
                                               const DocumentEncoder& encoder,
                                               const CorpusOptions& options) {
  ++g_runs;
  std::vector<Chunk> chunks = SplitChunks(text, std::max<int64_t>(options.chunk_bytes, 1));
  const int threads = options.threads > 0 ? options.threads : std::min(AvailableCpus(), 16);
  Progress progress(source, static_cast<int64_t>(text.size()), options.progress);
  const int64_t n = static_cast<int64_t>(chunks.size());
  std::atomic<int64_t> first_failed{n};  // chunks after a failed one need not run
  {
    ThreadPool pool(static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1))));
    pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        if (c > first_failed.load() || StopRequested(options.stop)) continue;
        if (!EncodeChunk(encoder, options.skip_bad_lines, options.stop, chunks[c])) continue;
        if (!options.skip_bad_lines && chunks[c].error_line > 0) {
          int64_t seen = first_failed.load();
          while (c < seen && !first_failed.compare_exchange_weak(seen, c)) {
          }
        }
        progress.Add(chunks[c].text.size(), chunks[c].out.documents, chunks[c].out.bad_lines);
      }
    });
  }
  progress.Finish();
  if (absl::Status s = CheckStop(options.stop, absl::StrCat("tokenizing ", source)); !s.ok()) return s;
  TokenizedCorpus corpus;
  int64_t lines_before = 0;
  for (Chunk& chunk : chunks) {
    if (chunk.error_line > 0 && corpus.first_bad_line.empty()) {
      std::string where = absl::StrCat(EchoPath(source), ":", lines_before + chunk.error_line, ": ", chunk.error);
      if (!options.skip_bad_lines) return absl::InvalidArgumentError(where);
      corpus.first_bad_line = std::move(where);
    }
    lines_before += chunk.lines;
    corpus.ids.insert(corpus.ids.end(), chunk.out.ids.begin(), chunk.out.ids.end());
    corpus.flags.insert(corpus.flags.end(), chunk.out.flags.begin(), chunk.out.flags.end());
    corpus.documents += chunk.out.documents;
    corpus.bad_lines += chunk.out.bad_lines;
    chunk.out = TokenizedCorpus();  // frees as it goes
  }
  if (corpus.documents == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: no usable documents (%d bad lines skipped%s%s)", EchoPath(source), corpus.bad_lines,
        corpus.first_bad_line.empty() ? "" : "; first: ", corpus.first_bad_line));
  }
  for (int32_t id : corpus.ids) corpus.max_id = std::max(corpus.max_id, id);
  return corpus;
}

}  // namespace slidedp
