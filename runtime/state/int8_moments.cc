// The 8-bit moments' kernels (optimizer.state_dtype int8; the maps in moment_codec.h):
// scalar, AVX2 and AVX-512 forms of one quantization block's encode, of the one-pass
// update of a block (decode, AdamW, the new scales' maxima), and of the decode, behind
// one table per instruction set. The vector bodies are compiled for their instruction
// set with target attributes and only called after IsaSupported() (adamw_kernels.h);
// each gives the scalar function's bits lane by lane (the same operations, except the
// decode, which widens the codes as IEEE halves: DecodeSigned512), and remainders go
// through the scalar functions themselves.
// Threads: pure functions of their arguments; any thread (the update's workers).
#include "runtime/state/int8_moments.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/simd_lanes.h"

namespace slidedp {
namespace adamw_internal {

using moment_codes::Abs;
using moment_codes::InvScale;
using moment_codes::InvSqrtScale;
using moment_codes::kExpOffset;
using moment_codes::kMBits;
using moment_codes::kSmallestNormal;
using moment_codes::kVBits;
using moment_codes::Larger;

namespace {

// ------------------------------------------------------------------ scalar kernels

inline float AbsMax(const float* x, int64_t n) {
  float mx = 0.0f;
  for (int64_t i = 0; i < n; ++i) mx = Larger(Abs(x[i]), mx);
  return mx;
}

// The kernels of one instruction set for the 8-bit moments, over one quantization block
// (pointers at its first element; `blk` the stored moments' view there):
// - EncodeBlock: the codes of `len` elements from the new m and sqrt(v), given the
//   block's scales sm (the largest |m|) and sv (the largest v), which it stores;
//   `index0` is the unit index of element 0 (the random bits, RoundingBits).
// - UpdatePart: one pass over `n` elements of a block: m and v decoded (the block's
//   scales sm, sv), AdamWElement with the gradient `grad` (or the bf16 bits in `gp`,
//   which then receive the new parameters narrowed), the new m and sqrt(v) into `mo` and
//   `ro`; *m_max and *v_max become the largest of what they held and the new |m| and v.
// - Decode: `n` elements of a view (several blocks, each with its scales) into fp32.
using EncodeBlockFn = void (*)(const MomentView& blk, int64_t len, const float* m, const float* sqrt_v, float sm,
                               float sv, uint32_t key, int64_t index0);
using UpdatePartFn = void (*)(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp,
                              const int8_t* qm, const uint8_t* qv, float sm, float sv, float* mo, float* ro,
                              float* m_max, float* v_max);
using DecodeFn = void (*)(const MomentView& mv, int64_t n, float* m, float* v);
struct Int8Kernels {
  EncodeBlockFn encode_block;
  UpdatePartFn update_part;
  DecodeFn decode;
  float (*abs_max)(const float* x, int64_t n);
};

void EncodeBlockScalar(const MomentView& blk, int64_t len, const float* m, const float* sqrt_v, float sm, float sv,
                       uint32_t key, int64_t index0) {
  auto* qm = static_cast<int8_t*>(blk.m);
  auto* qv = static_cast<uint8_t*>(blk.v);
  *blk.m_scale = sm;
  *blk.v_scale = sv;
  const float im = InvScale(sm), iv = InvSqrtScale(sv);  // 0: inf, and the codes 0 (NaN -> 0)
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t bits = RoundingBits(key, index0 + i);
    qm[i] = EncodeSigned8(m[i], im, bits);
    qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
  }
}

// One element of UpdatePart (the vector kernels' remainders too). v's maximum needs no
// fabs: a new v is +0 or more, or NaN.
inline void UpdateElement(const Coeffs& c, int64_t i, float* p, const float* grad, uint16_t* gp, const int8_t* qm,
                          const uint8_t* qv, float sm, float sv, float* mo, float* ro, float& m_max, float& v_max) {
  float mi = DecodeSigned8(qm[i], sm), vi = DecodeUnsigned8(qv[i], sv);
  AdamWElement(c, p + i, grad != nullptr ? grad[i] : WidenBf16(gp[i]), &mi, &vi, ro + i);
  mo[i] = mi;
  m_max = Larger(Abs(mi), m_max);
  v_max = Larger(vi, v_max);
  if (grad == nullptr) gp[i] = Bf16Bits(p[i]);
}

void UpdatePartScalar(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp, const int8_t* qm,
                      const uint8_t* qv, float sm, float sv, float* mo, float* ro, float* m_max, float* v_max) {
  for (int64_t i = 0; i < n; ++i) UpdateElement(c, i, p, grad, gp, qm, qv, sm, sv, mo, ro, *m_max, *v_max);
}

void DecodeInt8Scalar(const MomentView& mv, int64_t n, float* m, float* v) {
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

constexpr Int8Kernels kScalarKernels = {EncodeBlockScalar, UpdatePartScalar, DecodeInt8Scalar, AbsMax};

#ifdef SLIDEDP_X86_KERNELS

using lanes::Broadcast256;
using lanes::Broadcast512;
using lanes::Coeffs256;
using lanes::Coeffs512;
using lanes::kAll16;
using lanes::Step256;
using lanes::Step512;
using lanes::StoreBf16x16;
using lanes::WidenBf16x16;
using lanes::WidenBf16x8;

// ------------------------------------------------------------------ AVX-512

SLIDEDP_AVX512 inline __m512 Abs512(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

// The largest lane by Larger (no lane is NaN: max_ps keeps its second operand then).
SLIDEDP_AVX512 inline float LargestLane512(__m512 mx, float r) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx);
  for (float l : lanes) r = Larger(l, r);
  return r;
}

SLIDEDP_AVX512 float AbsMax512(const float* x, int64_t n) {
  __m512 mx = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mx = _mm512_maskz_max_ps(kAll16, Abs512(_mm512_loadu_ps(x + i)), mx);
  return LargestLane512(mx, AbsMax(x + i, n - i));
}

// Mix32 lane by lane.
SLIDEDP_AVX512 inline __m512i Mix512(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_maskz_srli_epi32(kAll16, x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMixMul1)));
  x = _mm512_xor_si512(x, _mm512_maskz_srli_epi32(kAll16, x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMixMul2)));
  return _mm512_xor_si512(x, _mm512_maskz_srli_epi32(kAll16, x, 16));
}
// RoundingBits of 16 consecutive indices (index0 .. index0 + 15, modulo 2^32):
// (index0 + lane) * kIndexMix + key = (index0 * kIndexMix + key) + lane * kIndexMix.
SLIDEDP_AVX512 inline __m512i RoundingBits512(uint32_t key, int64_t index0) {
  constexpr uint32_t k = kIndexMix;
  const __m512i lanes = _mm512_setr_epi32(0, static_cast<int>(k), static_cast<int>(2 * k), static_cast<int>(3 * k),
                                          static_cast<int>(4 * k), static_cast<int>(5 * k), static_cast<int>(6 * k),
                                          static_cast<int>(7 * k), static_cast<int>(8 * k), static_cast<int>(9 * k),
                                          static_cast<int>(10 * k), static_cast<int>(11 * k),
                                          static_cast<int>(12 * k), static_cast<int>(13 * k),
                                          static_cast<int>(14 * k), static_cast<int>(15 * k));
  const uint32_t base = static_cast<uint32_t>(index0) * k + key;
  return Mix512(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), lanes));
}

