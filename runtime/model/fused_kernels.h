// Fused elementwise kernels of a decoder block (RMSNorm with an optional residual add,
// RoPE, SwiGLU), forward and backward, over raw bf16 buffers (uint16_t bit patterns)
// with fp32 math. Two implementations with one contract: the CUDA kernels
// (fused_kernels_device.cuh, launched by fused_kernels.cu, built with a CUDA LibTorch;
// `stream` is a cudaStream_t) and a plain C++ reference (fused_kernels_cpu.cc; `stream`
// ignored) that the CPU tests use to check the autograd glue of fused_ops.h. No LibTorch here. Called from the thread that
// owns the stream.
#pragma once

#include <cstdint>

namespace slidedp::fused {

// y = w * bf16(s * rstd), s = x (residual null) or bf16(x + residual), rstd =
// 1/sqrt(mean(s^2) + eps) per row of `cols`; writes s to `sum` when residual is given,
// and rstd [rows] in fp32. x, residual, sum, y: [rows, cols] contiguous; w: [cols].
struct RmsNormArgs {
  const uint16_t* x;
  const uint16_t* residual;  // nullable
  const uint16_t* w;
  uint16_t* sum;             // written when residual != nullptr
  uint16_t* y;
  float* rstd;
  int64_t rows;
  int64_t cols;
  float eps;
};

// Gradients of RmsNorm: dx = rstd * (dn - n * mean(dn * n)) with n = s * rstd and
// dn = dy * w, plus `dsum` (the gradient reaching s from its other uses; nullable);
// dw_partial [parts, cols] fp32 holds per-part sums of dy * bf16(n), to be summed over
// parts by the caller. `parts` comes from RmsNormBackwardParts.
struct RmsNormGradArgs {
  const uint16_t* dy;
  const uint16_t* s;
  const uint16_t* w;
  const float* rstd;
  const uint16_t* dsum;  // nullable
  uint16_t* dx;
  float* dw_partial;
  int parts;
  int64_t rows;
  int64_t cols;
};

// RoPE on q or k: out = x * cos + rotate_half(x) * sin with the fp32 tables rounded to
// bf16 first (as Hugging Face applies them in the compute dtype), fp32 math, one
// rounding. Element (b, h, t, d) lives at in + b*in_b + h*in_h + t*in_t + d and goes to
// out + b*out_b + h*out_h + t*out_t + d. Tables: [*, D] rows; the row of (b, t) is
// t (table_row_b == 0, shared) or b*T + t (table_row_b == T, per token).
// backward: the inverse rotation (out = dx from in = dy).
struct RopeArgs {
  const uint16_t* in;
  uint16_t* out;
  const float* cos;
  const float* sin;
  int64_t B, H, T, D;
  int64_t in_b, in_h, in_t;
  int64_t out_b, out_h, out_t;
  int64_t table_row_b;
  bool backward;
};

// out = bf16(silu(gate) * up) over [rows, cols]: out contiguous; gate and up with rows
// `ld` elements apart (ld == cols: contiguous; ld == 2 * cols: the two halves of one
// [rows, 2 * cols] tensor, as FusedLinears makes gate and up). The lean MLP's backward
// recomputes its product with this kernel.
struct SwigluArgs {
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* out;
  int64_t rows;
  int64_t cols;
  int64_t ld;
};
// dgate = dy * up * silu'(gate), dup = dy * silu(gate): dy contiguous [rows, cols];
// gate, up, dgate and dup with rows `ld` elements apart, as in SwigluArgs.
struct SwigluGradArgs {
  const uint16_t* dy;
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* dgate;
  uint16_t* dup;
  int64_t rows;
  int64_t cols;
  int64_t ld;
};

// Cross-entropy over bf16 logits [rows, vocab] (fp32 math), in place: each row's logits
// become its gradient (softmax - onehot(target)) * scale in bf16, and loss[row] =
// logsumexp - logit[target] (fp32; 0 and a zero gradient row where target ==
// ignore_index). A NaN or inf among a row's logits makes its loss non-finite.
struct CrossEntropyArgs {
  uint16_t* logits;
  const int64_t* targets;
  float* loss;
  float scale;
  int64_t rows;
  int64_t vocab;
  int64_t ignore_index;
};

namespace cpu {
void RmsNorm(const RmsNormArgs& a);
int RmsNormBackwardParts(int64_t rows);
void RmsNormBackward(const RmsNormGradArgs& a);
void Rope(const RopeArgs& a);
void Swiglu(const SwigluArgs& a);
void SwigluBackward(const SwigluGradArgs& a);
void CrossEntropy(const CrossEntropyArgs& a);
}  // namespace cpu

namespace cuda {
// Each returns a message naming the failed launch, or nullptr.
const char* RmsNorm(const RmsNormArgs& a, void* stream);
int RmsNormBackwardParts(int64_t rows);
const char* RmsNormBackward(const RmsNormGradArgs& a, void* stream);
const char* Rope(const RopeArgs& a, void* stream);
const char* Swiglu(const SwigluArgs& a, void* stream);
const char* SwigluBackward(const SwigluGradArgs& a, void* stream);
const char* CrossEntropy(const CrossEntropyArgs& a, void* stream);
}  // namespace cuda

}  // namespace slidedp::fused
