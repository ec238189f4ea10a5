// Text datasets: a `text`, `prompt_completion` or `chat` JSON-lines file as a
// TokenSource with flags. Finds the tokenizer (data.tokenizer, else the model
// directory's tokenizer.json), builds the DocumentEncoder of the model's family, looks
// for a valid token cache (token_cache.h) and, when there is none, tokenizes the file
// (corpus_tokenizer.h) and writes one. Used from the trainer's thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/data/corpus_tokenizer.h"
#include "runtime/data/dataset.h"
#include "runtime/data/token_source.h"

namespace slidedp {

// The tokenizer.json to load: `tokenizer` when set (a file, or a directory holding
// tokenizer.json), else the one in `model_dir`. FailedPrecondition saying what to set
// when there is none.
absl::StatusOr<std::string> ResolveTokenizerPath(const std::string& tokenizer,
                                                 const std::string& model_dir);

// Opens the text dataset at `path` (data.path or data.eval_path) in data.format, with
// data.tokenizer, data.cache_dir and data.skip_bad_lines. Errors: no tokenizer, a
// missing special token, a malformed record ("path:LINE: what"), no usable documents,
// a token id not below model.vocab_size, and a data.cache_dir that cannot be written
// (the default folders only warn on stderr and keep the tokens in memory).
// Describe() names the counts, the tokenizer and the cache, with "cache reused" or
// "cache written".
absl::StatusOr<std::unique_ptr<TokenSource>> OpenTextSource(const DataConfig& data,
                                                            const std::string& path,
                                                            const DataModel& model,
                                                            const CorpusOptions& options = {});

}  // namespace slidedp