// EncodeUnitFloat lane by lane. kFromZero: x is clamped below at 0 first, a NaN lane to
// 0 (max_ps keeps its second operand); without it the caller zeroes the lanes that are
// not above 0 (NaN included, which min_ps takes to 1).
template <int K, bool kFromZero>
SLIDEDP_AVX512 inline __m512i EncodeUnitFloat512(__m512 x, __m512i bits) {
  constexpr int s = 23 - K;
  if (kFromZero) x = _mm512_maskz_max_ps(kAll16, x, _mm512_setzero_ps());
  x = _mm512_maskz_min_ps(kAll16, x, _mm512_set1_ps(1.0f));
  const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kSmallestNormal), _CMP_LT_OQ);
  const __m512 y = _mm512_mask_add_ps(x, small, x, _mm512_set1_ps(kSmallestNormal));
  const __m512i r = _mm512_maskz_srli_epi32(
      kAll16, _mm512_add_epi32(_mm512_castps_si512(y), _mm512_maskz_srli_epi32(kAll16, bits, 32 - s)), s);
  const __m512i c = _mm512_sub_epi32(r, _mm512_set1_epi32(static_cast<int>(kExpOffset << K)));
  return _mm512_mask_sub_epi32(c, small, c, _mm512_set1_epi32(1 << K));
}

