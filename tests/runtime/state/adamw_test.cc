// CPU AdamW: the reference against hand-computed steps, every vector kernel and the
// threaded path against the reference (bit for bit), thread-count invariance, and the
// sum of squares.
#include "runtime/state/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/state/adamw_kernels.h"

namespace slidedp {
namespace {

using adamw_internal::Isa;

struct Buffers {
  std::vector<float> p, g, m, v;
};

// Random state as after a few steps: v >= 0, moments small, some exact zeros.
Buffers RandomBuffers(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffers b;
  b.p.resize(n);
  b.g.resize(n);
  b.m.resize(n);
  b.v.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    b.p[i] = normal(rng);
    b.g[i] = (i % 97 == 3) ? 0.0f : normal(rng) * 1e-2f;
    b.m[i] = normal(rng) * 1e-3f;
    const float s = normal(rng) * 1e-2f;
    b.v[i] = (i % 89 == 5) ? 0.0f : s * s;
  }
  return b;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Index of the first element where |a - b| > rel * max(|a|, |b|), or -1.
int64_t FirstRelativeMismatch(const std::vector<float>& a, const std::vector<float>& b,
                              double rel) {
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::fabs(x - y) > rel * std::max(std::fabs(x), std::fabs(y))) return i;
  }
  return -1;
}

AdamWHyper Hyper(float wd, float grad_scale, int64_t step) {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = wd;
  h.grad_scale = grad_scale;
  h.step = step;
  return h;
}

// Dyadic hyperparameters keep the hand arithmetic exact in fp32 up to the final
// roundings of sqrt and division: a few ulps.
void ExpectClose(float actual, double want) {
  EXPECT_NEAR(actual, want, 3e-7 * std::fabs(want)) << "want " << want;
}

AdamWHyper DyadicHyper() {
  AdamWHyper h;
  h.lr = 0.125f;
  h.beta1 = 0.5f;
  h.beta2 = 0.75f;
  h.eps = 1e-8f;
  return h;
}

TEST(AdamWReferenceTest, TwoStepsMatchHandComputedValues) {
  AdamWHyper h = DyadicHyper();
  // Element 0: constant gradient 0.5. m_hat = 0.5, v_hat = 0.25 at every step, so Adam
  //            moves by lr: step 1 m = 0.25, v = 0.0625; step 2 m = 0.375, v = 0.109375.
  // Element 1: gradient 1 then -1. Step 1 moves by lr. Step 2: m = 0.25 - 0.5 = -0.25,
  //            v = 0.1875 + 0.25 = 0.4375, m_hat = -0.25 / 0.75 = -1/3,
  //            v_hat = 0.4375 / (1 - 0.5625) = 1, so p = 0.875 + 0.125 / 3.
  // Element 2: zero gradient: m = v = 0 and the update is 0 / eps = 0.
  // Element 3: gradient -2: p grows by lr every step.
  std::vector<float> p = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  const std::vector<float> g1 = {0.5f, 1.0f, 0.0f, -2.0f};
  const std::vector<float> g2 = {0.5f, -1.0f, 0.0f, -2.0f};
  h.step = 1;
  AdamWReference(h, 4, p.data(), g1.data(), m.data(), v.data());
  ExpectClose(p[0], 0.875);
  ExpectClose(p[1], 0.875);
  EXPECT_EQ(p[2], 1.0f);
  ExpectClose(p[3], 1.125);
  EXPECT_EQ(m[0], 0.25f);
  EXPECT_EQ(v[0], 0.0625f);
  EXPECT_EQ(m[1], 0.5f);
  EXPECT_EQ(v[1], 0.25f);
  h.step = 2;
  AdamWReference(h, 4, p.data(), g2.data(), m.data(), v.data());
  ExpectClose(p[0], 0.75);
  ExpectClose(p[1], 0.875 + 0.125 / 3.0);
  EXPECT_EQ(p[2], 1.0f);
  ExpectClose(p[3], 1.25);
  EXPECT_EQ(m[0], 0.375f);
  EXPECT_EQ(v[0], 0.109375f);
  EXPECT_EQ(m[1], -0.25f);
  EXPECT_EQ(v[1], 0.4375f);
  EXPECT_EQ(m[2], 0.0f);
  EXPECT_EQ(v[2], 0.0f);
}

