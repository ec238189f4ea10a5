// Moment storage kernels; see moment_codec.h. The AVX2 and AVX-512 bodies are compiled
// for their instruction set with target attributes and only called after
// IsaSupported() (adamw_kernels.h). Each vector body does the scalar function's
// operations lane by lane; remainders go through the scalar functions themselves.
#include "runtime/state/moment_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/simd_lanes.h"

namespace slidedp {

int64_t MomentWidth(MomentDtype dtype) {
  return dtype == MomentDtype::kFp32 ? 4 : dtype == MomentDtype::kBf16 ? 2 : 1;
}

double MomentBytesPerParam(MomentDtype dtype) {
  return 2.0 * static_cast<double>(MomentWidth(dtype)) +
         (dtype == MomentDtype::kInt8 ? 8.0 / static_cast<double>(kMomentBlock) : 0.0);
}

int64_t MomentBytes(MomentDtype dtype, int64_t n) {
  switch (dtype) {
    case MomentDtype::kFp32:
      return 8 * n;
    case MomentDtype::kBf16:
      return 4 * n;
    case MomentDtype::kInt8:
      return 2 * n + 8 * ((n + kMomentBlock - 1) / kMomentBlock);
  }
  return 8 * n;
}

MomentView OffsetMoments(const MomentView& mv, int64_t b) {
  MomentView r = mv;
  const int64_t width = MomentWidth(mv.dtype);
  r.m = static_cast<char*>(mv.m) + b * width;
  r.v = static_cast<char*>(mv.v) + b * width;
  if (mv.m_scale != nullptr) r.m_scale = mv.m_scale + b / kMomentBlock;
  if (mv.v_scale != nullptr) r.v_scale = mv.v_scale + b / kMomentBlock;
  return r;
}

std::vector<MomentBuffer> MomentBuffers(const MomentView& mv, int64_t n) {
  const size_t width = static_cast<size_t>(MomentWidth(mv.dtype));
  std::vector<MomentBuffer> out = {{mv.m, static_cast<size_t>(n) * width}, {mv.v, static_cast<size_t>(n) * width}};
  if (mv.dtype == MomentDtype::kInt8) {
    const size_t blocks = static_cast<size_t>((n + kMomentBlock - 1) / kMomentBlock);
    out.push_back({mv.m_scale, blocks * sizeof(float)});
    out.push_back({mv.v_scale, blocks * sizeof(float)});
  }
  return out;
}

namespace adamw_internal {

// ------------------------------------------------------------------ scalar definitions

namespace {

inline float AbsMax(const float* x, int64_t n) {
  float mx = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    mx = a > mx ? a : mx;
  }
  return mx;
}

inline uint32_t BitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline float FloatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// The 8-bit float of the maps (moment_codec.h) with K mantissa bits: codes below 2^K
// are subnormal (code * 2^-(14+K)); above, (code >> K) is the exponent field (1 for
// 2^-14 .. 15 for 2^0) and the low K bits the mantissa. In fp32 bits, a normal code is
// the value's bits shifted right by 23 - K, less kExpOffset << K.
constexpr uint32_t kExpOffset = 127 - 15;
constexpr float kSmallestNormal = 0x1p-14f;
template <int K>
constexpr float kSubnormalScale = static_cast<float>(1u << (14 + K));  // 2^(14+K)
template <int K>
constexpr float kSubnormalUnit = 1.0f / kSubnormalScale<K>;           // 2^-(14+K), exact

// The dither of a subnormal code: the top 24 of the random bits as a float in [0, 1)
// (exact).
inline float Dither(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

// x in [0, 1] (NaN: 0) to its code, rounded stochastically by `bits` (moment_codec.h):
// a normal x's bits below the code's last place get the top 23 - K random bits added
// before they are cut (a carry moves x up one code); a subnormal code is floor(x *
// 2^(14+K) + dither) (x times a power of two is exact, so the sum rounds once).
template <int K>
inline uint32_t EncodeUnitFloat(float x, uint32_t bits) {
  if (!(x > 0.0f)) return 0;
  if (x < kSmallestNormal) return static_cast<uint32_t>(std::floor(x * kSubnormalScale<K> + Dither(bits)));
  constexpr uint32_t s = 23 - K;
  return ((BitsOf(x) + (bits >> (32 - s))) >> s) - (kExpOffset << K);
}

template <int K>
inline float DecodeUnitFloat(uint32_t c) {
  if (c < (1u << K)) return static_cast<float>(c) * kSubnormalUnit<K>;
  return FloatOf((c + (kExpOffset << K)) << (23 - K));
}

constexpr int kMBits = 3;  // m: sign and e4m3 of |m| / absmax
constexpr int kVBits = 4;  // v: e4m4 of sqrt(v / absmax)

}  // namespace

int8_t EncodeSigned8(float x, float inv_absmax, uint32_t bits) {
  const int c = static_cast<int>(EncodeUnitFloat<kMBits>(std::fabs(x) * inv_absmax, bits));
  return static_cast<int8_t>(x < 0.0f ? -c : c);
}

float DecodeSigned8(int8_t q, float absmax) {
  const float val = DecodeUnitFloat<kMBits>(static_cast<uint32_t>(q < 0 ? -q : q)) * absmax;
  return q < 0 ? -val : val;
}

uint8_t EncodeUnsigned8(float sqrt_v, float inv_sqrt_absmax, uint32_t bits) {
  const float r = sqrt_v * inv_sqrt_absmax;
  uint32_t c = EncodeUnitFloat<kVBits>(r, bits);
  if (c == 0 && r > 0.0f) c = 1;  // a nonzero v stays nonzero: the update divides by it
  return static_cast<uint8_t>(c);
}

float DecodeUnsigned8(uint8_t q, float absmax) {
  const float r = DecodeUnitFloat<kVBits>(q);
  return (r * r) * absmax;
}

namespace {

// The int8 kernels; DecodeMoments and EncodeMoments below route fp32 and bf16.
void DecodeInt8Scalar(const MomentView& mv, int64_t n, float* m, float* v) {
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

// v's block factor: 1 / sqrt(absmax) (0: inf, and the codes 0, NaN -> 0), the same
// scalar operations in every kernel.
inline float InvSqrtScale(float absmax) { return 1.0f / std::sqrt(absmax); }

void EncodeInt8Scalar(const MomentView& mv, int64_t n, const float* m, const float* v, const float* sqrt_v,
                      const RoundingSeed& seed) {
  auto* qm = static_cast<int8_t*>(mv.m);
  auto* qv = static_cast<uint8_t*>(mv.v);
  const uint32_t key = RoundingKey(seed.step);
  for (int64_t b = 0; b < n; b += kMomentBlock) {
    const int64_t len = std::min(kMomentBlock, n - b);
    const float sm = AbsMax(m + b, len), sv = AbsMax(v + b, len);
    const float im = 1.0f / sm, iv = InvSqrtScale(sv);  // 0: inf, and the codes 0 (NaN -> 0)
    mv.m_scale[b / kMomentBlock] = sm;
    mv.v_scale[b / kMomentBlock] = sv;
    for (int64_t i = b; i < b + len; ++i) {
      const uint32_t bits = RoundingBits(key, seed.first_index + i);
      qm[i] = EncodeSigned8(m[i], im, bits);
      qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
    }
  }
}

#ifdef SLIDEDP_X86_KERNELS

// ------------------------------------------------------------------ AVX-512

using lanes::kAll16;
using lanes::StoreBf16x16;
using lanes::WidenBf16x16;

SLIDEDP_AVX512 inline __m512 Abs512(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

SLIDEDP_AVX512 float AbsMax512(const float* x, int64_t n) {
  __m512 mx = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mx = _mm512_maskz_max_ps(kAll16, Abs512(_mm512_loadu_ps(x + i)), mx);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx);
  float r = AbsMax(x + i, n - i);
  for (float l : lanes) r = l > r ? l : r;
  return r;
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

// EncodeUnitFloat and DecodeUnitFloat lane by lane; both code kinds are computed and
// the lane's kind picked, without a branch (subnormal codes are common in a block of
// moments, and a branch on them mispredicts).
template <int K>
SLIDEDP_AVX512 inline __m512i EncodeUnitFloat512(__m512 x, __m512i bits) {
  constexpr int s = 23 - K;
  const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);  // NaN: false
  const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kSmallestNormal), _CMP_LT_OQ);
  const __m512i u = _mm512_castps_si512(x);
  const __m512i r = _mm512_maskz_srli_epi32(kAll16, _mm512_add_epi32(u, _mm512_maskz_srli_epi32(kAll16, bits, 32 - s)), s);
  const __m512i cn = _mm512_sub_epi32(r, _mm512_set1_epi32(static_cast<int>(kExpOffset << K)));
  const __m512 dither = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll16, _mm512_maskz_srli_epi32(kAll16, bits, 8)),
                                      _mm512_set1_ps(0x1p-24f));
  const __m512 y = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(kSubnormalScale<K>)), dither);
  const __m512i cs = _mm512_maskz_cvttps_epi32(
      kAll16, _mm512_maskz_roundscale_ps(kAll16, y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  return _mm512_maskz_mov_epi32(pos, _mm512_mask_mov_epi32(cn, small, cs));
}

template <int K>
SLIDEDP_AVX512 inline __m512 DecodeUnitFloat512(__m512i c) {
  const __mmask16 small = _mm512_cmp_epi32_mask(c, _mm512_set1_epi32(1 << K), _MM_CMPINT_LT);
  const __m512 fs = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll16, c), _mm512_set1_ps(kSubnormalUnit<K>));
  const __m512 fn = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
      kAll16, _mm512_add_epi32(c, _mm512_set1_epi32(static_cast<int>(kExpOffset << K))), 23 - K));
  return _mm512_mask_mov_ps(fn, small, fs);
}

