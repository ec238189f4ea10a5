// Test builds only (SLIDEDP_SIMD_EMULATED, see simd_lanes.h): the intrinsics of the
// update's kernels that SIMDe 0.7.4 (Debian 12's libsimde-dev) does not define, written
// lane by lane after Intel's definitions (out-of-range float-to-int conversions give
// INT32_MIN as the instructions do; narrowing conversions keep the low bits). Masked
// forms take their mask (the kernels pass all lanes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

typedef simde__mmask16 __mmask16;
typedef simde__mmask8 __mmask8;

#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#ifndef _MM_CMPINT_LT
#define _MM_CMPINT_EQ 0
#define _MM_CMPINT_LT 1
#define _MM_CMPINT_LE 2
#define _MM_CMPINT_NE 4
#define _MM_CMPINT_NLT 5
#define _MM_CMPINT_NLE 6
#endif

namespace slidedp_simd_emulated {

// out[i] = mask bit i ? f(in[i]) : 0, for N lanes, through byte copies of the vectors.
template <typename Out, typename In, int N, typename VOut, typename VIn, typename F>
inline VOut Lanes(uint32_t mask, VIn v, F f) {
  In in[N];
  std::memcpy(in, &v, sizeof(in));
  Out out[N];
  for (int i = 0; i < N; ++i) out[i] = ((mask >> i) & 1u) ? f(in[i]) : Out(0);
  VOut r;
  std::memset(&r, 0, sizeof(r));
  std::memcpy(&r, out, sizeof(out));
  return r;
}

// An IEEE half's bits as the float of the same value (every half is one exactly).
inline float HalfBitsToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float x;
  if (exponent == 0) {
    x = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    x = mantissa == 0 ? INFINITY : NAN;
  } else {
    x = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  }
  return (h & 0x8000) ? -x : x;
}

inline int32_t TruncToInt32(float x) {
  return (x >= -2147483648.0f && x < 2147483648.0f) ? static_cast<int32_t>(x) : INT32_MIN;
}

}  // namespace slidedp_simd_emulated

#define SLIDEDP_EMU_LANES(Out, In, N, VOut, mask, v, expr) \
  slidedp_simd_emulated::Lanes<Out, In, N, VOut>((mask), (v), [](In x) { return static_cast<Out>(expr); })

