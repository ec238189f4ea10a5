// BatchTensors: a TokenBatch as int64 tensors [rows, seq_len] (what embedding and the
// loss take), with the number of targets that carry a loss. Trainer's thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/data/dataset.h"

namespace slidedp {

struct BatchTensors {
  at::Tensor inputs;
  at::Tensor targets;
  at::Tensor positions;       // undefined without document masking (TokenBatch::positions)
  int64_t target_tokens = 0;  // targets != kIgnoreIndex
};

// InvalidArgument naming the first offending index when `batch` is not of shape
// [rows, seq_len] or has positions of another shape or < 0.
absl::Status CheckBatch(const TokenBatch& batch);

// `batch` must pass CheckBatch.
BatchTensors ToTensors(const TokenBatch& batch);

}  // namespace slidedp
