// BatchTensors: a TokenBatch as int64 tensors [rows, seq_len] (what embedding and the
// loss take), with the number of targets that carry a loss. Trainer's thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "runtime/data/dataset.h"

namespace slidedp {

struct BatchTensors {
  at::Tensor inputs;
  at::Tensor targets;
  int64_t target_tokens = 0;  // targets != kIgnoreIndex
};

BatchTensors ToTensors(const TokenBatch& batch);

}  // namespace slidedp