SLIDEDP_AVX512 void WidenBf16Avx512(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, WidenBf16x16(in + i));
  for (; i < n; ++i) out[i] = WidenBf16(in[i]);
}

SLIDEDP_AVX512 void NarrowBf16Avx512(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) StoreBf16x16(out + i, _mm512_loadu_ps(in + i));
  for (; i < n; ++i) out[i] = Bf16Bits(in[i]);
}

SLIDEDP_AVX512 void DecodeInt8Avx512(const MomentView& mv, int64_t n, float* m, float* v) {
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // 16 divides the block: one scale per vector
    const __m512 sm = _mm512_set1_ps(mv.m_scale[i / kMomentBlock]);
    const __m512 sv = _mm512_set1_ps(mv.v_scale[i / kMomentBlock]);
    const __m512i cm = _mm512_maskz_cvtepi8_epi32(kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qm + i)));
    const __m512 valm = _mm512_mul_ps(DecodeUnitFloat512<kMBits>(_mm512_maskz_abs_epi32(kAll16, cm)), sm);
    const __m512i sgn = _mm512_and_si512(cm, sign);  // negative codes: negative values
    _mm512_storeu_ps(m + i, _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(valm), sgn)));
    const __m512i cv = _mm512_maskz_cvtepu8_epi32(kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qv + i)));
    const __m512 r = DecodeUnitFloat512<kVBits>(cv);
    _mm512_storeu_ps(v + i, _mm512_mul_ps(_mm512_mul_ps(r, r), sv));
  }
  for (; i < n; ++i) {  // the remainder, element by element with the scalar functions
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

SLIDEDP_AVX512 void EncodeInt8Avx512(const MomentView& mv, int64_t n, const float* m, const float* v,
                                     const float* sqrt_v, const RoundingSeed& seed) {
  auto* qm = static_cast<int8_t*>(mv.m);
  auto* qv = static_cast<uint8_t*>(mv.v);
  const uint32_t key = RoundingKey(seed.step);
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t b = 0; b < n; b += kMomentBlock) {
    const int64_t len = std::min(kMomentBlock, n - b);
    const float sm = AbsMax512(m + b, len), sv = AbsMax512(v + b, len);
    const float im = 1.0f / sm, iv = InvSqrtScale(sv);
    mv.m_scale[b / kMomentBlock] = sm;
    mv.v_scale[b / kMomentBlock] = sv;
    const __m512 vim = _mm512_set1_ps(im), viv = _mm512_set1_ps(iv);
    int64_t i = b;
    for (; i + 16 <= b + len; i += 16) {
      const __m512 xm = _mm512_loadu_ps(m + i);
      const __m512i bits = RoundingBits512(key, seed.first_index + i);
      __m512i cm = EncodeUnitFloat512<kMBits>(_mm512_mul_ps(Abs512(xm), vim), bits);
      const __mmask16 neg = _mm512_cmp_ps_mask(xm, _mm512_setzero_ps(), _CMP_LT_OQ);
      cm = _mm512_mask_sub_epi32(cm, neg, _mm512_setzero_si512(), cm);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qm + i), _mm512_maskz_cvtepi32_epi8(kAll16, cm));
      const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(sqrt_v + i), viv);
      const __mmask16 pos = _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_GT_OQ);
      const __m512i cv = _mm512_mask_max_epi32(
          _mm512_setzero_si512(), pos, EncodeUnitFloat512<kVBits>(r, _mm512_maskz_rol_epi32(kAll16, bits, 16)), one);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qv + i), _mm512_maskz_cvtepi32_epi8(kAll16, cv));
    }
    for (; i < b + len; ++i) {
      const uint32_t bits = RoundingBits(key, seed.first_index + i);
      qm[i] = EncodeSigned8(m[i], im, bits);
      qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
    }
  }
}

