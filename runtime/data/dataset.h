// Dataset: token sequences for training, packed into fixed-length rows, with a
// cursor that can be saved and restored exactly. Used from the trainer's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/ignore_index.h"
#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

// `rows` sequences of `seq_len` tokens; targets[i] is the token after inputs[i], or
// kIgnoreIndex where no loss is taken. Row-major [rows, seq_len]. `positions` is empty
// unless data.document_mask is set; then it has the shape of inputs and holds each
// input's position inside its document, 0 where a document starts and at the first
// token of every row (see packed_dataset.h): attention must not cross a 0.
struct TokenBatch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  std::vector<int32_t> positions;  // see above
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // The next `rows` packed sequences. Wraps to a new (reshuffled) epoch at the end.
  virtual absl::StatusOr<TokenBatch> Next(int64_t rows) = 0;

  // Opaque, serialized position (epoch, offset, seed); Restore(Cursor()) on a freshly
  // opened dataset of the same file and settings continues with the identical batches.
  virtual std::string Cursor() const = 0;
  virtual absl::Status Restore(const std::string& cursor) = 0;

  // Human-readable description for logs, e.g. "tokens /data/x.bin (12.3M tokens)".
  virtual std::string Describe() const = 0;
};

// What the data needs to know of the model.
struct DataModel {
  int64_t vocab_size = 0;
  ModelFamily family = ModelFamily::kQwen2;  // picks the chat format and end token
  std::string directory;  // a Hugging Face model directory (its tokenizer.json), or ""
};

// Opens the dataset `data` describes for sequences of `seq_len` tokens. Every token id
// must be < model.vocab_size (checked; the error names the file and position). An
// empty file, one shorter than seq_len + 1 tokens, or a corrupt one is a clear error.
// Text formats: see text_dataset.h. Parsing and tokenizing return CANCELLED soon after
// `stop` (may be null) is set.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, const DataModel& model,
                                                     int64_t seq_len, uint64_t seed,
                                                     const StopToken* stop = nullptr);

// The same for a model known only by its vocabulary (a Qwen2-family preset, no
// directory): the token formats, and text formats with data.tokenizer.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, int64_t seq_len,
                                                     int64_t vocab_size, uint64_t seed);

// The held-out evaluation data: data.eval_path in data.format (with the same tokenizer,
// cache and document_mask settings), in file order, never shuffled. An evaluation that
// must see the same batches each time saves Cursor() right after opening and Restores
// it before each pass. FailedPrecondition when data.eval_path is empty.
absl::StatusOr<std::unique_ptr<Dataset>> OpenEvalDataset(const DataConfig& data,
                                                         const DataModel& model, int64_t seq_len,
                                                         uint64_t seed, const StopToken* stop = nullptr);

}  // namespace slidedp
