// The fused elementwise parts of a decoder block as autograd-aware ATen functions:
// RMSNorm (optionally with the residual add before it), RoPE and SwiGLU, each one
// kernel forward and one backward (fused_kernels.h) instead of ATen's chains of
// elementwise kernels and casts; the projections that share an input (q/k/v, gate/up) as
// one GEMM; the MLP's down projection without keeping the SwiGLU product for backward.
// Used by transformer.cc on the CUDA device; the CPU
// device keeps the ATen composition, which stays the exact reference. On CPU tensors
// these run the kernels' C++ reference (for tests). Called from a worker's thread on
// its current stream.
#pragma once

#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace slidedp {

// True when the fused kernels serve `x`: a bf16 CUDA tensor, a build with the CUDA
// kernels, and SLIDEDP_FUSED not set to 0 (the switch for A/B runs).
bool UseFusedOps(const at::Tensor& x);
// Turns the fused path on or off for the whole process (tests and A/B benchmarks; the
// default comes from SLIDEDP_FUSED).
void EnableFusedOps(bool on);

// Hugging Face's RMSNorm (weight * bf16(x * rstd)) of bf16 x [..., C] with weight [C].
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// (s, RmsNorm(s)) with s = x + residual in bf16, in one pass.
std::pair<at::Tensor, at::Tensor> FusedAddRmsNorm(const at::Tensor& x, const at::Tensor& residual,
                                                  const at::Tensor& weight, double eps);

// RoPE of x [B, T, heads, D] (the projection's layout; any strides, read in place where
// D's is 1) with fp32 tables cos/sin [T', D] (positions 0..T-1 used) or [B, 1, T, D] (per
// token); returns [B, heads, T, D] contiguous, attention's layout.
at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up.
at::Tensor FusedSwiglu(const at::Tensor& gate, const at::Tensor& up);

// The MLP's down projection of SwiGLU, down(silu(gate) * up) + down_b, with gate and up
// the two halves of gu [..., 2F] (FusedLinears over gate_proj and up_proj); down_w
// [H, F], down_b [H] or undefined; returns [..., H]. Autograd keeps gu and down_w but
// not the product [..., F], which backward recomputes with the SwiGLU kernel. The
// roundings are those of FusedSwiglu followed by at::linear. `output_unread`: forward
// computes neither the product nor the GEMM, and the output is an uninitialised tensor of
// its shape, for a caller that only back-propagates through it (a block or an MLP tile
// recomputed for its backward: RecomputedBlockBackward, TiledMlp); backward is the same.
// `down_sink` (fp32 [H, F], weight_grad.h): down_w's gradient is added there, not returned.
at::Tensor FusedSwigluDown(const at::Tensor& gu, const at::Tensor& down_w, const at::Tensor& down_b,
                           bool output_unread = false, const at::Tensor& down_sink = at::Tensor());

// Linears of one input as one GEMM: x [..., in] times weights[i] [out_i, in] stacked
// along their rows, plus biases[i] [out_i] stacked (all defined or all undefined);
// returns [..., sum out_i], output i in its columns out_0 + ... + out_{i-1} onward. Each
// weight and bias gets its own gradient. Where the weights lie back to back in one
// storage (a unit's flat buffer, param_layout.cc) the stack is a view of them, else a
// copy made in forward and again in backward (autograd keeps only x and the weights).
// `sinks` (empty, or one a weight, each fp32 in its weight's shape or undefined): a
// weight with a sink has its gradient added there (weight_grad.h), in one GEMM for all
// when the sinks lie back to back, and gets none from autograd.
at::Tensor FusedLinears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                        const std::vector<at::Tensor>& biases, const std::vector<at::Tensor>& sinks = {});

// The LM head's loss and gradients without autograd and without fp32 logits: logits =
// h [n, H] x w [V, H]^T in bf16, one chunk at a time (the caller chunks), cross-entropy
// against targets [n] (int64; kIgnoreIndex rows take no loss) in one kernel that turns
// the logits into their gradient in place, then the two GEMMs of the gradients.
struct LinearCrossEntropy {
  at::Tensor loss;  // fp32 scalar: scale x the sum of the rows' losses
  at::Tensor dh;    // [n, H], h's dtype
  at::Tensor dw;    // [V, H], w's dtype
};
// With `dw_sink` (fp32 [V, H]), w's gradient is added there where it can be
// (weight_grad.h) and `dw` is left undefined.
LinearCrossEntropy FusedLinearCrossEntropy(const at::Tensor& h, const at::Tensor& w,
                                           const at::Tensor& targets, double scale,
                                           const at::Tensor& dw_sink = at::Tensor());

}  // namespace slidedp