// DecodeSigned8 and DecodeUnsigned8 of 16 codes. The maps' unit floats are IEEE
// half-precision numbers: a code with K mantissa bits shifted left by 10 - K is the bits
// of the fp16 of its value (the maps' exponent field is fp16's, bias 15, and their
// subnormal codes, c * 2^-(14+K), are fp16's subnormals, (c << (10 - K)) * 2^-24), which
// vcvtph2ps widens exactly, subnormal halves to normal floats, whatever the thread's
// MXCSR says. m's sign goes in the half's sign bit; the scale's product then carries it
// as DecodeSigned8's negation does.
SLIDEDP_AVX512 inline __m512 DecodeSigned512(const int8_t* q, __m512 scale) {
  const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_abs_epi16(c), 10 - kMBits),
                                       _mm256_and_si256(c, _mm256_set1_epi16(static_cast<int16_t>(0x8000))));
  return _mm512_mul_ps(_mm512_maskz_cvtph_ps(kAll16, half), scale);
}
SLIDEDP_AVX512 inline __m512 DecodeUnsigned512(const uint8_t* q, __m512 scale) {
  const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m512 r = _mm512_maskz_cvtph_ps(kAll16, _mm256_slli_epi16(c, 10 - kVBits));
  return _mm512_mul_ps(_mm512_mul_ps(r, r), scale);
}

SLIDEDP_AVX512 void DecodeInt8Avx512(const MomentView& mv, int64_t n, float* m, float* v) {
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // 16 divides the block: one scale per vector
    _mm512_storeu_ps(m + i, DecodeSigned512(qm + i, _mm512_set1_ps(mv.m_scale[i / kMomentBlock])));
    _mm512_storeu_ps(v + i, DecodeUnsigned512(qv + i, _mm512_set1_ps(mv.v_scale[i / kMomentBlock])));
  }
  for (; i < n; ++i) {  // the remainder, element by element with the scalar functions
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

SLIDEDP_AVX512 void EncodeBlockAvx512(const MomentView& blk, int64_t len, const float* m, const float* sqrt_v,
                                      float sm, float sv, uint32_t key, int64_t index0) {
  auto* qm = static_cast<int8_t*>(blk.m);
  auto* qv = static_cast<uint8_t*>(blk.v);
  *blk.m_scale = sm;
  *blk.v_scale = sv;
  const float im = InvScale(sm), iv = InvSqrtScale(sv);
  const __m512 vim = _mm512_set1_ps(im), viv = _mm512_set1_ps(iv);
  const __m512i one = _mm512_set1_epi32(1);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m512 xm = _mm512_loadu_ps(m + i);
    const __m512i bits = RoundingBits512(key, index0 + i);
    __m512i cm = EncodeUnitFloat512<kMBits, true>(_mm512_mul_ps(Abs512(xm), vim), bits);
    const __mmask16 neg = _mm512_cmp_ps_mask(xm, _mm512_setzero_ps(), _CMP_LT_OQ);
    cm = _mm512_mask_sub_epi32(cm, neg, _mm512_setzero_si512(), cm);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qm + i), _mm512_maskz_cvtepi32_epi8(kAll16, cm));
    const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(sqrt_v + i), viv);
    const __mmask16 pos = _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_GT_OQ);
    const __m512i code_v = EncodeUnitFloat512<kVBits, false>(r, _mm512_maskz_rol_epi32(kAll16, bits, 16));
    const __m512i cv = _mm512_mask_max_epi32(_mm512_setzero_si512(), pos, code_v, one);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qv + i), _mm512_maskz_cvtepi32_epi8(kAll16, cv));
  }
  for (; i < len; ++i) {
    const uint32_t bits = RoundingBits(key, index0 + i);
    qm[i] = EncodeSigned8(m[i], im, bits);
    qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
  }
}

