// JSON-lines token corpora: one document per line, either an array of token ids
// `[1, 2, 3]` or an object `{"tokens": [1, 2, 3]}` (other keys ignored). Blank lines are
// skipped. Documents are concatenated in file order with no separator (the ids already
// carry any EOS) and held in memory as int32, every token a target, each document's
// first token flagged as a document start (for data.document_mask). Used from the
// trainer's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/data/token_source.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

struct JsonlTokens {
  std::vector<int32_t> tokens;
  int64_t documents = 0;  // non-blank lines
  std::vector<int64_t> document_starts;  // token offset of each document, ascending
};

// Parses `text`; `source` names the file in errors, which are "source:LINE: ..." for a
// line that is not valid JSON, not an array or {"tokens": array}, or holds an element
// that is not an integer in [0, vocab_size) (the element's index is named); CANCELLED
// once `stop` (may be null) is set.
absl::StatusOr<JsonlTokens> ParseJsonlTokens(absl::string_view text, const std::string& source,
                                             int64_t vocab_size, const StopToken* stop = nullptr);

// Reads and parses `path` (memory-mapped). Also an error: the file is missing, or it
// holds no tokens at all.
absl::StatusOr<std::unique_ptr<TokenSource>> LoadJsonlTokens(const std::string& path,
                                                             int64_t vocab_size,
                                                             const StopToken* stop = nullptr);

}  // namespace slidedp
