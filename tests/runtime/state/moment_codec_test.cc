// Compact AdamW moments (optimizer.state_dtype): names and bytes, the bf16 round trip,
// every vector kernel bit for bit equal to the scalar one (odd sizes, partial blocks,
// zeros, non-finite values), the bf16 one-pass update equal to its parts, the
// stored-moment update equal to its scalar reference for every thread count and split of
// a unit into calls, and to AdamWUpdate with fp32 moments; compact moments that track
// fp32 ones. The 8-bit moments' own tests are int8_moments_test.cc's.
#include "runtime/state/moment_codec.h"

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
using testing::ToBf16;
using testing::UpdateCase;
using testing::VectorIsas;
using Stored = testing::StoredMoments;

TEST(MomentCodec, NamesAndBytes) {
  for (MomentDtype d : {MomentDtype::kFp32, MomentDtype::kBf16, MomentDtype::kInt8}) {
    EXPECT_EQ(EnumFromName<MomentDtype>(NameOf(d)), d);
  }
  EXPECT_FALSE(EnumFromName<MomentDtype>("fp8").has_value());
  EXPECT_EQ(MomentBytes(MomentDtype::kFp32, 1000), 8000);
  EXPECT_EQ(MomentBytes(MomentDtype::kBf16, 1000), 4000);
  EXPECT_EQ(MomentBytes(MomentDtype::kInt8, 1000), 2000 + 8 * 4);  // 4 blocks, 2 scales each
}

TEST(MomentCodec, Bf16RoundTripIsNearestEven) {
  const int64_t n = 1000;
  const std::vector<float> m = Spread(n, 3, false), v = Spread(n, 4, true);
  Stored s(MomentDtype::kBf16, n);
  adamw_internal::EncodeMoments(Isa::kScalar, s.view(), n, m.data(), v.data(), {0, 1});
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
      if (n >= 1000) {
        // A block of subnormal moments (m decaying to 0 where gradients stopped): m's
        // scale's reciprocal is infinite, its codes leave a byte's range before the cast.
        for (int64_t i = 768; i < 1000; ++i) {
          m[i] = std::ldexp(1.0f + 0.001f * static_cast<float>(i), -135 - static_cast<int>(i % 7));
          if (i % 2 == 1) m[i] = -m[i];
          v[i] = std::ldexp(1.0f, -140 - static_cast<int>(i % 5));
        }
      }
      Stored ref(d, n);
      const adamw_internal::RoundingSeed seed{1000 + 3 * n, 7};
      adamw_internal::EncodeMoments(Isa::kScalar, ref.view(), n, m.data(), v.data(), seed);
      std::vector<float> rm(n), rv(n);
      adamw_internal::DecodeMoments(Isa::kScalar, ref.view(), n, rm.data(), rv.data());
      for (Isa isa : isas) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " " << NameOf(d)
                                        << " n=" << n);
        Stored got(d, n);
        adamw_internal::EncodeMoments(isa, got.view(), n, m.data(), v.data(), seed);
        EXPECT_TRUE(got == ref);
        std::vector<float> gm(n), gv(n);
        adamw_internal::DecodeMoments(isa, ref.view(), n, gm.data(), gv.data());
        EXPECT_EQ(std::memcmp(gm.data(), rm.data(), n * 4), 0);
        EXPECT_EQ(std::memcmp(gv.data(), rv.data(), n * 4), 0);
      }
    }
  }
}

// The bf16 narrowing of every kernel (moments, the streamed copy) gives the scalar bits
// on the edges: ties to even both ways, values that round up to infinity, infinities,
// NaNs of either sign and payload, zeros and subnormals, in a length that ends
// mid-vector.
TEST(MomentCodec, Bf16NarrowingOfEveryKernelEqualsTheScalarOnEdgeValues) {
  const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7fffffu,
                            0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                            0x00000000u, 0x80000000u, 0x00008000u, 0x00018000u, 0x807fffffu};
  std::vector<float> in;
  for (int rep = 0; rep < 3; ++rep) {
    for (uint32_t u : edges) {
      float x;
      std::memcpy(&x, &u, 4);
      in.push_back(x);
    }
  }
  const int64_t n = static_cast<int64_t>(in.size());  // 51: 3 x 16 and 3 more
  std::vector<uint16_t> want(n);
  adamw_internal::NarrowBf16(Isa::kScalar, in.data(), n, want.data());
  EXPECT_EQ(want[0], 0x3f80);   // tie, even below
  EXPECT_EQ(want[1], 0x3f82);   // tie, odd below: up
  EXPECT_EQ(want[4], 0x7f80);   // the largest float rounds to infinity
  EXPECT_EQ(want[10], 0x7fc0);  // NaNs become the quiet NaN
  for (Isa isa : VectorIsas()) {
    SCOPED_TRACE(adamw_internal::IsaName(isa));
    std::vector<uint16_t> got(n, 0xdead);
    adamw_internal::NarrowBf16(isa, in.data(), n, got.data());
    EXPECT_EQ(got, want);
  }
}

