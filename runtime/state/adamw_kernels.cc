// Per-instruction-set inner loops of AdamW and the sum of squares; see adamw_kernels.h.
// The AVX2 and AVX-512 bodies are compiled for their instruction set with target
// attributes and only called after __builtin_cpu_supports says the CPU has it (in the
// test build over SIMDe, simd_lanes.h, on any CPU). Each
// vector body does AdamWElement's operations lane by lane; the remainder goes through
// AdamWElement itself, so the split point changes no result.
#include "runtime/state/adamw_kernels.h"

#include <cmath>

#include "runtime/state/simd_lanes.h"

namespace slidedp {
namespace adamw_internal {
namespace {

void AdamWScalar(const Coeffs& c, int64_t n, float* p, const float* g, float* m, float* v, float* sv) {
  for (int64_t i = 0; i < n; ++i) AdamWElement(c, p + i, g[i], m + i, v + i, sv != nullptr ? sv + i : nullptr);
}

double SumSquaresScalar(const float* x, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// Moments as stored for AdamWOnePassTile: fp32, or bf16 bits widened and narrowed.
inline float LoadMoment(const float* x) { return *x; }
inline float LoadMoment(const uint16_t* x) { return WidenBf16(*x); }
inline void StoreMoment(float* x, float y) { *x = y; }
inline void StoreMoment(uint16_t* x, float y) { *x = Bf16Bits(y); }

// One element of AdamWOnePassTile.
template <typename Moment>
inline void OnePassElement(const Coeffs& c, int64_t i, float* p, const float* grad, uint16_t* gp, Moment* m,
                           Moment* v) {
  float mi = LoadMoment(m + i), vi = LoadMoment(v + i);
  AdamWElement(c, p + i, grad != nullptr ? grad[i] : WidenBf16(gp[i]), &mi, &vi);
  StoreMoment(m + i, mi);
  StoreMoment(v + i, vi);
  if (grad == nullptr) gp[i] = Bf16Bits(p[i]);
}

template <typename Moment>
void OnePassScalar(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp, Moment* m, Moment* v) {
  for (int64_t i = 0; i < n; ++i) OnePassElement(c, i, p, grad, gp, m, v);
}

#ifdef SLIDEDP_X86_KERNELS

using lanes::Broadcast256;
using lanes::Broadcast512;
using lanes::Coeffs256;
using lanes::Coeffs512;
using lanes::kAll8;
using lanes::Step256;
using lanes::Step512;

SLIDEDP_AVX2 void AdamWAvx2(const Coeffs& c, int64_t n, float* p, const float* g, float* m, float* v, float* sv) {
  const Coeffs256 k = Broadcast256(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i), root;
    const __m256 pi = Step256(k, _mm256_loadu_ps(g + i), _mm256_loadu_ps(p + i), mi, vi, root);
    if (sv != nullptr) _mm256_storeu_ps(sv + i, root);
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) AdamWElement(c, p + i, g[i], m + i, v + i, sv != nullptr ? sv + i : nullptr);
}

SLIDEDP_AVX2 inline __m256 Load8(const float* x) { return _mm256_loadu_ps(x); }
SLIDEDP_AVX2 inline __m256 Load8(const uint16_t* x) { return lanes::WidenBf16x8(x); }
SLIDEDP_AVX2 inline void Store16(float* x, __m256 a, __m256 b) {
  _mm256_storeu_ps(x, a);
  _mm256_storeu_ps(x + 8, b);
}
SLIDEDP_AVX2 inline void Store16(uint16_t* x, __m256 a, __m256 b) { lanes::StoreBf16x16(x, a, b); }

// 16 elements a time (two vectors, so that bf16 ones are stored as 32 bytes).
template <typename Moment>
SLIDEDP_AVX2 void OnePassAvx2(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp, Moment* m,
                              Moment* v) {
  const Coeffs256 k = Broadcast256(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 m0 = Load8(m + i), m1 = Load8(m + i + 8), v0 = Load8(v + i), v1 = Load8(v + i + 8), root;
    const __m256 g0 = grad != nullptr ? _mm256_loadu_ps(grad + i) : lanes::WidenBf16x8(gp + i);
    const __m256 g1 = grad != nullptr ? _mm256_loadu_ps(grad + i + 8) : lanes::WidenBf16x8(gp + i + 8);
    const __m256 p0 = Step256(k, g0, _mm256_loadu_ps(p + i), m0, v0, root);
    const __m256 p1 = Step256(k, g1, _mm256_loadu_ps(p + i + 8), m1, v1, root);
    Store16(p + i, p0, p1);
    Store16(m + i, m0, m1);
    Store16(v + i, v0, v1);
    if (grad == nullptr) lanes::StoreBf16x16(gp + i, p0, p1);
  }
  for (; i < n; ++i) OnePassElement(c, i, p, grad, gp, m, v);
}

SLIDEDP_AVX512 void AdamWAvx512(const Coeffs& c, int64_t n, float* p, const float* g, float* m, float* v,
                                float* sv) {
  const Coeffs512 k = Broadcast512(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i), root;
    const __m512 pi = Step512(k, _mm512_loadu_ps(g + i), _mm512_loadu_ps(p + i), mi, vi, root);
    if (sv != nullptr) _mm512_storeu_ps(sv + i, root);
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) AdamWElement(c, p + i, g[i], m + i, v + i, sv != nullptr ? sv + i : nullptr);
}

SLIDEDP_AVX512 inline __m512 Load16(const float* x) { return _mm512_loadu_ps(x); }
SLIDEDP_AVX512 inline __m512 Load16(const uint16_t* x) { return lanes::WidenBf16x16(x); }
SLIDEDP_AVX512 inline void Store16(float* x, __m512 a) { _mm512_storeu_ps(x, a); }
SLIDEDP_AVX512 inline void Store16(uint16_t* x, __m512 a) { lanes::StoreBf16x16(x, a); }

template <typename Moment>
SLIDEDP_AVX512 void OnePassAvx512(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp, Moment* m,
                                  Moment* v) {
  const Coeffs512 k = Broadcast512(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mi = Load16(m + i), vi = Load16(v + i), root;
    const __m512 g = grad != nullptr ? _mm512_loadu_ps(grad + i) : lanes::WidenBf16x16(gp + i);
    const __m512 pi = Step512(k, g, _mm512_loadu_ps(p + i), mi, vi, root);
    Store16(p + i, pi);
    Store16(m + i, mi);
    Store16(v + i, vi);
    if (grad == nullptr) lanes::StoreBf16x16(gp + i, pi);
  }
  for (; i < n; ++i) OnePassElement(c, i, p, grad, gp, m, v);
}

// Squares are exact in double (24-bit mantissas), so only the additions round.
SLIDEDP_AVX2 double SumSquaresAvx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = _mm256_loadu_ps(x + i), hi = _mm256_loadu_ps(x + i + 8);
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(lo));
    const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1));
    const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(hi));
    const __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1));
    a0 = _mm256_fmadd_pd(d0, d0, a0);
    a1 = _mm256_fmadd_pd(d1, d1, a1);
    a2 = _mm256_fmadd_pd(d2, d2, a2);
    a3 = _mm256_fmadd_pd(d3, d3, a3);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
  double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  return total + SumSquaresScalar(x + i, n - i);
}