TEST(AdamWReferenceTest, DecoupledWeightDecayAndGradScale) {
  AdamWHyper h = DyadicHyper();
  h.weight_decay = 0.5f;  // decay factor 1 - 0.125 * 0.5 = 0.9375
  h.grad_scale = 0.5f;    // gradient 1 becomes 0.5: element 0 of the test above
  std::vector<float> p = {1.0f, 2.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g = {1.0f, 0.0f};
  h.step = 1;
  AdamWReference(h, 2, p.data(), g.data(), m.data(), v.data());
  ExpectClose(p[0], 0.9375 - 0.125);
  ExpectClose(p[1], 2.0 * 0.9375);  // decay applies without a gradient
  EXPECT_EQ(m[0], 0.25f);
  EXPECT_EQ(v[0], 0.0625f);
  h.step = 2;
  AdamWReference(h, 2, p.data(), g.data(), m.data(), v.data());
  ExpectClose(p[0], (0.9375 - 0.125) * 0.9375 - 0.125);
  ExpectClose(p[1], 2.0 * 0.9375 * 0.9375);
}

// The kernel tests' steps: 3, and 1000, where beta2 0.95's bias correction
// sqrt(1 - beta2^step) is exactly 1 in fp32 and the vector kernels skip their division
// by it (simd_lanes.h).
constexpr int64_t kEarlyStep = 3, kUnitBiasStep = 1000;

// Every kernel this CPU runs, on sizes around the vector widths, unaligned starts, at
// both steps.
TEST(AdamWKernelTest, EveryIsaIsBitIdenticalToReference) {
  ASSERT_EQ(adamw_internal::MakeCoeffs(Hyper(0.1f, 0.75f, kUnitBiasStep)).bias2_sqrt, 1.0f);
  ASSERT_LT(adamw_internal::MakeCoeffs(Hyper(0.1f, 0.75f, kEarlyStep)).bias2_sqrt, 1.0f);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!adamw_internal::IsaSupported(isa)) continue;
    for (int64_t step : {kEarlyStep, kUnitBiasStep})
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000}) {
      for (int offset : {0, 1, 3}) {
        SCOPED_TRACE(std::string(adamw_internal::IsaName(isa)) + " n=" + std::to_string(n) +
                     " offset=" + std::to_string(offset) + " step=" + std::to_string(step));
        Buffers ref = RandomBuffers(n + offset, 7 + n);
        Buffers fast = ref;
        const AdamWHyper h = Hyper(0.1f, 0.75f, step);
        AdamWReference(h, n, ref.p.data() + offset, ref.g.data() + offset, ref.m.data() + offset,
                       ref.v.data() + offset);
        adamw_internal::AdamWTile(isa, adamw_internal::MakeCoeffs(h), n, fast.p.data() + offset,
                                  fast.g.data() + offset, fast.m.data() + offset,
                                  fast.v.data() + offset);
        EXPECT_TRUE(BitEqual(ref.p, fast.p));
        EXPECT_TRUE(BitEqual(ref.m, fast.m));
        EXPECT_TRUE(BitEqual(ref.v, fast.v));
      }
    }
  }
}

// The one pass with fp32 moments (every kernel, fp32 or bf16 gradient) gives the bits of
// the gradient widened, AdamWTile, and the parameters narrowed into the copy, one after
// the other with the scalar kernels, non-finite gradients included.
TEST(AdamWKernelTest, OnePassWithFp32MomentsEqualsWidenUpdateNarrow) {
  for (int64_t step : {kEarlyStep, kUnitBiasStep})
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000}) {
    const adamw_internal::Coeffs c = adamw_internal::MakeCoeffs(Hyper(0.1f, 0.75f, step));
    Buffers base = RandomBuffers(n, 30 + n);
    std::vector<uint16_t> gp0(n);
    for (int64_t i = 0; i < n; ++i) gp0[i] = adamw_internal::Bf16Bits(base.g[i]);
    if (n >= 33) {
      base.g[5] = std::nanf("");
      gp0[5] = 0x7fc0;
      base.g[20] = -INFINITY;
      gp0[20] = 0xff80;
    }
    for (bool bf16_grad : {false, true}) {
      Buffers want = base;
      std::vector<uint16_t> want_gp = gp0;
      std::vector<float> g = want.g;
      if (bf16_grad) adamw_internal::WidenBf16(Isa::kScalar, want_gp.data(), n, g.data());
      adamw_internal::AdamWTile(Isa::kScalar, c, n, want.p.data(), g.data(), want.m.data(), want.v.data());
      if (bf16_grad) adamw_internal::NarrowBf16(Isa::kScalar, want.p.data(), n, want_gp.data());
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!adamw_internal::IsaSupported(isa)) continue;
        SCOPED_TRACE(std::string(adamw_internal::IsaName(isa)) + " n=" + std::to_string(n) +
                     " bf16_grad=" + std::to_string(bf16_grad) + " step=" + std::to_string(step));
        Buffers got = base;
        std::vector<uint16_t> got_gp = gp0;
        adamw_internal::AdamWOnePassTile(isa, c, n, got.p.data(), bf16_grad ? nullptr : got.g.data(),
                                         bf16_grad ? got_gp.data() : nullptr, got.m.data(), got.v.data());
        EXPECT_TRUE(BitEqual(want.p, got.p));
        EXPECT_TRUE(BitEqual(want.m, got.m));
        EXPECT_TRUE(BitEqual(want.v, got.v));
        EXPECT_EQ(want_gp, got_gp);  // untouched with an fp32 gradient
      }
    }
  }
}

