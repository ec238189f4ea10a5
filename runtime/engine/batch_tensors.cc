// BatchTensors: see batch_tensors.h.
#include "runtime/engine/batch_tensors.h"

#include "absl/strings/str_cat.h"

namespace slidedp {

absl::Status CheckBatch(const TokenBatch& b) {
  const size_t n = static_cast<size_t>(b.rows * b.seq_len);
  if (b.rows < 0 || b.seq_len < 0 || b.inputs.size() != n || b.targets.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", b.rows, " x ", b.seq_len, " tokens has ",
                                                   b.inputs.size(), " inputs and ", b.targets.size(), " targets"));
  }
  if (b.positions.empty()) return absl::OkStatus();
  if (b.positions.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", n, " tokens has ", b.positions.size(), " positions"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (b.positions[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch position ", b.positions[i], " at row ",
                                                     i / b.seq_len, ", token ", i % b.seq_len, " is < 0"));
    }
  }
  return absl::OkStatus();
}

BatchTensors ToTensors(const TokenBatch& b) {
  BatchTensors t;
  t.inputs = at::empty({b.rows, b.seq_len}, at::kLong);
  t.targets = at::empty({b.rows, b.seq_len}, at::kLong);
  int64_t* in = t.inputs.data_ptr<int64_t>();
  int64_t* tg = t.targets.data_ptr<int64_t>();
  for (int64_t i = 0; i < b.rows * b.seq_len; ++i) {
    in[i] = b.inputs[i];
    tg[i] = b.targets[i];
    t.target_tokens += b.targets[i] != kIgnoreIndex;
  }
  if (!b.positions.empty()) {
    t.positions = at::empty({b.rows, b.seq_len}, at::kLong);
    int64_t* pos = t.positions.data_ptr<int64_t>();
    for (int64_t i = 0; i < b.rows * b.seq_len; ++i) pos[i] = b.positions[i];
  }
  return t;
}

}  // namespace slidedp
