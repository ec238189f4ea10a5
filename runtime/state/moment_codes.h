// The single values of the stored moments' maps (moment_codec.h says what they are and
// why): one 8-bit code from a scaled value and its random bits and back, the random bits
// of an element (RoundingBits), bf16 rounding. One definition for the CPU kernels
// (int8_moments.cc: the scalar reference, and the vector kernels' remainders) and the GPU
// kernel of resident units (adamw_device.cu), so that both give the same bits: every
// floating-point operation is one IEEE operation rounded to nearest (on the GPU the _rn
// intrinsics, never contracted into a fused multiply-add), the rest is integer
// arithmetic on the bits. No step computes with fp32 subnormals, which cost microcode
// assists on some CPUs (a subnormal code is the normal code of x + 2^-14 less 2^K).
// Threads: pure functions; any thread, host or device.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SLIDEDP_HD __host__ __device__
#else
#define SLIDEDP_HD
#endif

namespace slidedp {
namespace moment_codes {

// Elements per quantization block of the 8-bit moments.
inline constexpr int64_t kBlock = 256;

// ------------------------------------------------------------------ arithmetic

SLIDEDP_HD inline uint32_t BitsOf(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
SLIDEDP_HD inline float FloatOf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
SLIDEDP_HD inline float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SLIDEDP_HD inline float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SLIDEDP_HD inline float Abs(float x) { return FloatOf(BitsOf(x) & 0x7fffffffu); }
// The larger of a and mx, NaN a ignored (as x86's max_ps(a, mx) keeps mx): the blocks'
// absolute maxima, in any order.
SLIDEDP_HD inline float Larger(float a, float mx) { return a > mx ? a : mx; }

// ------------------------------------------------------------------ bf16

// fp32 -> bf16 bits rounded to nearest even as LibTorch converts (NaN -> 0x7FC0), and back.
SLIDEDP_HD inline uint16_t Bf16Bits(float x) {
  const uint32_t u = BitsOf(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
SLIDEDP_HD inline float WidenBf16(uint16_t b) { return FloatOf(static_cast<uint32_t>(b) << 16); }

// ------------------------------------------------------------------ random bits

// The random bits of element `index` (of its unit) at a step: RoundingBits(
// RoundingKey(step), index) for m, and those rotated by 16 (VBits) for v. A 32-bit mix
// (the finalizer of MurmurHash3, whose output bits are close to independent) of
// index * kIndexMix + key, all modulo 2^32; the vector kernels compute the same lane by
// lane (one mix an element for both moments).
inline constexpr uint32_t kRoundingSalt = 0x6a09e667u, kIndexMix = 0x9e3779b9u;
inline constexpr uint32_t kMixMul1 = 0x7feb352du, kMixMul2 = 0x846ca68bu;  // Mix32's multipliers
SLIDEDP_HD inline uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= kMixMul1;
  x ^= x >> 15;
  x *= kMixMul2;
  return x ^ (x >> 16);
}
SLIDEDP_HD inline uint32_t RoundingKey(int64_t step) { return Mix32(static_cast<uint32_t>(step) ^ kRoundingSalt); }
SLIDEDP_HD inline uint32_t RoundingBits(uint32_t key, int64_t index) {
  return Mix32(static_cast<uint32_t>(index) * kIndexMix + key);
}
SLIDEDP_HD inline uint32_t VBits(uint32_t bits) { return (bits << 16) | (bits >> 16); }

// ------------------------------------------------------------------ 8-bit codes

// The 8-bit float of the maps with K mantissa bits: codes below 2^K are subnormal
// (code * 2^-(14+K)); above, (code >> K) is the exponent field (1 for 2^-14 .. 15 for
// 2^0) and the low K bits the mantissa. In fp32 bits, a normal code is the value's bits
// shifted right by 23 - K, less kExpOffset << K; a subnormal code is that of x + 2^-14
// less 2^K (the sum's mantissa holds x / 2^-14, rounded to nearest even at 2^-(23-K) of
// a code step).
inline constexpr uint32_t kExpOffset = 127 - 15;
inline constexpr float kSmallestNormal = 0x1p-14f;
inline constexpr int kMBits = 3;  // m: sign and e4m3 of |m| / absmax
inline constexpr int kVBits = 4;  // v: e4m4 of sqrt(v / absmax)
template <int K>
inline constexpr float kSubnormalUnit = 1.0f / static_cast<float>(1u << (14 + K));  // 2^-(14+K), exact

// x in [0, 1] (larger: 1; NaN and below 0: 0) to its code, rounded stochastically by
// `bits`: the bits below the code's last place get the top 23 - K random bits added
// before they are cut (a carry moves x up one code).
template <int K>
SLIDEDP_HD inline uint32_t EncodeUnitFloat(float x, uint32_t bits) {
  x = x > 0.0f ? x : 0.0f;  // NaN: 0 (the comparison is false)
  x = x < 1.0f ? x : 1.0f;
  const bool small = x < kSmallestNormal;
  const float y = small ? Add(x, kSmallestNormal) : x;  // in [2^-14, 1]: a normal code's bits
  constexpr uint32_t s = 23 - K;
  return ((BitsOf(y) + (bits >> (32 - s))) >> s) - (kExpOffset << K) - (small ? 1u << K : 0u);
}

template <int K>
SLIDEDP_HD inline float DecodeUnitFloat(uint32_t c) {
  if (c < (1u << K)) return Mul(static_cast<float>(c), kSubnormalUnit<K>);
  return FloatOf((c + (kExpOffset << K)) << (23 - K));
}

// One code (given the factor of the block's scale that every kernel multiplies by:
// 1.0f / absmax for m, and for v, given sqrt(v), InvSqrtScale(absmax)) with the
// element's random bits, and back.
SLIDEDP_HD inline int8_t EncodeSigned8(float x, float inv_absmax, uint32_t bits) {
  const int c = static_cast<int>(EncodeUnitFloat<kMBits>(Mul(Abs(x), inv_absmax), bits));
  return static_cast<int8_t>(x < 0.0f ? -c : c);
}
SLIDEDP_HD inline float DecodeSigned8(int8_t q, float absmax) {
  const float mag = DecodeUnitFloat<kMBits>(static_cast<uint32_t>(q < 0 ? -q : q));
  return Mul(q < 0 ? -mag : mag, absmax);  // the sign first: a NaN scale's product is that NaN
}
SLIDEDP_HD inline uint8_t EncodeUnsigned8(float sqrt_v, float inv_sqrt_absmax, uint32_t bits) {
  const float r = Mul(sqrt_v, inv_sqrt_absmax);
  uint32_t c = EncodeUnitFloat<kVBits>(r, bits);
  if (c == 0 && r > 0.0f) c = 1;  // a nonzero v stays nonzero: the update divides by it
  return static_cast<uint8_t>(c);
}
SLIDEDP_HD inline float DecodeUnsigned8(uint8_t q, float absmax) {
  const float r = DecodeUnitFloat<kVBits>(q);
  return Mul(Mul(r, r), absmax);
}

// The blocks' factors from their scales (0: inf, and the codes 0; NaN -> 0).
SLIDEDP_HD inline float InvScale(float absmax) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, absmax);
#else
  return 1.0f / absmax;
#endif
}
SLIDEDP_HD inline float InvSqrtScale(float absmax) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, __fsqrt_rn(absmax));
#else
  return 1.0f / __builtin_sqrtf(absmax);
#endif
}

}  // namespace moment_codes
}  // namespace slidedp