// The one-pass update of bf16 moments (every kernel, both gradient kinds) gives the bits
// of the decode, the update, the encode and the copy's narrowing done one after the
// other with the scalar kernels, also on edge values (NaN and infinite gradients and
// moments, zeros, subnormals) and lengths that end mid-vector, at step 3 and at step 1000
// (the bias correction exactly 1: the vector kernels skip its division).
TEST(MomentCodec, OnePassBf16UpdateEqualsDecodeUpdateEncode) {
  for (int64_t step : {3, 1000})
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000}) {
    AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;
    h.grad_scale = 0.5f;
    h.step = step;
    const adamw_internal::Coeffs c = adamw_internal::MakeCoeffs(h);
    ASSERT_EQ(c.bias2_sqrt == 1.0f, step == 1000);
    UpdateCase base = MakeCase(n, 40 + n);
    std::vector<uint16_t> m0(n), v0(n);
    const std::vector<float> ms = Spread(n, 50 + n, false), vs = Spread(n, 60 + n, true);
    for (int64_t i = 0; i < n; ++i) {
      m0[i] = ToBf16(ms[i]);
      v0[i] = ToBf16(vs[i]);
    }
    if (n >= 33) {
      base.g[3] = std::numeric_limits<float>::quiet_NaN();
      base.gp[3] = 0x7fc0;
      base.g[9] = -std::numeric_limits<float>::infinity();
      base.gp[9] = 0xff80;
      m0[20] = 0x7f80;  // +inf
      v0[21] = 0xffc1;  // a NaN with a payload
      m0[22] = 0x0001;  // subnormals
      v0[22] = 0x0003;
      m0[23] = 0x8000;  // -0
      base.p[24] = 0.0f;
    }
    for (bool bf16_grad : {false, true}) {
      // The reference: the steps StoredTile takes, with the scalar kernels.
      UpdateCase want = base;
      std::vector<uint16_t> wm = m0, wv = v0;
      std::vector<float> g(n), m(n), v(n);
      for (int64_t i = 0; i < n; ++i) g[i] = bf16_grad ? adamw_internal::WidenBf16(want.gp[i]) : want.g[i];
      adamw_internal::WidenBf16(Isa::kScalar, wm.data(), n, m.data());
      adamw_internal::WidenBf16(Isa::kScalar, wv.data(), n, v.data());
      adamw_internal::AdamWTile(Isa::kScalar, c, n, want.p.data(), g.data(), m.data(), v.data());
      adamw_internal::NarrowBf16(Isa::kScalar, m.data(), n, wm.data());
      adamw_internal::NarrowBf16(Isa::kScalar, v.data(), n, wv.data());
      if (bf16_grad) adamw_internal::NarrowBf16(Isa::kScalar, want.p.data(), n, want.gp.data());
      for (Isa isa : EveryIsa()) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " n=" << n << " bf16_grad=" << bf16_grad
                                          << " step=" << step);
        UpdateCase got = base;
        std::vector<uint16_t> gm = m0, gv = v0;
        adamw_internal::AdamWOnePassTile(isa, c, n, got.p.data(), bf16_grad ? nullptr : got.g.data(),
                                             bf16_grad ? got.gp.data() : nullptr, gm.data(), gv.data());
        EXPECT_EQ(std::memcmp(got.p.data(), want.p.data(), n * 4), 0);
        EXPECT_EQ(gm, wm);
        EXPECT_EQ(gv, wv);
        EXPECT_EQ(got.gp, want.gp);  // untouched with an fp32 gradient
      }
    }
  }
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
                             ref.gp.data(), ref_state.view(), /*first_index=*/0);
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
                            got.gp.data(), state.view(), /*first_index=*/0, threads);
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

// A unit's update split into calls at quantization blocks (as the engine's chunks and
// hosts' shards split it), each with its first element's index, gives one call's bits.
TEST(MomentCodec, StoredUpdateSplitIntoCallsEqualsOneCall) {
  const int64_t n = 5 * kMomentBlock + 40, cut = 2 * kMomentBlock;
  const UpdateCase start = MakeCase(n, 11);
  UpdateCase whole = start, parts = start;
  Stored sw(MomentDtype::kInt8, n), sp(MomentDtype::kInt8, n);
  AdamWHyper h;
  h.lr = 1e-2f;
  for (int step = 1; step <= 3; ++step) {
    h.step = step;
    const UpdateCase in = MakeCase(n, 200 + step);
    AdamWUpdateStored(h, {{0, n, 0.0f}}, n, whole.p.data(), in.g.data(), nullptr, sw.view(), 0, 2);
    AdamWUpdateStored(h, {{0, cut, 0.0f}}, cut, parts.p.data(), in.g.data(), nullptr, sp.view(), 0, 1);
    AdamWUpdateStored(h, {{0, n - cut, 0.0f}}, n - cut, parts.p.data() + cut, in.g.data() + cut, nullptr,
                      OffsetMoments(sp.view(), cut), cut, 1);
  }
  EXPECT_EQ(std::memcmp(whole.p.data(), parts.p.data(), n * 4), 0);
  EXPECT_TRUE(sw == sp);
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
    AdamWUpdateStored(h, {{0, n, 0.1f}}, n, b.p.data(), b.g.data(), nullptr, s.view(), 0, 2);
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
      AdamWUpdateStored(h, {{0, n, 0.0f}}, n, p.data(), g.data(), nullptr, s.view(), 0, 1);
    }
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += (p[i] - target[i]) * (p[i] - target[i]);
    return std::sqrt(err / n);
  };
  const double fp32 = run(MomentDtype::kFp32), bf16 = run(MomentDtype::kBf16), int8 = run(MomentDtype::kInt8);
  EXPECT_LT(fp32, 0.3);  // it learns: from 1.0 towards the target
  std::printf("rms distance to the target after 200 steps: fp32 %.5f bf16 %.5f int8 %.5f\n", fp32, bf16, int8);
  EXPECT_NEAR(bf16, fp32, 0.02 * fp32);
  // 8-bit m keeps 3 mantissa bits. Rounded to nearest, the momentum stood still under
  // small changes and left the parameters 11% further from the target than fp32's;
  // rounded stochastically they end within 1% of fp32's.
  EXPECT_NEAR(int8, fp32, 0.02 * fp32);
}

}  // namespace
}  // namespace slidedp