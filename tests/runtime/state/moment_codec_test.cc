// Compact AdamW moments (optimizer.state_dtype): the 8-bit and bf16 round trips within
// their error bounds, every vector kernel bit for bit equal to the scalar one (odd
// sizes, partial blocks, zeros, non-finite values), and the stored-moment update equal
// to its scalar reference for every thread count, and to AdamWUpdate with fp32 moments.
#include "runtime/state/moment_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_kernels.h"

namespace slidedp {
namespace {

using adamw_internal::Isa;

// Values over many orders of magnitude (as moments are), both signs, some exact zeros.
std::vector<float> Spread(int64_t n, uint32_t seed, bool non_negative) {
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

// Stored moments of n elements of `dtype`, with the view pointing at them.
struct Stored {
  MomentDtype dtype;
  std::vector<uint8_t> m, v;
  std::vector<float> ms, vs;
  explicit Stored(MomentDtype d, int64_t n) : dtype(d) {
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
  bool operator==(const Stored& o) const { return m == o.m && v == o.v && ms == o.ms && vs == o.vs; }
};

std::vector<Isa> VectorIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (adamw_internal::IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

TEST(MomentCodec, NamesAndBytes) {
  for (MomentDtype d : {MomentDtype::kFp32, MomentDtype::kBf16, MomentDtype::kInt8}) {
    EXPECT_EQ(EnumFromName<MomentDtype>(NameOf(d)), d);
  }
  EXPECT_FALSE(EnumFromName<MomentDtype>("fp8").has_value());
  EXPECT_EQ(MomentBytes(MomentDtype::kFp32, 1000), 8000);
  EXPECT_EQ(MomentBytes(MomentDtype::kBf16, 1000), 4000);
  EXPECT_EQ(MomentBytes(MomentDtype::kInt8, 1000), 2000 + 8 * 4);  // 4 blocks, 2 scales each
}

TEST(MomentCodec, Int8RoundTripWithinTheBlockBound) {
  const int64_t n = 4 * kMomentBlock + 77;
  const std::vector<float> m = Spread(n, 1, false), v = Spread(n, 2, true);
  Stored s(MomentDtype::kInt8, n);
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data());
  std::vector<float> m2(n), v2(n);
  adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m2.data(), v2.data());
  for (int64_t i = 0; i < n; ++i) {
    const double sm = s.ms[i / kMomentBlock], sv = s.vs[i / kMomentBlock];
    // m: relative error at most 1/16 (half a step of 3 mantissa bits) above absmax *
    // 2^-14, absolute at most half a subnormal step (absmax * 2^-18) below.
    const double xm = std::fabs(m[i]);
    const double bound_m = std::max(xm / 16, sm * std::ldexp(1.0, -18)) * (1 + 1e-6);
    EXPECT_LE(std::fabs(m2[i] - m[i]), bound_m) << "m[" << i << "] = " << m[i];
    if (m2[i] != 0) {
      EXPECT_EQ(std::signbit(m2[i]), std::signbit(m[i])) << i;
    }
    // v: sqrt(v) within 1/32 relative (4 mantissa bits), or half a subnormal step of
    // sqrt(absmax) * 2^-18 (the clamp of a tiny nonzero v to the smallest code).
    const double r = std::sqrt(v[i]), r2 = std::sqrt(v2[i]);
    const double bound_r = std::max(r / 32, std::sqrt(sv) * std::ldexp(1.0, -18)) * (1 + 1e-6);
    EXPECT_LE(std::fabs(r2 - r), bound_r) << "v[" << i << "] = " << v[i];
    if (v[i] > 0) {
      EXPECT_GT(v2[i], 0.0f) << i;
    }
  }
  // Each block's largest magnitude comes back exactly: the update's scale is kept.
  for (int64_t b = 0; b < n; b += kMomentBlock) {
    for (int64_t i = b; i < std::min(n, b + kMomentBlock); ++i) {
      if (std::fabs(m[i]) == s.ms[b / kMomentBlock]) {
        EXPECT_EQ(m2[i], m[i]) << i;
      }
      if (v[i] == s.vs[b / kMomentBlock]) {
        EXPECT_EQ(v2[i], v[i]) << i;
      }
    }
  }
}

TEST(MomentCodec, ZeroBlocksAndNonFiniteValuesEncodeAsZero) {
  const int64_t n = 2 * kMomentBlock;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  m[kMomentBlock + 3] = std::numeric_limits<float>::quiet_NaN();
  m[kMomentBlock + 4] = 0.5f;
  v[kMomentBlock + 5] = std::numeric_limits<float>::quiet_NaN();
  v[kMomentBlock + 6] = 0.25f;
  Stored s(MomentDtype::kInt8, n);
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data());
  EXPECT_EQ(s.ms[0], 0.0f);
  EXPECT_EQ(s.vs[0], 0.0f);
  std::vector<float> m2(n, 1.0f), v2(n, 1.0f);
  adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m2.data(), v2.data());
  for (int64_t i = 0; i < kMomentBlock; ++i) {
    EXPECT_EQ(m2[i], 0.0f);
    EXPECT_EQ(v2[i], 0.0f);
  }
  EXPECT_EQ(m2[kMomentBlock + 3], 0.0f);
  EXPECT_EQ(m2[kMomentBlock + 4], 0.5f);
  EXPECT_EQ(v2[kMomentBlock + 5], 0.0f);
  EXPECT_EQ(v2[kMomentBlock + 6], 0.25f);
}

TEST(MomentCodec, Bf16RoundTripIsNearestEven) {
  const int64_t n = 1000;
  const std::vector<float> m = Spread(n, 3, false), v = Spread(n, 4, true);
  Stored s(MomentDtype::kBf16, n);
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data());
  std::vector<float> m2(n), v2(n);
  adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m2.data(), v2.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_LE(std::fabs(m2[i] - m[i]), std::fabs(m[i]) * (1.0 / 256)) << i;
    EXPECT_LE(std::fabs(v2[i] - v[i]), std::fabs(v[i]) * (1.0 / 256)) << i;
  }
}

