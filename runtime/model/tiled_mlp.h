// TiledMlp: a decoder block's gated MLP, down(silu(gate(h)) * up(h)), computed in
// sequence tiles so that its [rows, tile, FFN] intermediates are the largest tensors it
// makes: a [rows, T, FFN] tensor never exists whole. In backward each tile is recomputed
// from its input (checkpointing inside the layer), so autograd keeps only the MLP's input
// and its weights between forward and backward. Stateless; called from a worker's thread
// on that worker's device and stream, like the rest of transformer.h.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace slidedp {

struct MlpWeights {
  at::Tensor gate_w, gate_b, up_w, up_b, down_w, down_b;  // biases may be undefined
};

// Fused only: fp32 accumulators in the weights' shapes that take their gradients
// (weight_grad.h; those weights then get none from autograd), or undefined.
struct MlpSinks {
  at::Tensor gate, up, down;
};

// h [B, T, H] -> [B, T, H]. `tile` <= 0 or >= T computes it whole (plain autograd, no
// recompute); otherwise in tiles of `tile` positions (the last one shorter). Gradients of
// the weights are summed over tiles in fp32 and rounded once to the weights' dtype.
// With `fused` (fused_ops.h: bf16 tensors), gate and up are one GEMM and the untiled
// MLP keeps for backward its input, gate | up [rows, T, 2 * FFN] and the weights, not
// the SwiGLU product; the overload without it fuses where UseFusedOps(h). Fused, each
// tile's recompute in backward skips the down projection's GEMM (only its gradients are
// wanted). `output_unread`: the caller only back-propagates through the output
// (RecomputedBlockBackward): whole and fused, its values are not computed
// (FusedSwigluDown's output_unread); tiled or unfused, they are. `sinks` (fused only):
// the three weights' gradients, whole or summed over the tiles, are added there in fp32
// and autograd gives those weights none.
at::Tensor TiledMlp(const MlpWeights& w, const at::Tensor& h, int64_t tile, bool fused, bool output_unread = false,
                    const MlpSinks& sinks = MlpSinks());
at::Tensor TiledMlp(const MlpWeights& w, const at::Tensor& h, int64_t tile);

// The tile the policy uses when the job does not fix one: the whole sequence while one
// [rows, T, FFN] intermediate of `element_bytes` stays under `budget_bytes`, else the
// largest multiple of 256 positions (at least 256) that does.
int64_t AutoMlpTile(int64_t rows, int64_t seq_len, int64_t ffn, int64_t element_bytes,
                    int64_t budget_bytes = int64_t{1} << 30);

}  // namespace slidedp