SLIDEDP_AVX512 void UpdatePartAvx512(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp,
                                     const int8_t* qm, const uint8_t* qv, float sm, float sv, float* mo, float* ro,
                                     float* m_max, float* v_max) {
  const Coeffs512 k = Broadcast512(c);
  const __m512 vsm = _mm512_set1_ps(sm), vsv = _mm512_set1_ps(sv);
  __m512 mmax = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mi = DecodeSigned512(qm + i, vsm), vi = DecodeUnsigned512(qv + i, vsv);
    __m512 root;
    const __m512 g = grad != nullptr ? _mm512_loadu_ps(grad + i) : WidenBf16x16(gp + i);
    const __m512 pi = Step512(k, g, _mm512_loadu_ps(p + i), mi, vi, root);
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(mo + i, mi);
    _mm512_storeu_ps(ro + i, root);
    mmax = _mm512_maskz_max_ps(kAll16, Abs512(mi), mmax);
    vmax = _mm512_maskz_max_ps(kAll16, vi, vmax);
    if (grad == nullptr) StoreBf16x16(gp + i, pi);
  }
  *m_max = LargestLane512(mmax, *m_max);
  *v_max = LargestLane512(vmax, *v_max);
  for (; i < n; ++i) UpdateElement(c, i, p, grad, gp, qm, qv, sm, sv, mo, ro, *m_max, *v_max);
}

constexpr Int8Kernels kAvx512Kernels = {EncodeBlockAvx512, UpdatePartAvx512, DecodeInt8Avx512, AbsMax512};

// ------------------------------------------------------------------ AVX2

SLIDEDP_AVX2 inline __m256 Abs256(__m256 x) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}

SLIDEDP_AVX2 inline float LargestLane256(__m256 mx, float r) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  for (float l : lanes) r = Larger(l, r);
  return r;
}

SLIDEDP_AVX2 float AbsMax256(const float* x, int64_t n) {
  __m256 mx = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(Abs256(_mm256_loadu_ps(x + i)), mx);
  return LargestLane256(mx, AbsMax(x + i, n - i));
}

SLIDEDP_AVX2 inline __m256i Mix256(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kMixMul1)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kMixMul2)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}
SLIDEDP_AVX2 inline __m256i RoundingBits256(uint32_t key, int64_t index0) {
  constexpr uint32_t k = kIndexMix;
  const __m256i lanes = _mm256_setr_epi32(0, static_cast<int>(k), static_cast<int>(2 * k), static_cast<int>(3 * k),
                                          static_cast<int>(4 * k), static_cast<int>(5 * k), static_cast<int>(6 * k),
                                          static_cast<int>(7 * k));
  const uint32_t base = static_cast<uint32_t>(index0) * k + key;
  return Mix256(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), lanes));
}
SLIDEDP_AVX2 inline __m256i Rotate16x8(__m256i x) { return _mm256_or_si256(_mm256_slli_epi32(x, 16), _mm256_srli_epi32(x, 16)); }

