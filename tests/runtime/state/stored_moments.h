// Tests of the stored AdamW moments: m and v of n elements as optimizer.state_dtype keeps
// them in host memory (and the 8-bit blocks' scales), in vectors of their own, with a
// MomentView of them; the data the codec's tests share (moments over many magnitudes, an
// update's parameters and gradients) and the vector kernels this CPU runs. Tests only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/moment_codec.h"

namespace slidedp::testing {

struct StoredMoments {
  MomentDtype dtype;
  std::vector<uint8_t> m, v;
  std::vector<float> ms, vs;  // int8: one scale per block of kMomentBlock; otherwise unused
  StoredMoments(MomentDtype d, int64_t n) : dtype(d) {
    const int64_t width = MomentWidth(d);
    m.assign(n * width, 0);
    v.assign(n * width, 0);
    ms.assign((n + kMomentBlock - 1) / kMomentBlock, 0.0f);
    vs.assign(ms.size(), 0.0f);
  }
  MomentView view() {
    MomentView mv;
    mv.dtype = dtype;
    mv.m = m.data();
    mv.v = v.data();
    if (dtype == MomentDtype::kInt8) {
      mv.m_scale = ms.data();
      mv.v_scale = vs.data();
    }
    return mv;
  }
  bool operator==(const StoredMoments& o) const { return m == o.m && v == o.v && ms == o.ms && vs == o.vs; }
};

// Values over many orders of magnitude (as moments are), both signs, some exact zeros.
inline std::vector<float> Spread(int64_t n, uint32_t seed, bool non_negative) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 0);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    float a = std::ldexp(mant(rng), expo(rng));
    if (i % 37 == 11) a = 0.0f;
    x[i] = (!non_negative && (rng() & 1)) ? -a : a;
  }
  return x;
}

// The vector kernels this build and CPU run (all of them in the SIMDe build).
inline std::vector<adamw_internal::Isa> VectorIsas() {
  std::vector<adamw_internal::Isa> out;
  for (adamw_internal::Isa isa : {adamw_internal::Isa::kAvx2, adamw_internal::Isa::kAvx512}) {
    if (adamw_internal::IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

// Those and the scalar kernel, the reference, last.
inline std::vector<adamw_internal::Isa> EveryIsa() {
  std::vector<adamw_internal::Isa> out = VectorIsas();
  out.push_back(adamw_internal::Isa::kScalar);
  return out;
}

// An update's parameters and gradient (fp32, and as bf16 bits that the one-pass update
// overwrites with the new parameters), normal values with some zero gradients.
struct UpdateCase {
  std::vector<float> p, g;
  std::vector<uint16_t> gp;  // bf16 gradient, then parameters
};

inline uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline UpdateCase MakeCase(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  UpdateCase c;
  for (int64_t i = 0; i < n; ++i) {
    c.p.push_back(normal(rng));
    c.g.push_back(i % 53 == 7 ? 0.0f : normal(rng) * 1e-2f);
    c.gp.push_back(ToBf16(c.g.back()));
  }
  return c;
}

}  // namespace slidedp::testing