// Every vector kernel gives the scalar kernel's bits, for sizes that end mid-vector and
// mid-block, with zeros, negative zeros, infinities and NaNs among the values.
TEST(MomentCodec, VectorKernelsEqualTheScalarOneBitForBit) {
  const std::vector<Isa> isas = VectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector kernel on this CPU";
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    for (int64_t n : {1, 7, 15, 17, 255, 256, 257, 1000, 16384 + 33}) {
      std::vector<float> m = Spread(n, 10 + n, false), v = Spread(n, 20 + n, true);
      if (n > 300) {
        m[5] = -0.0f;
        m[300] = std::numeric_limits<float>::infinity();
        v[290] = std::numeric_limits<float>::quiet_NaN();
        m[600] = std::numeric_limits<float>::quiet_NaN();
      }
      Stored ref(d, n);
      adamw_internal::EncodeMoments(Isa::kScalar, ref.view(), n, m.data(), v.data());
      std::vector<float> rm(n), rv(n);
      adamw_internal::DecodeMoments(Isa::kScalar, ref.view(), n, rm.data(), rv.data());
      for (Isa isa : isas) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " " << NameOf(d)
                                        << " n=" << n);
        Stored got(d, n);
        adamw_internal::EncodeMoments(isa, got.view(), n, m.data(), v.data());
        EXPECT_TRUE(got == ref);
        std::vector<float> gm(n), gv(n);
        adamw_internal::DecodeMoments(isa, ref.view(), n, gm.data(), gv.data());
        EXPECT_EQ(std::memcmp(gm.data(), rm.data(), n * 4), 0);
        EXPECT_EQ(std::memcmp(gv.data(), rv.data(), n * 4), 0);
      }
    }
  }
}

struct UpdateCase {
  std::vector<float> p, g;
  std::vector<uint16_t> gp;  // bf16 gradient, then parameters
};

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

