// The learning-rate schedule of a job: linear warmup, then constant, linear or cosine
// decay to lr * min_lr_ratio, as OptimizerConfig describes it.
// Pure function; any thread.
#pragma once

#include <cstdint>

#include "runtime/train_config.h"

namespace slidedp {

// The learning rate of the update made by step `step` (0-based) of a job of
// `total_steps` steps:
//   warmup (step < warmup_steps):  lr * (step + 1) / warmup_steps
//   then, with t = (step - warmup_steps) / max(1, total_steps - warmup_steps) in [0, 1]:
//     "constant": lr
//     "linear":   lr * (r + (1 - r) * (1 - t))
//     "cosine":   lr * (r + (1 - r) * (1 + cos(pi t)) / 2)
//   where r = min_lr_ratio, so decay reaches lr * r at step == total_steps (and stays
// there past it). A negative `step` counts as 0.
double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps);

}  // namespace slidedp
