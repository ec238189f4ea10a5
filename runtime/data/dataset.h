// Dataset: token sequences for training, packed into fixed-length rows, with a
// cursor that can be saved and restored exactly. Used from the trainer's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/train_config.h"

namespace slidedp {

inline constexpr int32_t kIgnoreIndex = -100;

// `rows` sequences of `seq_len` tokens; targets[i] is the token after inputs[i], or
// kIgnoreIndex where no loss is taken. Row-major [rows, seq_len].
// positions: empty unless the job asks for document masking. Otherwise the same shape
// as inputs: the position of each input token inside its own document (0 at a
// document's first token); a new document starts wherever positions[i] == 0 and at
// each row's start. The engine then attends only within each document and applies
// RoPE at these positions (as Hugging Face does for packed rows with position_ids).
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

// Opens the dataset `data` describes for sequences of `seq_len` tokens. Every token id
// must be < vocab_size (checked; the error names the file and position). An empty file,
// one shorter than seq_len + 1 tokens, or a corrupt one is a clear error.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, int64_t seq_len,
                                                     int64_t vocab_size, uint64_t seed);

}  // namespace slidedp