UpdateCase MakeCase(int64_t n, uint32_t seed) {
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

// Three steps of the stored-moment update against its scalar reference, for 1, 2, 3
// and 8 threads, fp32 and bf16 gradients, spans of different weight decay that start
// mid-block.
TEST(MomentCodec, StoredUpdateEqualsItsReferenceForEveryThreadCount) {
  const int64_t n = 3 * 16384 + 1000;  // several tiles, a partial last block
  const std::vector<DecaySpan> spans = {{0, 700, 0.1f}, {700, 20000, 0.0f}, {20000, n, 0.05f}};
  for (MomentDtype d : {MomentDtype::kFp32, MomentDtype::kBf16, MomentDtype::kInt8}) {
    for (bool bf16_grad : {false, true}) {
      UpdateCase ref = MakeCase(n, 7);
      Stored ref_state(d, n);
      AdamWHyper h;
      h.lr = 1e-2f;
      for (int step = 1; step <= 3; ++step) {
        h.step = step;
        UpdateCase in = MakeCase(n, 100 + step);
        ref.g = in.g;
        if (bf16_grad) ref.gp = in.gp;
        AdamWStoredReference(h, spans, n, ref.p.data(), bf16_grad ? nullptr : ref.g.data(),
                             ref.gp.data(), ref_state.view());
      }
      for (int threads : {1, 2, 3, 8}) {
        SCOPED_TRACE(::testing::Message() << NameOf(d) << " bf16_grad=" << bf16_grad
                                        << " threads=" << threads);
        UpdateCase got = MakeCase(n, 7);
        Stored state(d, n);
        for (int step = 1; step <= 3; ++step) {
          h.step = step;
          UpdateCase in = MakeCase(n, 100 + step);
          got.g = in.g;
          if (bf16_grad) got.gp = in.gp;
          AdamWUpdateStored(h, spans, n, got.p.data(), bf16_grad ? nullptr : got.g.data(),
                            got.gp.data(), state.view(), threads);
        }
        EXPECT_EQ(std::memcmp(got.p.data(), ref.p.data(), n * 4), 0);
        EXPECT_TRUE(state == ref_state);
        if (bf16_grad) {
          EXPECT_EQ(got.gp, ref.gp);
        }
      }
    }
  }
}

// With fp32 moments the stored-moment update is today's update, bit for bit.
TEST(MomentCodec, Fp32StoredUpdateIsAdamWUpdate) {
  const int64_t n = 20000;
  UpdateCase a = MakeCase(n, 9), b = MakeCase(n, 9);
  std::vector<float> am(n, 0.0f), av(n, 0.0f);
  Stored s(MomentDtype::kFp32, n);
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  for (int step = 1; step <= 3; ++step) {
    h.step = step;
    AdamWUpdate(h, n, a.p.data(), a.g.data(), am.data(), av.data(), 2);
    AdamWUpdateStored(h, {{0, n, 0.1f}}, n, b.p.data(), b.g.data(), nullptr, s.view(), 2);
  }
  EXPECT_EQ(std::memcmp(a.p.data(), b.p.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(am.data(), s.m.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(av.data(), s.v.data(), n * 4), 0);
}

// The compact moments follow the fp32 ones: 200 steps of AdamW on the same noisy
// gradients of a quadratic leave the parameters about as close to its minimum (the
// quantization error does not compound).
TEST(MomentCodec, CompactMomentsTrackFp32Moments) {
  const int64_t n = 4096;
  std::vector<float> target(n);
  {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& t : target) t = normal(rng);
  }
  auto run = [&](MomentDtype d) {
    std::mt19937 rng(6);  // the same noisy gradients for each dtype
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(n, 0.0f), g(n);
    Stored s(d, n);
    AdamWHyper h;
    h.lr = 1e-2f;
    for (int step = 1; step <= 200; ++step) {
      h.step = step;
      for (int64_t i = 0; i < n; ++i) g[i] = p[i] - target[i] + 0.1f * normal(rng);
      AdamWUpdateStored(h, {{0, n, 0.0f}}, n, p.data(), g.data(), nullptr, s.view(), 1);
    }
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += (p[i] - target[i]) * (p[i] - target[i]);
    return std::sqrt(err / n);
  };
  const double fp32 = run(MomentDtype::kFp32), bf16 = run(MomentDtype::kBf16), int8 = run(MomentDtype::kInt8);
  EXPECT_LT(fp32, 0.3);  // it learns: from 1.0 towards the target
  std::printf("rms distance to the target after 200 steps: fp32 %.5f bf16 %.5f int8 %.5f\n", fp32, bf16, int8);
  EXPECT_NEAR(bf16, fp32, 0.02 * fp32);
  // 8-bit m keeps 3 mantissa bits: the noisy gradients' momentum is rounded by up to
  // 1/16, which leaves the parameters about 11% further from the target than fp32's.
  EXPECT_NEAR(int8, fp32, 0.15 * fp32);
}

}  // namespace
}  // namespace slidedp