// ------------------------------------------------------------------ AVX2

using lanes::WidenBf16x8;

SLIDEDP_AVX2 inline __m256 Abs256(__m256 x) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}


SLIDEDP_AVX2 float AbsMax256(const float* x, int64_t n) {
  __m256 mx = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(Abs256(_mm256_loadu_ps(x + i)), mx);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float r = AbsMax(x + i, n - i);
  for (float l : lanes) r = l > r ? l : r;
  return r;
}

SLIDEDP_AVX2 void NarrowBf16Avx2(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) lanes::StoreBf16x16(out + i, _mm256_loadu_ps(in + i), _mm256_loadu_ps(in + i + 8));
  for (; i < n; ++i) out[i] = Bf16Bits(in[i]);
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

template <int K>
SLIDEDP_AVX2 inline __m256i EncodeUnitFloat256(__m256 x, __m256i bits) {
  constexpr int s = 23 - K;
  const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));  // NaN: false
  const __m256i small = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_set1_ps(kSmallestNormal), _CMP_LT_OQ));
  const __m256 dither = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bits, 8)), _mm256_set1_ps(0x1p-24f));
  const __m256i cs = _mm256_cvttps_epi32(
      _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(kSubnormalScale<K>)), dither)));
  const __m256i u = _mm256_castps_si256(x);
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_srli_epi32(bits, 32 - s)), s);
  const __m256i cn = _mm256_sub_epi32(r, _mm256_set1_epi32(static_cast<int>(kExpOffset << K)));
  return _mm256_and_si256(_mm256_blendv_epi8(cn, cs, small), pos);
}

