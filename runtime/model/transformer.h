// Transformer math of one streaming unit, as plain ATen functions over views into the
// unit's flat parameter tensor (or per-parameter leaves over it, for backward).
// Stateless; called from each worker's thread on that worker's device and stream.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "runtime/model/ignore_index.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

// Views of a decoder block's parameters into `flat` (undefined tensors where absent).
// fp32 accumulators, views of a unit's gradient buffer in each projection weight's shape,
// that the fused path adds those weights' gradients to (weight_grad.h); undefined: the
// weights' leaves get their gradients from autograd, as the ATen composition's always do.
struct WeightSinks {
  at::Tensor q, k, v, o, gate, up, down;
};

struct BlockParams {
  at::Tensor input_norm, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, q_norm, k_norm;
  at::Tensor post_norm, gate_w, gate_b, up_w, up_b, down_w, down_b;
  WeightSinks sinks;
};

// Returns a view of parameter `index` of `unit` inside `flat` ([unit.numel]).
at::Tensor ParamView(const UnitLayout& unit, const at::Tensor& flat, int index);
// With `leaves`, every parameter is its own leaf requiring grad, made on first use and
// kept in (*leaves)[parameter index] (see UnitLayout::params), so that a caller can
// build several graphs over the same leaves and collect each parameter's gradient.
BlockParams ViewBlock(const UnitLayout& unit, const at::Tensor& flat,
                      std::vector<at::Tensor>* leaves = nullptr);
// Points p's sinks into `acc`, the unit's fp32 gradient accumulator [unit.numel].
void SinkWeights(const UnitLayout& unit, const at::Tensor& acc, BlockParams* p);

// cos and sin tables [seq_len, head_dim] in fp32 for positions 0..seq_len-1, with the
// config's rope_theta and rope scaling, as Hugging Face computes them.
struct RopeTables {
  at::Tensor cos, sin;
};
RopeTables MakeRope(const ModelConfig& config, int64_t seq_len, const at::Device& device);

// HF RMSNorm: computed in fp32, cast back, then scaled by the weight.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Where the tokens of a micro-batch [B, T] sit: the RoPE tables to apply and, with
// document masking, where each row's documents start.
struct TokenLayout {
  // MakeRope's [T', D] tables (T' >= T), the same for every row at positions 0..T-1;
  // or, with document masking, [B, 1, T, D] gathered at each token's position.
  RopeTables rope;
  // Empty: each row is one causal sequence. Otherwise per row the ascending offsets at
  // which its documents start (the first is 0): attention stays inside each document.
  std::vector<std::vector<int64_t>> doc_starts;
};

// The layout of a micro-batch with document masking. `positions` [B, T] int64 on the
// CPU: each token's position in its document, >= 0 (see TokenBatch::positions; a
// document starts at each 0 and at each row's start); `on_device`: the same tensor on
// the compute device, where the tables are gathered. `table` (MakeRope's, on that
// device) is rebuilt longer when a position lies past its end.
TokenLayout DocumentLayout(const ModelConfig& config, const at::Tensor& positions,
                           const at::Tensor& on_device, RopeTables* table);

// ids [B, T] (int64) -> hidden [B, T, H] in the table's dtype.
at::Tensor EmbeddingForward(const at::Tensor& table, const at::Tensor& ids);

// One decoder block: x [B, T, H] -> [B, T, H]. Causal attention over each row, or over
// each document of each row when `layout` has doc_starts (one attention call per
// document: no [T, T] mask is built, and fused kernels take the slices on CUDA). With
// mlp_tile > 0 (and < T), the MLP runs in sequence tiles of that many positions and is
// recomputed tile by tile in backward (tiled_mlp.h).
at::Tensor BlockForward(const ModelConfig& config, const BlockParams& p, const at::Tensor& x,
                        const TokenLayout& layout, int64_t mlp_tile = 0);

// BlockForward's path on the CUDA device with the fused kernels (fused_ops.h), which
// BlockForward takes where UseFusedOps(x); bf16 tensors. Callable on CPU tensors, where
// the kernels' C++ reference runs: the tests check the whole fused block there.
at::Tensor FusedBlockForward(const ModelConfig& config, const BlockParams& p, const at::Tensor& x,
                             const TokenLayout& layout, int64_t mlp_tile = 0);

// The backward of one block recomputed from its input (a block that kept only its
// input): x is a leaf that requires grad, dy the gradient of BlockForward's output; x's
// gradient lands in x.grad() and the parameters' in their leaves. The same gradients, bit
// for bit, as BlockForward(...).backward(dy), without computing what backward never
// reads: on the fused path, the MLP's down projection (its GEMM and the SwiGLU product
// before it), a quarter of a qwen2.5-3b block's forward FLOPs at 4096 positions
// (SLIDEDP_RECOMPUTE_WHOLE=1 in the environment computes them anyway, for A/B runs).
// The Fused form is callable on CPU tensors, as FusedBlockForward is.
void RecomputedBlockBackward(const ModelConfig& config, const BlockParams& p, const at::Tensor& x,
                             const TokenLayout& layout, int64_t mlp_tile, const at::Tensor& dy);
void FusedRecomputedBlockBackward(const ModelConfig& config, const BlockParams& p, const at::Tensor& x,
                                  const TokenLayout& layout, int64_t mlp_tile, const at::Tensor& dy);

// The head unit's final-norm weight and LM-head matrix: views into `head` ([numel] of
// the head unit), the LM head being the embedding table `table` (a view of unit 0's
// flat tensor) when the layout ties them.
struct HeadParams {
  at::Tensor norm, lm_head;
};
HeadParams ViewHead(const ModelLayout& layout, const at::Tensor& head, const at::Tensor& embedding);

// Final norm and LM head over hidden [B, t, H] -> logits [B, t, V] (fp32).
at::Tensor HeadLogits(const ModelConfig& config, const at::Tensor& norm_weight,
                      const at::Tensor& lm_head, const at::Tensor& hidden);

// Sum of token cross-entropies over targets != kIgnoreIndex, in fp32.
at::Tensor CrossEntropySum(const at::Tensor& logits, const at::Tensor& targets);

// The loss head's forward and backward over one chunk on the fused path, as the worker's
// step runs it (and calibration times it): the final norm through autograd (the leaves
// `hidden` [B, t, H] and `norm_weight` get their gradients), then the LM head and the
// loss in one pass over bf16 logits that become their own gradient
// (FusedLinearCrossEntropy, scaled by `scale`); lm_head's gradient is added to `lm_acc`
// (fp32, lm_head's shape): straight there with `sink` (weight_grad.h), else from bf16.
// Returns the loss, an fp32 scalar (scale x the sum over `targets` [B, t]).
at::Tensor FusedHeadBackward(const ModelConfig& config, const at::Tensor& norm_weight, const at::Tensor& lm_head,
                             const at::Tensor& hidden, const at::Tensor& targets, double scale,
                             const at::Tensor& lm_acc, bool sink);

}  // namespace slidedp
