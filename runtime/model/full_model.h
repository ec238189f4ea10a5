// FullModelLogits: the whole model's forward in one autograd graph with full logits,
// the plain path that the streaming engine is tested against (and a simple evaluator).
// Stateless; any thread.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

// `flats[u]` is unit u's flat parameter tensor ([layout.units[u].numel]); ids [B, T]
// int64. Returns logits [B, T, V] in fp32. Gradients flow into `flats`. `positions`
// (optional, [B, T] int64 on the CPU): document masking as TokenBatch::positions
// describes; undefined: each row is one sequence.
at::Tensor FullModelLogits(const ModelConfig& config, const ModelLayout& layout,
                           const std::vector<at::Tensor>& flats, const at::Tensor& ids,
                           const at::Tensor& positions = at::Tensor());

}  // namespace slidedp
