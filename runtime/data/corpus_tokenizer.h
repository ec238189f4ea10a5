// TokenizeCorpus: a whole `text`, `prompt_completion` or `chat` JSON-lines file (its
// bytes) to token ids and TokenFlag bytes, one DocumentEncoder document per non-blank
// line, on several threads. The file is cut into line-aligned chunks that threads
// encode independently and that are joined in file order, so the result is identical
// for any thread count. While it runs, a progress line goes to stderr at most once a
// second (bytes done of total, MB/s, documents, bad lines).
// TokenizeCorpus may be called from any thread; it runs its own ThreadPool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/data/document_encoder.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

struct TokenizedCorpus {
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;  // one TokenFlag byte per id
  int64_t documents = 0;
  int64_t bad_lines = 0;       // skipped (skip_bad_lines)
  int32_t max_id = -1;
  std::string first_bad_line;  // "file:LINE: what" of the first skipped line, or ""
};

struct CorpusOptions {
  bool skip_bad_lines = false;  // else the first bad line is the error
  int threads = 0;              // 0: the available CPUs, at most 16
  int64_t chunk_bytes = int64_t{1} << 22;  // work unit of one thread (> 0)
  bool progress = true;         // the stderr line
  const StopToken* stop = nullptr;  // set: every thread stops at its next line, CANCELLED
};

// Encodes every non-blank line of `text`. `source` names the file in errors, which are
// InvalidArgument "source:LINE: what" for the first malformed record (without
// skip_bad_lines) and "source: no usable documents" when nothing is left.
absl::StatusOr<TokenizedCorpus> TokenizeCorpus(absl::string_view text, const std::string& source,
                                               const DocumentEncoder& encoder,
                                               const CorpusOptions& options = {});

// How many times TokenizeCorpus has run in this process (a hook for tests of caches).
int64_t TokenizeCorpusRuns();

}  // namespace slidedp
