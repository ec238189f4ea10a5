// Private to the update's kernels (adamw_kernels.cc, moment_codec.cc, int8_moments.cc):
// the x86 vector helpers they share, each the lane-by-lane form of a scalar function
// (adamw_element.h, moment_codes.h): AdamWElement's arithmetic, and bf16 widening and
// narrowing (Bf16Bits: nearest even, NaN -> 0x7FC0), on 8 and 16 lanes. Compiled for
// their instruction set with target attributes; callers run them only after
// IsaSupported() says the CPU has it. Threads: pure functions; any thread.
#pragma once

#include <cstdint>

#include "runtime/state/adamw_element.h"

#if defined(SLIDEDP_SIMD_EMULATED)
// The same kernels over SIMDe's portable definitions of the intrinsics (a test build,
// tests/runtime/state/CMakeLists.txt: the AVX-512 kernels checked on any CPU).
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include "runtime/state/simd_emulated.h"
#define SLIDEDP_X86_KERNELS 1
#define SLIDEDP_AVX2
#define SLIDEDP_AVX512
#elif defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SLIDEDP_X86_KERNELS 1
#define SLIDEDP_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SLIDEDP_AVX512 __attribute__((target("avx512f")))
#endif

#ifdef SLIDEDP_X86_KERNELS
namespace slidedp {
namespace adamw_internal {
namespace lanes {

// All-lanes masks: the maskz forms compute the same as the plain ones, whose "undefined"
// pass-through operand makes GCC 12 warn.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

// ------------------------------------------------------------------ AVX2, 8 lanes

// Rounded() for vectors: keeps `p * decay` out of an FMA with the final addition.
SLIDEDP_AVX2 inline __m256 Rounded256(__m256 x) {
#ifdef SLIDEDP_SIMD_EMULATED
  asm("" : "+m"(x));  // a SIMDe vector is a struct: through memory
#else
  asm("" : "+x"(x));
#endif
  return x;
}

// The coefficients in every lane, and AdamWElement's operations on 8 lanes: the new
// parameter returned, m and v updated, the square root of the new v in `root`.
// unit_bias2: sqrt(1 - beta2^step) rounded to exactly 1 (UnitBias2), where root / 1 is
// root itself in IEEE arithmetic (a NaN root keeps its bits; a root is never subnormal,
// the square root of the least subnormal being 2^-74.5, so no flush-to-zero mode sets
// them apart): the kernels skip that division, one of the three operations a vector that
// wait on the core's divider, and give AdamWElement's bits.
struct Coeffs256 {
  __m256 scale, decay, b1, omb1, b2, omb2, bias2, eps, nss;
  bool unit_bias2;
};
SLIDEDP_AVX2 inline Coeffs256 Broadcast256(const Coeffs& c) {
  return {_mm256_set1_ps(c.grad_scale), _mm256_set1_ps(c.decay),      _mm256_set1_ps(c.beta1),
          _mm256_set1_ps(c.one_minus_beta1), _mm256_set1_ps(c.beta2), _mm256_set1_ps(c.one_minus_beta2),
          _mm256_set1_ps(c.bias2_sqrt), _mm256_set1_ps(c.eps),        _mm256_set1_ps(c.neg_step_size),
          UnitBias2(c)};
}
SLIDEDP_AVX2 inline __m256 Step256(const Coeffs256& k, __m256 g_raw, __m256 p, __m256& m, __m256& v, __m256& root) {
  const __m256 gi = _mm256_mul_ps(k.scale, g_raw);
  const __m256 decayed = Rounded256(_mm256_mul_ps(p, k.decay));
  m = _mm256_fmadd_ps(gi, k.omb1, _mm256_mul_ps(k.b1, m));
  v = _mm256_fmadd_ps(_mm256_mul_ps(k.omb2, gi), gi, _mm256_mul_ps(k.b2, v));
  root = _mm256_sqrt_ps(v);
  const __m256 denom = _mm256_add_ps(k.unit_bias2 ? root : _mm256_div_ps(root, k.bias2), k.eps);
  return _mm256_add_ps(decayed, _mm256_div_ps(_mm256_mul_ps(k.nss, m), denom));
}


SLIDEDP_AVX2 inline __m256 WidenBf16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// Bf16Bits of 8 lanes, as 32-bit lanes.
SLIDEDP_AVX2 inline __m256i Bf16Bits256(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
}

// Bf16Bits of 16 lanes (a: elements 0-7, b: 8-15) stored at p. packus works within
// 128-bit halves: [a0-3 b0-3 | a4-7 b4-7]; the permute puts the 64-bit quarters in order.
SLIDEDP_AVX2 inline void StoreBf16x16(uint16_t* p, __m256 a, __m256 b) {
  const __m256i packed = _mm256_packus_epi32(Bf16Bits256(a), Bf16Bits256(b));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
}

// ------------------------------------------------------------------ AVX-512, 16 lanes

SLIDEDP_AVX512 inline __m512 Rounded512(__m512 x) {
#ifdef SLIDEDP_SIMD_EMULATED
  asm("" : "+m"(x));
#else
  asm("" : "+v"(x));
#endif
  return x;
}

// AdamWElement on 16 lanes, as Step256 on 8.
struct Coeffs512 {
  __m512 scale, decay, b1, omb1, b2, omb2, bias2, eps, nss;
  bool unit_bias2;
};
SLIDEDP_AVX512 inline Coeffs512 Broadcast512(const Coeffs& c) {
  return {_mm512_set1_ps(c.grad_scale), _mm512_set1_ps(c.decay),      _mm512_set1_ps(c.beta1),
          _mm512_set1_ps(c.one_minus_beta1), _mm512_set1_ps(c.beta2), _mm512_set1_ps(c.one_minus_beta2),
          _mm512_set1_ps(c.bias2_sqrt), _mm512_set1_ps(c.eps),        _mm512_set1_ps(c.neg_step_size),
          UnitBias2(c)};
}
SLIDEDP_AVX512 inline __m512 Step512(const Coeffs512& k, __m512 g_raw, __m512 p, __m512& m, __m512& v,
                                     __m512& root) {
  const __m512 gi = _mm512_mul_ps(k.scale, g_raw);
  const __m512 decayed = Rounded512(_mm512_mul_ps(p, k.decay));
  m = _mm512_fmadd_ps(gi, k.omb1, _mm512_mul_ps(k.b1, m));
  v = _mm512_fmadd_ps(_mm512_mul_ps(k.omb2, gi), gi, _mm512_mul_ps(k.b2, v));
  root = _mm512_maskz_sqrt_ps(kAll16, v);
  const __m512 denom = _mm512_add_ps(k.unit_bias2 ? root : _mm512_div_ps(root, k.bias2), k.eps);
  return _mm512_add_ps(decayed, _mm512_div_ps(_mm512_mul_ps(k.nss, m), denom));
}


SLIDEDP_AVX512 inline __m512 WidenBf16x16(const uint16_t* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, w, 16));
}

SLIDEDP_AVX512 inline void StoreBf16x16(uint16_t* p, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll16, u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(kAll16, _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(kAll16, r));
}

}  // namespace lanes
}  // namespace adamw_internal
}  // namespace slidedp
#endif  // SLIDEDP_X86_KERNELS