// The engine's fp32-moment update from a bf16 gradient in the streamed copy: the
// reference on the widened gradient, the new parameters narrowed into the copy, for every
// thread count and sizes around the tiles.
TEST(AdamWUpdateTest, Bf16GradientEqualsTheReferenceOnItsWidenedValues) {
  for (int64_t n : {int64_t{5}, int64_t{16383}, int64_t{16385}, int64_t{50001}}) {
    Buffers ref = RandomBuffers(n, 70 + n);
    std::vector<uint16_t> gp(n), want_gp(n);
    for (int64_t i = 0; i < n; ++i) {
      gp[i] = adamw_internal::Bf16Bits(ref.g[i]);
      ref.g[i] = adamw_internal::WidenBf16(gp[i]);
    }
    const AdamWHyper h = Hyper(0.05f, 1.0f, 2);
    Buffers want = ref;
    AdamWReference(h, n, want.p.data(), want.g.data(), want.m.data(), want.v.data());
    for (int64_t i = 0; i < n; ++i) want_gp[i] = adamw_internal::Bf16Bits(want.p[i]);
    for (int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " threads=" + std::to_string(threads));
      Buffers got = ref;
      std::vector<uint16_t> got_gp = gp;
      AdamWUpdateBf16Grad(h, n, got.p.data(), got_gp.data(), got.m.data(), got.v.data(), threads);
      EXPECT_TRUE(BitEqual(want.p, got.p));
      EXPECT_TRUE(BitEqual(want.m, got.m));
      EXPECT_TRUE(BitEqual(want.v, got.v));
      EXPECT_EQ(want_gp, got_gp);
    }
  }
}

class AdamWUpdateTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(AdamWUpdateTest, MatchesReferenceWithAndWithoutDecay) {
  const int64_t n = GetParam();
  for (float wd : {0.0f, 0.1f}) {
    for (float scale : {1.0f, 0.37f}) {
      SCOPED_TRACE("wd=" + std::to_string(wd) + " grad_scale=" + std::to_string(scale));
      Buffers ref = RandomBuffers(n, 11);
      Buffers fast = ref;
      for (int64_t step = 1; step <= 3; ++step) {
        const AdamWHyper h = Hyper(wd, scale, step);
        AdamWReference(h, n, ref.p.data(), ref.g.data(), ref.m.data(), ref.v.data());
        AdamWUpdate(h, n, fast.p.data(), fast.g.data(), fast.m.data(), fast.v.data(), 2);
      }
      // The contract: within 1e-6 relative per element. This implementation: exact.
      EXPECT_EQ(FirstRelativeMismatch(ref.p, fast.p, 1e-6), -1);
      EXPECT_EQ(FirstRelativeMismatch(ref.m, fast.m, 1e-6), -1);
      EXPECT_EQ(FirstRelativeMismatch(ref.v, fast.v, 1e-6), -1);
      EXPECT_TRUE(BitEqual(ref.p, fast.p));
      EXPECT_TRUE(BitEqual(ref.m, fast.m));
      EXPECT_TRUE(BitEqual(ref.v, fast.v));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, AdamWUpdateTest,
                         ::testing::Values(1, 7, 16383, 16385, 50001, 1000003));

TEST(AdamWUpdateTest, BitIdenticalForEveryThreadCount) {
  const int64_t n = 300007;  // 19 tiles and a ragged end
  const AdamWHyper h = Hyper(0.05f, 0.8f, 2);
  Buffers one = RandomBuffers(n, 3);
  AdamWUpdate(h, n, one.p.data(), one.g.data(), one.m.data(), one.v.data(), 1);
  for (int threads : {0, 2, 3, 5, 8}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    Buffers b = RandomBuffers(n, 3);
    AdamWUpdate(h, n, b.p.data(), b.g.data(), b.m.data(), b.v.data(), threads);
    EXPECT_TRUE(BitEqual(one.p, b.p));
    EXPECT_TRUE(BitEqual(one.m, b.m));
    EXPECT_TRUE(BitEqual(one.v, b.v));
  }
}

TEST(AdamWUpdateTest, EmptyRangeTouchesNothing) {
  AdamWUpdate(Hyper(0.1f, 1.0f, 1), 0, nullptr, nullptr, nullptr, nullptr, 4);
  AdamWReference(Hyper(0.1f, 1.0f, 1), 0, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(SumSquares(nullptr, 0, 4), 0.0);
}

TEST(AdamWUpdateTest, NonFiniteGradientPoisonsOnlyItsElement) {
  Buffers b = RandomBuffers(40, 5);
  b.g[17] = std::nanf("");
  AdamWUpdate(Hyper(0.0f, 1.0f, 1), 40, b.p.data(), b.g.data(), b.m.data(), b.v.data(), 1);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(std::isnan(b.p[i]), i == 17) << i;
}

// Exact-ish sum: long double with Kahan compensation.
double PreciseSumSquares(const std::vector<float>& x) {
  long double sum = 0, c = 0;
  for (float f : x) {
    const long double y = static_cast<long double>(f) * f - c;
    const long double t = sum + y;
    c = (t - sum) - y;
    sum = t;
  }
  return static_cast<double>(sum);
}

TEST(SumSquaresTest, MatchesPreciseSumForEveryIsaAndSize) {
  for (int64_t n : {1, 5, 31, 33, 16385, 1000003}) {
    const Buffers b = RandomBuffers(n, 21);
    const double want = PreciseSumSquares(b.p);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!adamw_internal::IsaSupported(isa)) continue;
      SCOPED_TRACE(std::string(adamw_internal::IsaName(isa)) + " n=" + std::to_string(n));
      EXPECT_NEAR(adamw_internal::SumSquaresTile(isa, b.p.data(), n), want, 1e-12 * want);
    }
    EXPECT_NEAR(SumSquares(b.p.data(), n, 2), want, 1e-12 * want);
  }
}

TEST(SumSquaresTest, SameResultForEveryThreadCount) {
  const int64_t n = 1000003;
  const Buffers b = RandomBuffers(n, 9);
  const double one = SumSquares(b.p.data(), n, 1);
  for (int threads : {0, 2, 3, 7}) {
    const double t = SumSquares(b.p.data(), n, threads);
    EXPECT_NEAR(t, one, 1e-12 * one) << threads;  // the contract
    EXPECT_EQ(t, one) << threads;                 // this implementation: fixed tiles
  }
}

// bf16 values (a gradient landed in the streamed copy): the same sum as the widened fp32
// values give, bit for bit, for every size and thread count.
TEST(SumSquaresTest, Bf16EqualsItsWidenedValues) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{16385}, int64_t{1000003}}) {
    SCOPED_TRACE(n);
    const Buffers b = RandomBuffers(std::max<int64_t>(n, 1), 23);
    std::vector<uint16_t> half(static_cast<size_t>(n));
    std::vector<float> wide(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &b.p[i], 4);
      half[i] = static_cast<uint16_t>(bits >> 16);  // truncated: any bf16 will do
      bits = static_cast<uint32_t>(half[i]) << 16;
      std::memcpy(&wide[i], &bits, 4);
    }
    const double want = SumSquares(wide.data(), n, 1);
    for (int threads : {1, 2, 7}) EXPECT_EQ(SumSquaresBf16(half.data(), n, threads), want) << threads;
  }
  const uint16_t three_four[] = {0x4040, 0xC080};  // 3, -4
  EXPECT_EQ(SumSquaresBf16(three_four, 2, 1), 25.0);
}

TEST(SumSquaresTest, HandValues) {
  const std::vector<float> x = {3.0f, -4.0f, 0.5f};
  EXPECT_EQ(SumSquares(x.data(), 3, 1), 25.25);
  // float32 max squared overflows float but not the double accumulator.
  const std::vector<float> big(40, 3e38f);
  const double square = static_cast<double>(3e38f) * static_cast<double>(3e38f);
  EXPECT_NEAR(SumSquares(big.data(), 40, 1), 40 * square, 1e-12 * 40 * square);
}

}  // namespace
}  // namespace slidedp
