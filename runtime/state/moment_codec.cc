// Moment storage: the dtypes' sizes and views, the bf16 widen and narrow, and the decode
// and encode of a tile per dtype (the 8-bit kernels are int8_moments.cc's); see
// moment_codec.h. The AVX2 and AVX-512 bodies are compiled for their instruction set with
// target attributes and only called after IsaSupported() (adamw_kernels.h); remainders
// go through the scalar functions.
// Threads: pure functions of their arguments; any thread.
#include "runtime/state/moment_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/int8_moments.h"
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
namespace {

#ifdef SLIDEDP_X86_KERNELS

using lanes::StoreBf16x16;
using lanes::WidenBf16x16;
using lanes::WidenBf16x8;

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

SLIDEDP_AVX2 void NarrowBf16Avx2(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) StoreBf16x16(out + i, _mm256_loadu_ps(in + i), _mm256_loadu_ps(in + i + 8));
  for (; i < n; ++i) out[i] = Bf16Bits(in[i]);
}

SLIDEDP_AVX2 void WidenBf16Avx2(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, WidenBf16x8(in + i));
  for (; i < n; ++i) out[i] = WidenBf16(in[i]);
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
  DecodeInt8(isa, mv, n, m, v);
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
  EncodeInt8(isa, mv, n, m, v, sqrt_v, seed);
}

}  // namespace adamw_internal
}  // namespace slidedp
