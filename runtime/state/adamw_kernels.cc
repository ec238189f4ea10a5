// Per-instruction-set inner loops of AdamW and the sum of squares; see adamw_kernels.h.
// The AVX2 and AVX-512 bodies are compiled for their instruction set with target
// attributes and only called after __builtin_cpu_supports says the CPU has it. Each
// vector body does AdamWElement's operations lane by lane; the remainder goes through
// AdamWElement itself, so the split point changes no result.
#include "runtime/state/adamw_kernels.h"

#include <cmath>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SLIDEDP_X86_KERNELS 1
#endif

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

#ifdef SLIDEDP_X86_KERNELS

// Rounded() for vectors: keeps `p * decay` out of an FMA with the final addition.
__attribute__((target("avx2,fma"))) inline __m256 Rounded256(__m256 x) {
  asm("" : "+x"(x));
  return x;
}

__attribute__((target("avx2,fma"))) void AdamWAvx2(const Coeffs& c, int64_t n, float* p,
                                                   const float* g, float* m, float* v, float* sv) {
  const __m256 scale = _mm256_set1_ps(c.grad_scale), decay = _mm256_set1_ps(c.decay);
  const __m256 b1 = _mm256_set1_ps(c.beta1), omb1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(c.beta2), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 bias2 = _mm256_set1_ps(c.bias2_sqrt), eps = _mm256_set1_ps(c.eps);
  const __m256 nss = _mm256_set1_ps(c.neg_step_size);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_mul_ps(scale, _mm256_loadu_ps(g + i));
    const __m256 decayed = Rounded256(_mm256_mul_ps(_mm256_loadu_ps(p + i), decay));
    const __m256 mi = _mm256_fmadd_ps(gi, omb1, _mm256_mul_ps(b1, _mm256_loadu_ps(m + i)));
    const __m256 vi =
        _mm256_fmadd_ps(_mm256_mul_ps(omb2, gi), gi, _mm256_mul_ps(b2, _mm256_loadu_ps(v + i)));
    const __m256 root = _mm256_sqrt_ps(vi);
    if (sv != nullptr) _mm256_storeu_ps(sv + i, root);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(root, bias2), eps);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(nss, mi), denom);
    _mm256_storeu_ps(p + i, _mm256_add_ps(decayed, step));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) AdamWElement(c, p + i, g[i], m + i, v + i, sv != nullptr ? sv + i : nullptr);
}

// All-lanes masks: the maskz forms of sqrt and cvtps_pd compute the same as the plain
// ones, whose "undefined" pass-through operand makes GCC 12 warn.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

__attribute__((target("avx512f"))) inline __m512 Rounded512(__m512 x) {
  asm("" : "+v"(x));
  return x;
}

__attribute__((target("avx512f"))) void AdamWAvx512(const Coeffs& c, int64_t n, float* p,
                                                    const float* g, float* m, float* v, float* sv) {
  const __m512 scale = _mm512_set1_ps(c.grad_scale), decay = _mm512_set1_ps(c.decay);
  const __m512 b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 bias2 = _mm512_set1_ps(c.bias2_sqrt), eps = _mm512_set1_ps(c.eps);
  const __m512 nss = _mm512_set1_ps(c.neg_step_size);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gi = _mm512_mul_ps(scale, _mm512_loadu_ps(g + i));
    const __m512 decayed = Rounded512(_mm512_mul_ps(_mm512_loadu_ps(p + i), decay));
    const __m512 mi = _mm512_fmadd_ps(gi, omb1, _mm512_mul_ps(b1, _mm512_loadu_ps(m + i)));
    const __m512 vi =
        _mm512_fmadd_ps(_mm512_mul_ps(omb2, gi), gi, _mm512_mul_ps(b2, _mm512_loadu_ps(v + i)));
    const __m512 root = _mm512_maskz_sqrt_ps(kAll16, vi);
    if (sv != nullptr) _mm512_storeu_ps(sv + i, root);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(root, bias2), eps);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(nss, mi), denom);
    _mm512_storeu_ps(p + i, _mm512_add_ps(decayed, step));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) AdamWElement(c, p + i, g[i], m + i, v + i, sv != nullptr ? sv + i : nullptr);
}

// Squares are exact in double (24-bit mantissas), so only the additions round.
__attribute__((target("avx2,fma"))) double SumSquaresAvx2(const float* x, int64_t n) {
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

__attribute__((target("avx512f"))) double SumSquaresAvx512(const float* x, int64_t n) {
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
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
