// The 8-bit moments (optimizer.state_dtype int8, runtime/state/int8_moments.cc): round
// trips within the block's error bound, zero blocks and non-finite values, the one-pass
// update of every kernel equal to the decode, update and encode done one after the other,
// codes that never compute with fp32 subnormals, unbiased stochastic rounding, and moments
// that follow a steady gradient and its fall as fp32 ones do.
#include "runtime/state/int8_moments.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_kernels.h"
#include "tests/runtime/state/stored_moments.h"

namespace slidedp {
namespace {

using adamw_internal::Isa;
using testing::EveryIsa;
using testing::MakeCase;
using testing::Spread;
using testing::UpdateCase;
using Stored = testing::StoredMoments;

TEST(MomentCodec, Int8RoundTripWithinTheBlockBound) {
  const int64_t n = 4 * kMomentBlock + 77;
  const std::vector<float> m = Spread(n, 1, false), v = Spread(n, 2, true);
  Stored s(MomentDtype::kInt8, n);
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data(), {0, 1});
  std::vector<float> m2(n), v2(n);
  adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m2.data(), v2.data());
  for (int64_t i = 0; i < n; ++i) {
    const double sm = s.ms[i / kMomentBlock], sv = s.vs[i / kMomentBlock];
    // m: rounded stochastically to one of the two codes around it: relative error at
    // most 1/8 (a step of 3 mantissa bits) above absmax * 2^-14, absolute at most a
    // subnormal step (absmax * 2^-17) below.
    const double xm = std::fabs(m[i]);
    const double bound_m = std::max(xm / 8, sm * std::ldexp(1.0, -17)) * (1 + 1e-6);
    EXPECT_LE(std::fabs(m2[i] - m[i]), bound_m) << "m[" << i << "] = " << m[i];
    if (m2[i] != 0) {
      EXPECT_EQ(std::signbit(m2[i]), std::signbit(m[i])) << i;
    }
    // v: sqrt(v) within 1/16 relative (a step of 4 mantissa bits), or a subnormal step
    // of sqrt(absmax) * 2^-18 (and the clamp of a tiny nonzero v to the smallest code).
    const double r = std::sqrt(v[i]), r2 = std::sqrt(v2[i]);
    const double bound_r = std::max(r / 16, std::sqrt(sv) * std::ldexp(1.0, -18)) * (1 + 1e-6);
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
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data(), {0, 1});
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


// Every byte decodes to the scalar kernel's value with every kernel, under scales that
// are ordinary, subnormal, infinite, zero and NaN: the vector kernels widen the codes
// through fp16 bits (int8_moments.cc), which must give DecodeUnitFloat's values, the
// subnormal codes, those never written (-128, v above 1) and their signs included.
TEST(MomentCodec, EveryCodeDecodesAsTheScalarKernelDoes) {
  const float scales[] = {1.0f, 3.7e-5f, 1e-40f, std::numeric_limits<float>::infinity(), 0.0f,
                          std::numeric_limits<float>::quiet_NaN(), 6.5e4f};
  const int64_t blocks = sizeof(scales) / sizeof(scales[0]), n = blocks * kMomentBlock;
  Stored codes(MomentDtype::kInt8, n);
  for (int64_t i = 0; i < n; ++i) {
    codes.m[i] = static_cast<uint8_t>(i % 256);
    codes.v[i] = static_cast<uint8_t>((i * 7 + 3) % 256);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    codes.ms[b] = scales[b];
    codes.vs[b] = scales[(b + 2) % blocks];
  }
  std::vector<float> want_m(n), want_v(n);
  adamw_internal::DecodeMoments(Isa::kScalar, codes.view(), n, want_m.data(), want_v.data());
  EXPECT_EQ(want_m[8], std::ldexp(1.0f, -14));  // code 8: the smallest normal one
  EXPECT_EQ(want_m[7], 7.0f * std::ldexp(1.0f, -17));
  EXPECT_EQ(want_m[255], -want_m[1]);          // byte 0xFF: code -1
  for (Isa isa : EveryIsa()) {
    SCOPED_TRACE(adamw_internal::IsaName(isa));
    std::vector<float> m(n), v(n);
    adamw_internal::DecodeMoments(isa, codes.view(), n, m.data(), v.data());
    EXPECT_EQ(std::memcmp(m.data(), want_m.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(v.data(), want_v.data(), n * 4), 0);
  }
}

// The one-pass update of 8-bit moments (every kernel, both gradient kinds) gives the
// bits of the decode, the update (span by span, each with its weight decay), the encode
// with the update's roots and the copy's narrowing done one after the other with the
// scalar kernels: spans that change mid-block and mid-vector, lengths that end mid-block,
// NaN and infinite gradients, a block of zero moments and one of subnormal moments, and
// runs of whole blocks within one span, at step 4 and at step 1000 (the bias correction
// exactly 1: the vector kernels skip its division).
TEST(MomentCodec, OnePassInt8UpdateEqualsDecodeUpdateEncode) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.grad_scale = 0.5f;
  for (int64_t step : {4, 1000})
  for (int64_t n :
       std::vector<int64_t>{1, 7, 17, 255, 256, 257, 700, 3 * kMomentBlock + 33, 9 * kMomentBlock, 9 * kMomentBlock + 5}) {
    h.step = step;
    ASSERT_EQ(adamw_internal::MakeCoeffs(h).bias2_sqrt == 1.0f, step == 1000);
    const int64_t cut1 = n / 3, cut2 = std::min(n, n / 3 + 5);  // spans within the unit, some empty
    const std::vector<DecaySpan> spans = {{0, cut1, 0.1f}, {cut1, cut2, 0.0f}, {cut2, n, 0.05f}};
    std::vector<adamw_internal::Coeffs> coeffs;
    for (const DecaySpan& sp : spans) {
      AdamWHyper hs = h;
      hs.weight_decay = sp.weight_decay;
      coeffs.push_back(adamw_internal::MakeCoeffs(hs));
    }
    UpdateCase base = MakeCase(n, 70 + n);
    std::vector<float> m = Spread(n, 80 + n, false), v = Spread(n, 90 + n, true);
    if (n > 600) {
      for (int64_t i = 256; i < 512; ++i) m[i] = v[i] = 0.0f;  // a block never updated yet
      for (int64_t i = 512; i < std::min<int64_t>(n, 768); ++i) {
        m[i] = std::ldexp(1.0f + 0.01f * static_cast<float>(i % 13), -133) * (i % 2 == 1 ? -1.0f : 1.0f);
        v[i] = std::ldexp(1.0f, -140 - static_cast<int>(i % 5));
      }
      base.g[3] = std::numeric_limits<float>::quiet_NaN();
      base.gp[3] = 0x7fc0;
      base.g[9] = -std::numeric_limits<float>::infinity();
      base.gp[9] = 0xff80;
      base.g[300] = base.g[520] = 0.0f;
      base.gp[300] = base.gp[520] = 0;
    }
    const adamw_internal::RoundingSeed seed{5000 + n, h.step};
    Stored start(MomentDtype::kInt8, n);
    adamw_internal::EncodeMoments(Isa::kScalar, start.view(), n, m.data(), v.data(), {5000 + n, h.step - 1});
    for (bool bf16_grad : {false, true}) {
      UpdateCase want = base;
      Stored ws = start;
      {
        std::vector<float> g(n), dm(n), dv(n), roots(n);
        for (int64_t i = 0; i < n; ++i) g[i] = bf16_grad ? adamw_internal::WidenBf16(want.gp[i]) : want.g[i];
        adamw_internal::DecodeMoments(Isa::kScalar, ws.view(), n, dm.data(), dv.data());
        for (size_t k = 0; k < spans.size(); ++k) {
          const int64_t b = spans[k].begin, e = spans[k].end;
          adamw_internal::AdamWTile(Isa::kScalar, coeffs[k], e - b, want.p.data() + b, g.data() + b, dm.data() + b,
                                    dv.data() + b, roots.data() + b);
        }
        adamw_internal::EncodeMoments(Isa::kScalar, ws.view(), n, dm.data(), dv.data(), seed, roots.data());
        if (bf16_grad) adamw_internal::NarrowBf16(Isa::kScalar, want.p.data(), n, want.gp.data());
      }
      for (Isa isa : EveryIsa()) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " n=" << n << " bf16_grad=" << bf16_grad
                                          << " step=" << step);
        UpdateCase got = base;
        Stored gs = start;
        adamw_internal::AdamWInt8Tile(isa, spans, coeffs, 0, n, got.p.data(), bf16_grad ? nullptr : got.g.data(),
                                      got.gp.data(), gs.view(), seed);
        EXPECT_EQ(std::memcmp(got.p.data(), want.p.data(), n * 4), 0);
        EXPECT_TRUE(gs == ws);
        EXPECT_EQ(got.gp, want.gp);  // untouched with an fp32 gradient
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The 8-bit codes never compute with fp32 subnormals (which cost microcode assists on
// some CPUs, int8_moments.cc): a thread with flush-to-zero and denormals-are-zero set,
// as a library may leave it, gets the same codes, decoded values and update, subnormal
// codes included.
TEST(MomentCodec, Int8CodesIgnoreTheThreadsFlushToZeroMode) {
  const int64_t n = 2 * kMomentBlock + 40;
  std::vector<float> m = Spread(n, 31, false), v = Spread(n, 32, true);
  m[1] = 1.0f;  // this block's subnormal codes: m below 2^-14 of it (Spread reaches 2^-30)
  v[1] = 1.0f;
  auto run = [&](std::vector<float>* dm, std::vector<float>* dv, Stored* s, UpdateCase* u) {
    for (Isa isa : EveryIsa()) {
      adamw_internal::EncodeMoments(isa, s->view(), n, m.data(), v.data(), {0, 3});
      adamw_internal::DecodeMoments(isa, s->view(), n, dm->data(), dv->data());
    }
    AdamWHyper h;
    h.lr = 1e-3f;
    h.step = 4;
    AdamWUpdateStored(h, {{0, n, 0.0f}}, n, u->p.data(), u->g.data(), nullptr, s->view(), 0, 1);
  };
  std::vector<float> dm(n), dv(n), fm(n), fv(n);
  Stored s(MomentDtype::kInt8, n), f(MomentDtype::kInt8, n);
  UpdateCase u = MakeCase(n, 33), fu = u;
  run(&dm, &dv, &s, &u);
  int subnormal_codes = 0;
  for (int64_t i = 0; i < kMomentBlock; ++i) subnormal_codes += (dm[i] != 0.0f && std::fabs(dm[i]) < 0x1p-14f);
  EXPECT_GT(subnormal_codes, 20);  // the case this test is about
  const unsigned saved = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(saved | 0x8040u);  // flush-to-zero, denormals-are-zero
  run(&fm, &fv, &f, &fu);
  __builtin_ia32_ldmxcsr(saved);
  EXPECT_EQ(std::memcmp(dm.data(), fm.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(dv.data(), fv.data(), n * 4), 0);
  EXPECT_TRUE(s == f);
  EXPECT_EQ(std::memcmp(u.p.data(), fu.p.data(), n * 4), 0);
}
#endif

// The 8-bit rounding is unbiased: one value between two codes, encoded for many steps
// (other random bits each time), decodes on average to itself, m (both signs) and v,
// normal and subnormal codes; rounding to nearest would give the nearer code every time.
TEST(MomentCodec, Int8RoundingIsUnbiased) {
  const int64_t n = kMomentBlock;
  // Element 0 holds the block's scale (1.0); the others sit between codes.
  const std::vector<float> probes = {0.5f + 0.0625f * 0.3f, -(0.25f + 0.03125f * 0.8f), 0x1p-14f * 1.37f,
                                     0x1p-16f * 0.55f, 0.9f};
  std::vector<double> sum_m(probes.size(), 0.0), sum_v(probes.size(), 0.0);
  const int steps = 40000;
  for (int step = 1; step <= steps; ++step) {
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    m[0] = 1.0f;
    v[0] = 1.0f;
    for (size_t k = 0; k < probes.size(); ++k) {
      m[1 + k] = probes[k];
      v[1 + k] = probes[k] * probes[k];
    }
    Stored s(MomentDtype::kInt8, n);
    adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data(), {0, step});
    std::vector<float> m2(n), v2(n);
    adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m2.data(), v2.data());
    for (size_t k = 0; k < probes.size(); ++k) {
      sum_m[k] += m2[1 + k];
      sum_v[k] += std::sqrt(v2[1 + k]);  // the map is on sqrt(v): its mean is sqrt(v)
    }
  }
  for (size_t k = 0; k < probes.size(); ++k) {
    const double want = probes[k];
    // A step is at most 1/8 of the value (m) and 1/16 of sqrt(v), so one draw's standard
    // deviation is at most 1/16 of it: 40000 draws put the mean within 0.2% (7 sigma).
    EXPECT_NEAR(sum_m[k] / steps, want, 2e-3 * std::fabs(want)) << "m " << want;
    EXPECT_NEAR(sum_v[k] / steps, std::fabs(want), 2e-3 * std::fabs(want)) << "sqrt(v) " << std::fabs(want);
  }
}


// 8-bit moments follow a steady gradient and then its fall as fp32 moments do, in blocks
// whose scale another element holds (the first of each block, gradient 1 throughout):
// with rounding to nearest, m stopped short of its value (it moves by 0.1 (g - m) a step,
// less than half a code step as it nears g) and v did not fall where sqrt(v) lay in the
// lowest quarter of a binade (tests/bench/RESULTS.md). (Where every element of a block
// moves in proportion, the scale carries the change and either rounding follows.)
TEST(MomentCodec, Int8MomentsFollowASteadyGradientAndItsFall) {
  const int64_t n = 8 * kMomentBlock;
  std::vector<float> g0(n);
  {
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    // Magnitudes over two binades below the block's scale, both signs.
    for (int64_t i = 0; i < n; ++i) g0[i] = (rng() & 1 ? 1.0f : -1.0f) * std::ldexp(1.0f + unit(rng), -(2 + i % 3));
  }
  const int warmup = 50, steady = 100;
  auto run = [&](MomentDtype d, int fallen, std::vector<float>* m, std::vector<float>* v) {
    std::vector<float> p(n, 0.0f), g(n);
    Stored s(d, n);
    AdamWHyper h;
    h.lr = 1e-4f;
    for (int step = 1; step <= warmup + steady + fallen; ++step) {
      h.step = step;
      // The others' gradient starts after the warm-up, then falls to a quarter.
      const float f = step <= warmup ? 0.0f : step <= warmup + steady ? 1.0f : 0.25f;
      for (int64_t i = 0; i < n; ++i) g[i] = i % kMomentBlock == 0 ? 1.0f : f * g0[i];
      AdamWUpdateStored(h, {{0, n, 0.0f}}, n, p.data(), g.data(), nullptr, s.view(), 0, 1);
    }
    m->resize(n);
    v->resize(n);
    adamw_internal::DecodeMoments(Isa::kScalar, s.view(), n, m->data(), v->data());
  };
  for (const int fallen : {0, 60}) {
    std::vector<float> fm, fv, qm, qv;
    run(MomentDtype::kFp32, fallen, &fm, &fv);
    run(MomentDtype::kInt8, fallen, &qm, &qv);
    double ratio_m = 0.0, ratio_v = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i % kMomentBlock == 0) continue;
      ratio_m += qm[i] / fm[i];
      ratio_v += qv[i] / fv[i];
      ++count;
    }
    ratio_m /= count;
    ratio_v /= count;
    std::printf("after %d steady steps and %d at a quarter: int8 / fp32, mean over elements: m %.4f v %.4f\n",
                steady, fallen, ratio_m, ratio_v);
    // Each element's code is off by up to a step (1/8 of m, about 1/8 of v) at random:
    // the mean over 2040 elements is within 1.5% of fp32's for m. v is rounded through
    // sqrt(v), unbiased there, so v itself comes out high by the rounding's variance,
    // up to (1/16)^2 / 4 of v an encode, which 1 / (1 - beta2) = 20 steps accumulate:
    // within 3%. (Rounded to nearest: m 0.71 and v 0.55 of fp32's after the steady
    // steps, m 1.77 and v 4.1 after the fall.)
    EXPECT_NEAR(ratio_m, 1.0, 0.015) << fallen;
    EXPECT_NEAR(ratio_v, 1.0, 0.03) << fallen;
  }
}

}  // namespace
}  // namespace slidedp