// As EncodeUnitFloat512, kFromZero the same.
template <int K, bool kFromZero>
SLIDEDP_AVX2 inline __m256i EncodeUnitFloat256(__m256 x, __m256i bits) {
  constexpr int s = 23 - K;
  if (kFromZero) x = _mm256_max_ps(x, _mm256_setzero_ps());  // NaN: 0
  x = _mm256_min_ps(x, _mm256_set1_ps(1.0f));
  const __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(kSmallestNormal), _CMP_LT_OQ);
  const __m256 y = _mm256_add_ps(x, _mm256_and_ps(small, _mm256_set1_ps(kSmallestNormal)));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_srli_epi32(bits, 32 - s)), s);
  // Less kExpOffset << K, and 2^K more where small (whose lanes are -1: -1 << K = -2^K).
  return _mm256_add_epi32(_mm256_sub_epi32(r, _mm256_set1_epi32(static_cast<int>(kExpOffset << K))),
                          _mm256_slli_epi32(_mm256_castps_si256(small), K));
}

// DecodeSigned8 and DecodeUnsigned8 of 16 codes through their fp16 bits, as
// DecodeSigned512 does (F16C's vcvtph2ps widens 8 halves): elements 0-7 into lo, 8-15
// into hi.
SLIDEDP_AVX2 inline void DecodeSigned256(__m128i q, __m256 scale, __m256& lo, __m256& hi) {
  const __m256i c = _mm256_cvtepi8_epi16(q);
  const __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_abs_epi16(c), 10 - kMBits),
                                       _mm256_and_si256(c, _mm256_set1_epi16(static_cast<int16_t>(0x8000))));
  lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), scale);
  hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), scale);
}
SLIDEDP_AVX2 inline void DecodeUnsigned256(__m128i q, __m256 scale, __m256& lo, __m256& hi) {
  const __m256i half = _mm256_slli_epi16(_mm256_cvtepu8_epi16(q), 10 - kVBits);
  const __m256 r0 = _mm256_cvtph_ps(_mm256_castsi256_si128(half)), r1 = _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1));
  lo = _mm256_mul_ps(_mm256_mul_ps(r0, r0), scale);
  hi = _mm256_mul_ps(_mm256_mul_ps(r1, r1), scale);
}

SLIDEDP_AVX2 void DecodeInt8Avx2(const MomentView& mv, int64_t n, float* m, float* v) {
  int64_t i = 0;
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  for (; i + 16 <= n; i += 16) {  // 16 divides the block: one scale per 16 codes
    __m256 lo, hi;
    DecodeSigned256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qm + i)),
                    _mm256_set1_ps(mv.m_scale[i / kMomentBlock]), lo, hi);
    _mm256_storeu_ps(m + i, lo);
    _mm256_storeu_ps(m + i + 8, hi);
    DecodeUnsigned256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qv + i)),
                      _mm256_set1_ps(mv.v_scale[i / kMomentBlock]), lo, hi);
    _mm256_storeu_ps(v + i, lo);
    _mm256_storeu_ps(v + i + 8, hi);
  }
  for (; i < n; ++i) {
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

// The low byte of each of 32 int32 lanes (a: elements 0-7, b: 8-15, c, d), in order: the
// scalar kernel's casts (and AVX-512's cvtepi32_epi8). Masked to a byte, packed two
// lanes of 128 bits at a time, the dwords put back in order.
SLIDEDP_AVX2 inline __m256i LowBytes32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ff = _mm256_set1_epi32(0xff);
  const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, ff), _mm256_and_si256(b, ff));
  const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, ff), _mm256_and_si256(d, ff));
  // Dwords: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7.
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The codes of m and v for the 8 elements from i (int32 lanes, a byte's worth each).
// m's sign: sign_epi32 negates the code where m's bits are negative (-0 and NaNs with
// the sign bit included: their code is 0), as EncodeSigned8's x < 0 does.
struct Codes8 {
  __m256i m, v;
};
SLIDEDP_AVX2 inline Codes8 EncodeInt8x8(const float* m, const float* sqrt_v, int64_t i, __m256 vim, __m256 viv,
                                        uint32_t key, int64_t index0) {
  const __m256 xm = _mm256_loadu_ps(m + i);
  const __m256i bits = RoundingBits256(key, index0 + i);
  const __m256i code_m = EncodeUnitFloat256<kMBits, true>(_mm256_mul_ps(Abs256(xm), vim), bits);
  const __m256i c = _mm256_sign_epi32(code_m, _mm256_castps_si256(xm));
  const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(sqrt_v + i), viv);
  const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_GT_OQ));
  const __m256i code_v = EncodeUnitFloat256<kVBits, false>(r, Rotate16x8(bits));
  const __m256i cv = _mm256_and_si256(_mm256_max_epi32(code_v, _mm256_set1_epi32(1)), pos);
  return {c, cv};
}

