// One element's AdamW: the per-step scalars it uses and its arithmetic, the definition
// every CPU kernel (adamw_kernels.h, in vector form simd_lanes.h) and the GPU kernels
// (adamw_device.cu, with explicitly rounded intrinsics) follow op for op.
// Threads: pure functions; any thread.
#pragma once

namespace slidedp {
namespace adamw_internal {

// The per-step scalars of AdamWHyper (adamw_kernels.h's MakeCoeffs computes them).
struct Coeffs {
  float grad_scale;  // g = grad_scale * grad
  float decay;       // 1 - lr * weight_decay
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// Whether bias2_sqrt is exactly 1 (from step 325 with beta2 0.95, 16628 with 0.999): the
// vector kernels then skip dividing by it, root / 1 being root (simd_lanes.h).
inline bool UnitBias2(const Coeffs& c) { return c.bias2_sqrt == 1.0f; }

// Forces `x` to be rounded to fp32 on its own: the compiler may not fuse the product
// that produced it into a following addition (torch runs those ops as separate kernels).
inline float Rounded(float x) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(x));
#else
  volatile float y = x;
  x = y;
#endif
  return x;
}

// The definition of one element's update, in torch's order (adamw.h). torch's CPU
// kernels for `m.mul_(b1).add_(g, 1 - b1)` and `v.mul_(b2).addcmul_(g, g, 1 - b2)` use
// a fused multiply-add, so this does too; everything else is rounded op by op.
inline void AdamWElement(const Coeffs& c, float* p, float g_raw, float* m, float* v, float* sqrt_v = nullptr) {
  const float g = c.grad_scale * g_raw;
  const float decayed = Rounded(*p * c.decay);
  const float m_new = __builtin_fmaf(g, c.one_minus_beta1, c.beta1 * *m);
  const float v_new = __builtin_fmaf(c.one_minus_beta2 * g, g, c.beta2 * *v);
  const float root = __builtin_sqrtf(v_new);
  if (sqrt_v != nullptr) *sqrt_v = root;
  const float denom = root / c.bias2_sqrt + c.eps;
  *p = decayed + (c.neg_step_size * m_new) / denom;
  *m = m_new;
  *v = v_new;
}

}  // namespace adamw_internal
}  // namespace slidedp