template <int K>
SLIDEDP_AVX2 inline __m256 DecodeUnitFloat256(__m256i c) {
  const __m256 small = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(1 << K), c));
  const __m256 fs = _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(kSubnormalUnit<K>));
  const __m256 fn = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(c, _mm256_set1_epi32(static_cast<int>(kExpOffset << K))), 23 - K));
  return _mm256_blendv_ps(fn, fs, small);
}

SLIDEDP_AVX2 void WidenBf16Avx2(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, WidenBf16x8(in + i));
  for (; i < n; ++i) out[i] = WidenBf16(in[i]);
}

SLIDEDP_AVX2 void DecodeInt8Avx2(const MomentView& mv, int64_t n, float* m, float* v) {
  int64_t i = 0;
  const auto* qm = static_cast<const int8_t*>(mv.m);
  const auto* qv = static_cast<const uint8_t*>(mv.v);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  for (; i + 8 <= n; i += 8) {
    const __m256 sm = _mm256_set1_ps(mv.m_scale[i / kMomentBlock]);
    const __m256 sv = _mm256_set1_ps(mv.v_scale[i / kMomentBlock]);
    const __m256i cm = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qm + i)));
    const __m256 valm = _mm256_mul_ps(DecodeUnitFloat256<kMBits>(_mm256_abs_epi32(cm)), sm);
    const __m256i sgn = _mm256_and_si256(cm, sign);  // negative codes: negative values
    _mm256_storeu_ps(m + i, _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(valm), sgn)));
    const __m256i cv = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qv + i)));
    const __m256 r = DecodeUnitFloat256<kVBits>(cv);
    _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_mul_ps(r, r), sv));
  }
  for (; i < n; ++i) {
    m[i] = DecodeSigned8(qm[i], mv.m_scale[i / kMomentBlock]);
    v[i] = DecodeUnsigned8(qv[i], mv.v_scale[i / kMomentBlock]);
  }
}