SLIDEDP_AVX2 void EncodeBlockAvx2(const MomentView& blk, int64_t len, const float* m, const float* sqrt_v, float sm,
                                  float sv, uint32_t key, int64_t index0) {
  auto* qm = static_cast<int8_t*>(blk.m);
  auto* qv = static_cast<uint8_t*>(blk.v);
  *blk.m_scale = sm;
  *blk.v_scale = sv;
  const float im = InvScale(sm), iv = InvSqrtScale(sv);
  const __m256 vim = _mm256_set1_ps(im), viv = _mm256_set1_ps(iv);
  int64_t i = 0;
  // 32 elements a time, their codes stored as 32 bytes at once; a unit's last partial
  // block ends in the scalar loop.
  for (; i + 32 <= len; i += 32) {
    const Codes8 c0 = EncodeInt8x8(m, sqrt_v, i, vim, viv, key, index0);
    const Codes8 c1 = EncodeInt8x8(m, sqrt_v, i + 8, vim, viv, key, index0);
    const Codes8 c2 = EncodeInt8x8(m, sqrt_v, i + 16, vim, viv, key, index0);
    const Codes8 c3 = EncodeInt8x8(m, sqrt_v, i + 24, vim, viv, key, index0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qm + i), LowBytes32(c0.m, c1.m, c2.m, c3.m));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qv + i), LowBytes32(c0.v, c1.v, c2.v, c3.v));
  }
  for (; i < len; ++i) {
    const uint32_t bits = RoundingBits(key, index0 + i);
    qm[i] = EncodeSigned8(m[i], im, bits);
    qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
  }
}

// 16 elements a time: the codes of each moment loaded as 16 bytes, the bf16 copy stored
// as 32.
SLIDEDP_AVX2 void UpdatePartAvx2(const Coeffs& c, int64_t n, float* p, const float* grad, uint16_t* gp,
                                 const int8_t* qm, const uint8_t* qv, float sm, float sv, float* mo, float* ro,
                                 float* m_max, float* v_max) {
  const Coeffs256 k = Broadcast256(c);
  const __m256 vsm = _mm256_set1_ps(sm), vsv = _mm256_set1_ps(sv);
  __m256 mmax = _mm256_setzero_ps(), vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i bm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qm + i));
    const __m128i bv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qv + i));
    __m256 m0, m1, v0, v1;
    DecodeSigned256(bm, vsm, m0, m1);
    DecodeUnsigned256(bv, vsv, v0, v1);
    const __m256 g0 = grad != nullptr ? _mm256_loadu_ps(grad + i) : WidenBf16x8(gp + i);
    const __m256 g1 = grad != nullptr ? _mm256_loadu_ps(grad + i + 8) : WidenBf16x8(gp + i + 8);
    __m256 r0, r1;
    const __m256 p0 = Step256(k, g0, _mm256_loadu_ps(p + i), m0, v0, r0);
    const __m256 p1 = Step256(k, g1, _mm256_loadu_ps(p + i + 8), m1, v1, r1);
    _mm256_storeu_ps(p + i, p0);
    _mm256_storeu_ps(p + i + 8, p1);
    _mm256_storeu_ps(mo + i, m0);
    _mm256_storeu_ps(mo + i + 8, m1);
    _mm256_storeu_ps(ro + i, r0);
    _mm256_storeu_ps(ro + i + 8, r1);
    mmax = _mm256_max_ps(Abs256(m1), _mm256_max_ps(Abs256(m0), mmax));
    vmax = _mm256_max_ps(v1, _mm256_max_ps(v0, vmax));
    if (grad == nullptr) StoreBf16x16(gp + i, p0, p1);
  }
  *m_max = LargestLane256(mmax, *m_max);
  *v_max = LargestLane256(vmax, *v_max);
  for (; i < n; ++i) UpdateElement(c, i, p, grad, gp, qm, qv, sm, sv, mo, ro, *m_max, *v_max);
}

