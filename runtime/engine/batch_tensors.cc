// BatchTensors: see batch_tensors.h.
#include "runtime/engine/batch_tensors.h"

namespace slidedp {

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
  return t;
}

}  // namespace slidedp