inline __m512i _mm512_maskz_cvtepu16_epi32(__mmask16 k, __m256i a) {
  return SLIDEDP_EMU_LANES(int32_t, uint16_t, 16, __m512i, k, a, x);
}
inline __m512i _mm512_maskz_cvtepi8_epi32(__mmask16 k, __m128i a) {
  return SLIDEDP_EMU_LANES(int32_t, int8_t, 16, __m512i, k, a, x);
}
inline __m512i _mm512_maskz_cvtepu8_epi32(__mmask16 k, __m128i a) {
  return SLIDEDP_EMU_LANES(int32_t, uint8_t, 16, __m512i, k, a, x);
}
inline __m256i _mm512_maskz_cvtepi32_epi16(__mmask16 k, __m512i a) {
  return SLIDEDP_EMU_LANES(uint16_t, uint32_t, 16, __m256i, k, a, x & 0xffffu);
}
inline __m128i _mm512_maskz_cvtepi32_epi8(__mmask16 k, __m512i a) {
  return SLIDEDP_EMU_LANES(uint8_t, uint32_t, 16, __m128i, k, a, x & 0xffu);
}
inline __m512 _mm512_maskz_cvtph_ps(__mmask16 k, __m256i a) {
  return SLIDEDP_EMU_LANES(float, uint16_t, 16, __m512, k, a, slidedp_simd_emulated::HalfBitsToFloat(x));
}
inline __m256 _mm256_cvtph_ps(__m128i a) {
  return SLIDEDP_EMU_LANES(float, uint16_t, 8, __m256, 0xffu, a, slidedp_simd_emulated::HalfBitsToFloat(x));
}
inline __m512 _mm512_maskz_cvtepi32_ps(__mmask16 k, __m512i a) {
  return SLIDEDP_EMU_LANES(float, int32_t, 16, __m512, k, a, x);
}
inline __m512i _mm512_maskz_cvttps_epi32(__mmask16 k, __m512 a) {
  return SLIDEDP_EMU_LANES(int32_t, float, 16, __m512i, k, a, slidedp_simd_emulated::TruncToInt32(x));
}
inline __m512d _mm512_maskz_cvtps_pd(__mmask8 k, __m256 a) {
  return SLIDEDP_EMU_LANES(double, float, 8, __m512d, k, a, x);
}
inline __m512i _mm512_maskz_slli_epi32(__mmask16 k, __m512i a, unsigned n) {
  return _mm512_maskz_mov_epi32(k, _mm512_slli_epi32(a, n));
}
inline __m512i _mm512_maskz_srli_epi32(__mmask16 k, __m512i a, unsigned n) {
  return _mm512_maskz_mov_epi32(k, _mm512_srli_epi32(a, n));
}
inline __m512 _mm512_maskz_sqrt_ps(__mmask16 k, __m512 a) { return _mm512_maskz_mov_ps(k, _mm512_sqrt_ps(a)); }
inline __mmask16 _mm512_cmp_epi32_mask(__m512i a, __m512i b, int op) {
  int32_t x[16], y[16];
  std::memcpy(x, &a, 64);
  std::memcpy(y, &b, 64);
  __mmask16 r = 0;
  for (int i = 0; i < 16; ++i) {
    bool t = false;
    switch (op) {
      case _MM_CMPINT_EQ: t = x[i] == y[i]; break;
      case _MM_CMPINT_LT: t = x[i] < y[i]; break;
      case _MM_CMPINT_LE: t = x[i] <= y[i]; break;
      case _MM_CMPINT_NE: t = x[i] != y[i]; break;
      case _MM_CMPINT_NLT: t = x[i] >= y[i]; break;
      case _MM_CMPINT_NLE: t = x[i] > y[i]; break;
      default: t = op == 7; break;  // 3: false, 7: true
    }
    r = static_cast<__mmask16>(r | (t ? 1u << i : 0u));
  }
  return r;
}
// SIMDe computes a * b + c with two roundings where the target has no FMA; the
// kernels' (and their scalar reference's) fused multiply-add rounds once.
namespace slidedp_simd_emulated {
template <typename V, typename T, int N>
inline V FusedMultiplyAdd(V a, V b, V c) {
  T x[N], y[N], z[N];
  std::memcpy(x, &a, sizeof(x));
  std::memcpy(y, &b, sizeof(y));
  std::memcpy(z, &c, sizeof(z));
  for (int i = 0; i < N; ++i) x[i] = std::fma(x[i], y[i], z[i]);
  V r;
  std::memcpy(&r, x, sizeof(x));
  return r;
}
}  // namespace slidedp_simd_emulated
#undef _mm256_fmadd_ps
#undef _mm256_fmadd_pd
#undef _mm512_fmadd_ps
#undef _mm512_fmadd_pd
#define _mm256_fmadd_ps(a, b, c) slidedp_simd_emulated::FusedMultiplyAdd<__m256, float, 8>((a), (b), (c))
#define _mm256_fmadd_pd(a, b, c) slidedp_simd_emulated::FusedMultiplyAdd<__m256d, double, 4>((a), (b), (c))
#define _mm512_fmadd_ps(a, b, c) slidedp_simd_emulated::FusedMultiplyAdd<__m512, float, 16>((a), (b), (c))
#define _mm512_fmadd_pd(a, b, c) slidedp_simd_emulated::FusedMultiplyAdd<__m512d, double, 8>((a), (b), (c))
#undef SLIDEDP_EMU_LANES