constexpr Int8Kernels kAvx2Kernels = {EncodeBlockAvx2, UpdatePartAvx2, DecodeInt8Avx2, AbsMax256};

#endif  // SLIDEDP_X86_KERNELS

const Int8Kernels& KernelsOf(Isa isa) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return kAvx512Kernels;
    case Isa::kAvx2:
      return kAvx2Kernels;
#endif
    default:
      return kScalarKernels;
  }
}

}  // namespace

void DecodeInt8(Isa isa, const MomentView& mv, int64_t n, float* m, float* v) { KernelsOf(isa).decode(mv, n, m, v); }

void EncodeInt8(Isa isa, const MomentView& mv, int64_t n, const float* m, const float* v, const float* sqrt_v,
                const RoundingSeed& seed) {
  const Int8Kernels& k = KernelsOf(isa);
  const uint32_t key = RoundingKey(seed.step);
  for (int64_t b = 0; b < n; b += kMomentBlock) {
    const int64_t len = std::min(kMomentBlock, n - b);
    k.encode_block(OffsetMoments(mv, b), len, m + b, sqrt_v + b, k.abs_max(m + b, len), k.abs_max(v + b, len), key,
                   seed.first_index + b);
  }
}

void AdamWInt8Tile(Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, int64_t b,
                   int64_t e, float* param, const float* grad, uint16_t* gp, const MomentView& mv,
                   const RoundingSeed& seed) {
  const Int8Kernels& k = KernelsOf(isa);
  const uint32_t key = RoundingKey(seed.step);
  alignas(64) float mo[kMomentBlock];  // one block's new m and sqrt(v), from its update to its encode
  alignas(64) float ro[kMomentBlock];
  for (int64_t bb = b; bb < e; bb += kMomentBlock) {
    const int64_t be = std::min(e, bb + kMomentBlock);
    const MomentView blk = OffsetMoments(mv, bb);
    const float sm = *blk.m_scale, sv = *blk.v_scale;
    float m_max = 0.0f, v_max = 0.0f;
    for (size_t j = 0; j < spans.size(); ++j) {
      const int64_t sb = std::max(spans[j].begin, bb), se = std::min(spans[j].end, be);
      if (se <= sb) continue;
      const int64_t o = sb - bb;
      k.update_part(coeffs[j], se - sb, param + sb, grad != nullptr ? grad + sb : nullptr,
                    grad != nullptr ? nullptr : gp + sb, static_cast<const int8_t*>(blk.m) + o,
                    static_cast<const uint8_t*>(blk.v) + o, sm, sv, mo + o, ro + o, &m_max, &v_max);
    }
    k.encode_block(blk, be - bb, mo, ro, m_max, v_max, key, seed.first_index + bb);
  }
}

}  // namespace adamw_internal
}  // namespace slidedp