SLIDEDP_AVX512 double SumSquaresAvx512(const float* x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  __m512d a2 = _mm512_setzero_pd(), a3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512d d0 = _mm512_maskz_cvtps_pd(kAll8, _mm256_loadu_ps(x + i));
    const __m512d d1 = _mm512_maskz_cvtps_pd(kAll8, _mm256_loadu_ps(x + i + 8));
    const __m512d d2 = _mm512_maskz_cvtps_pd(kAll8, _mm256_loadu_ps(x + i + 16));
    const __m512d d3 = _mm512_maskz_cvtps_pd(kAll8, _mm256_loadu_ps(x + i + 24));
    a0 = _mm512_fmadd_pd(d0, d0, a0);
    a1 = _mm512_fmadd_pd(d1, d1, a1);
    a2 = _mm512_fmadd_pd(d2, d2, a2);
    a3 = _mm512_fmadd_pd(d3, d3, a3);
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  double total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                 ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  return total + SumSquaresScalar(x + i, n - i);
}

#endif  // SLIDEDP_X86_KERNELS

Isa DetectBestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
#if defined(SLIDEDP_SIMD_EMULATED)
    case Isa::kAvx2:
    case Isa::kAvx512:
      return true;  // emulated: any CPU runs them
#elif defined(SLIDEDP_X86_KERNELS)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;
#endif
  }
  return false;
}

Isa BestIsa() {
  static const Isa best = DetectBestIsa();
  return best;
}

Coeffs MakeCoeffs(const AdamWHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2;
  const double step = static_cast<double>(h.step);
  Coeffs c;
  c.grad_scale = h.grad_scale;
  c.decay = static_cast<float>(1.0 - lr * static_cast<double>(h.weight_decay));
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
  c.eps = h.eps;
  c.neg_step_size = static_cast<float>(-(lr / (1.0 - std::pow(beta1, step))));
  return c;
}

void AdamWTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, float* m,
               float* v, float* sqrt_v) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return AdamWAvx512(c, n, param, grad, m, v, sqrt_v);
    case Isa::kAvx2:
      return AdamWAvx2(c, n, param, grad, m, v, sqrt_v);
#endif
    default:
      return AdamWScalar(c, n, param, grad, m, v, sqrt_v);
  }
}

namespace {
template <typename Moment>
void OnePass(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, uint16_t* gp, Moment* m,
             Moment* v) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return OnePassAvx512(c, n, param, grad, gp, m, v);
    case Isa::kAvx2:
      return OnePassAvx2(c, n, param, grad, gp, m, v);
#endif
    default:
      return OnePassScalar(c, n, param, grad, gp, m, v);
  }
}
}  // namespace

void AdamWOnePassTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, uint16_t* gp, float* m,
                      float* v) {
  OnePass(isa, c, n, param, grad, gp, m, v);
}

void AdamWOnePassTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, uint16_t* gp,
                      uint16_t* m, uint16_t* v) {
  OnePass(isa, c, n, param, grad, gp, m, v);
}

double SumSquaresTile(Isa isa, const float* x, int64_t n) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return SumSquaresAvx512(x, n);
    case Isa::kAvx2:
      return SumSquaresAvx2(x, n);
#endif
    default:
      return SumSquaresScalar(x, n);
  }
}

}  // namespace adamw_internal
}  // namespace slidedp
