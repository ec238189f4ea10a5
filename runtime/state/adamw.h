// CPU AdamW over flat fp32 buffers: decoupled weight decay, bias correction, optional
// weight decay mask by range. Vectorized and multi-threaded; AdamWReference is the
// readable scalar definition that the fast path is tested against.
// Called from the engine's update thread; internally fans out to a thread pool.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/param_layout.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {

struct AdamWHyper {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;        // 1-based step for bias correction
  float grad_scale = 1.0f; // gradients are multiplied by this first (clipping)
};

// Exactly torch.optim.AdamW's arithmetic order, in fp32:
//   g = grad_scale * grad
//   p = p * (1 - lr * wd)
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   p = p - (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
// where the m and v updates are fused multiply-adds, fma(g, 1-b1, b1 m) and
// fma((1-b2) g, g, b2 v), as torch's vectorized CPU kernels compute them, every other
// op is rounded on its own, and the scalars are computed in double and rounded to fp32
// (see adamw_kernels.h). AdamWUpdate gives the same bits, for any thread count.
// Scalar, single-threaded: the reference.
void AdamWReference(const AdamWHyper& h, int64_t n, float* param, const float* grad,
                    float* m, float* v);

// Same arithmetic, vectorized, over `threads` threads (0: every CPU this process may use).
void AdamWUpdate(const AdamWHyper& h, int64_t n, float* param, const float* grad,
                 float* m, float* v, int threads = 0);

// AdamW with a bf16 gradient held in the streamed bf16 copy of the parameters: reads
// the gradient from `grad_then_param`, updates param (fp32 master), m and v as
// AdamWUpdate does, and writes the new parameters rounded to bf16 (to nearest even, as
// LibTorch converts) into `grad_then_param`. In one pass (AdamWOnePassTile), so every
// buffer is read and written once.
void AdamWUpdateBf16Grad(const AdamWHyper& h, int64_t n, float* param, uint16_t* grad_then_param,
                         float* m, float* v, int threads = 0);

// A range of elements with its own weight decay, relative to an update call's start.
struct DecaySpan {
  int64_t begin = 0;
  int64_t end = 0;
  float weight_decay = 0.0f;
};

// The spans of elements [begin, end) of `unit`: each parameter's overlap with the range,
// relative to `begin`, with its weight decay decay[i] (one per parameter of the unit).
std::vector<DecaySpan> DecaySpansOf(const UnitLayout& unit, const std::vector<float>& decay, int64_t begin,
                                    int64_t end);

// AdamW with the moments stored as `moments` says (moment_codec.h, optimizer.state_dtype)
// over elements [0, n): tile by tile, m and v are decoded to fp32, updated with exactly
// AdamWUpdate's arithmetic (each span of `spans`, which cover [0, n), with its own weight
// decay; h.weight_decay is not used) and encoded back, in one pass over memory (bf16
// moments: widened and narrowed inside the update's own loop, AdamWOnePassTile). The
// gradient is fp32 `grad`, or, when `grad` is null, bf16 in `grad_then_param`, which
// then receives the new parameters as AdamWUpdateBf16Grad writes them. `moments` points
// at element 0, which must start a quantization block (a multiple of kMomentBlock from
// the unit's start), and is element `first_index` of its unit (the 8-bit codes' random
// rounding follows the unit's indices, so any split of a unit into calls gives the same
// bits). The same bits for every thread count and instruction set; with fp32 moments,
// the same bits as AdamWUpdate / AdamWUpdateBf16Grad.
void AdamWUpdateStored(const AdamWHyper& h, const std::vector<DecaySpan>& spans, int64_t n,
                       float* param, const float* grad, uint16_t* grad_then_param,
                       const MomentView& moments, int64_t first_index, int threads = 0);

// The same, scalar and single-threaded: the reference the fast path is tested against.
void AdamWStoredReference(const AdamWHyper& h, const std::vector<DecaySpan>& spans, int64_t n,
                          float* param, const float* grad, uint16_t* grad_then_param,
                          const MomentView& moments, int64_t first_index);

// Sum of squares of `n` floats (double accumulation), vectorized, `threads` threads.
double SumSquares(const float* x, int64_t n, int threads = 0);
// The same over bf16 values (a gradient landed in the streamed copy), widened exactly.
double SumSquaresBf16(const uint16_t* x, int64_t n, int threads = 0);

}  // namespace slidedp