// The low byte of each of 32 int32 lanes (a: elements 0-7, b: 8-15, c, d), in order: the
// scalar kernel's casts (and AVX-512's cvtepi32_epi8), also for codes out of a byte's
// range (a block of subnormal moments scales to infinity: code 1144, cast to 120).
// Masked to a byte, packed two lanes of 128 bits at a time, the dwords put back in order.
SLIDEDP_AVX2 inline __m256i LowBytes32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ff = _mm256_set1_epi32(0xff);
  const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, ff), _mm256_and_si256(b, ff));
  const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, ff), _mm256_and_si256(d, ff));
  // Dwords: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7.
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The codes of m and v for the 8 elements from i (int32 lanes, a byte's worth each).
struct Codes8 {
  __m256i m, v;
};
SLIDEDP_AVX2 inline Codes8 EncodeInt8x8(const float* m, const float* sqrt_v, int64_t i, __m256 vim, __m256 viv,
                                        uint32_t key, int64_t first_index) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256 xm = _mm256_loadu_ps(m + i);
  const __m256i bits = RoundingBits256(key, first_index + i);
  __m256i c = EncodeUnitFloat256<kMBits>(_mm256_mul_ps(Abs256(xm), vim), bits);
  const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(xm, _mm256_setzero_ps(), _CMP_LT_OQ));
  c = _mm256_blendv_epi8(c, _mm256_sub_epi32(_mm256_setzero_si256(), c), neg);
  const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(sqrt_v + i), viv);
  const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_GT_OQ));
  const __m256i cv = _mm256_and_si256(_mm256_max_epi32(EncodeUnitFloat256<kVBits>(r, Rotate16x8(bits)), one), pos);
  return {c, cv};
}

SLIDEDP_AVX2 void EncodeInt8Avx2(const MomentView& mv, int64_t n, const float* m, const float* v,
                                 const float* sqrt_v, const RoundingSeed& seed) {
  auto* qm = static_cast<int8_t*>(mv.m);
  auto* qv = static_cast<uint8_t*>(mv.v);
  const uint32_t key = RoundingKey(seed.step);
  for (int64_t b = 0; b < n; b += kMomentBlock) {
    const int64_t len = std::min(kMomentBlock, n - b);
    const float sm = AbsMax256(m + b, len), sv = AbsMax256(v + b, len);
    const float im = 1.0f / sm, iv = InvSqrtScale(sv);
    mv.m_scale[b / kMomentBlock] = sm;
    mv.v_scale[b / kMomentBlock] = sv;
    const __m256 vim = _mm256_set1_ps(im), viv = _mm256_set1_ps(iv);
    int64_t i = b;
    // 32 elements a time, their codes stored as 32 bytes at once; a unit's last partial
    // block ends in the scalar loop.
    for (; i + 32 <= b + len; i += 32) {
      const Codes8 c0 = EncodeInt8x8(m, sqrt_v, i, vim, viv, key, seed.first_index);
      const Codes8 c1 = EncodeInt8x8(m, sqrt_v, i + 8, vim, viv, key, seed.first_index);
      const Codes8 c2 = EncodeInt8x8(m, sqrt_v, i + 16, vim, viv, key, seed.first_index);
      const Codes8 c3 = EncodeInt8x8(m, sqrt_v, i + 24, vim, viv, key, seed.first_index);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qm + i), LowBytes32(c0.m, c1.m, c2.m, c3.m));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qv + i), LowBytes32(c0.v, c1.v, c2.v, c3.v));
    }
    for (; i < b + len; ++i) {
      const uint32_t bits = RoundingBits(key, seed.first_index + i);
      qm[i] = EncodeSigned8(m[i], im, bits);
      qv[i] = EncodeUnsigned8(sqrt_v[i], iv, VBits(bits));
    }
  }
}

#endif  // SLIDEDP_X86_KERNELS

}  // namespace

void WidenBf16(Isa isa, const uint16_t* in, int64_t n, float* out) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return WidenBf16Avx512(in, n, out);
    case Isa::kAvx2:
      return WidenBf16Avx2(in, n, out);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = WidenBf16(in[i]);
  }
}

void NarrowBf16(Isa isa, const float* in, int64_t n, uint16_t* out) {
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return NarrowBf16Avx512(in, n, out);
    case Isa::kAvx2:
      return NarrowBf16Avx2(in, n, out);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16Bits(in[i]);
  }
}

void DecodeMoments(Isa isa, const MomentView& mv, int64_t n, float* m, float* v) {
  if (mv.dtype == MomentDtype::kFp32) {
    std::memcpy(m, mv.m, n * sizeof(float));
    std::memcpy(v, mv.v, n * sizeof(float));
    return;
  }
  if (mv.dtype == MomentDtype::kBf16) {
    WidenBf16(isa, static_cast<const uint16_t*>(mv.m), n, m);
    WidenBf16(isa, static_cast<const uint16_t*>(mv.v), n, v);
    return;
  }
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return DecodeInt8Avx512(mv, n, m, v);
    case Isa::kAvx2:
      return DecodeInt8Avx2(mv, n, m, v);
#endif
    default:
      return DecodeInt8Scalar(mv, n, m, v);
  }
}

void EncodeMoments(Isa isa, const MomentView& mv, int64_t n, const float* m, const float* v,
                   const RoundingSeed& seed, const float* sqrt_v) {
  if (mv.dtype == MomentDtype::kFp32) {
    std::memcpy(mv.m, m, n * sizeof(float));
    std::memcpy(mv.v, v, n * sizeof(float));
    return;
  }
  if (mv.dtype == MomentDtype::kBf16) {
    NarrowBf16(isa, m, n, static_cast<uint16_t*>(mv.m));
    NarrowBf16(isa, v, n, static_cast<uint16_t*>(mv.v));
    return;
  }
  std::vector<float> roots;
  if (sqrt_v == nullptr) {  // not given by the update: the same correctly rounded roots
    roots.resize(n);
    for (int64_t i = 0; i < n; ++i) roots[i] = std::sqrt(v[i]);
    sqrt_v = roots.data();
  }
  switch (isa) {
#ifdef SLIDEDP_X86_KERNELS
    case Isa::kAvx512:
      return EncodeInt8Avx512(mv, n, m, v, sqrt_v, seed);
    case Isa::kAvx2:
      return EncodeInt8Avx2(mv, n, m, v, sqrt_v, seed);
#endif
    default:
      return EncodeInt8Scalar(mv, n, m, v, sqrt_v, seed);
  }
}

}  // namespace adamw_internal
}  // namespace slidedp
