// Compact AdamW moments (optimizer.state_dtype): the 8-bit and bf16 round trips within
// their error bounds, the 8-bit rounding unbiased, every vector kernel bit for bit equal
// to the scalar one (odd sizes, partial blocks, zeros, non-finite values), the
// stored-moment update equal to its scalar reference for every thread count and split of
// a unit into calls, and to AdamWUpdate with fp32 moments; 8-bit moments that follow a
// steady gradient and its fall as fp32 ones do.
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

using Stored = ::slidedp::testing::StoredMoments;  // stored_moments.h

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
// The one-pass update of bf16 moments (every kernel, both gradient kinds) gives the bits
// of the decode, the update, the encode and the copy's narrowing done one after the
// other with the scalar kernels, also on edge values (NaN and infinite gradients and
// moments, zeros, subnormals) and lengths that end mid-vector.
TEST(MomentCodec, OnePassBf16UpdateEqualsDecodeUpdateEncode) {
  const AdamWHyper h = [] {
    AdamWHyper x;
    x.lr = 1e-2f;
    x.weight_decay = 0.1f;
    x.grad_scale = 0.5f;
    x.step = 3;
    return x;
  }();
  const adamw_internal::Coeffs c = adamw_internal::MakeCoeffs(h);
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000}) {
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
      std::vector<Isa> isas = VectorIsas();
      isas.push_back(Isa::kScalar);
      for (Isa isa : isas) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " n=" << n << " bf16_grad=" << bf16_grad);
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

// The one-pass update of 8-bit moments (every kernel, both gradient kinds) gives the
// bits of the decode, the update (span by span, each with its weight decay), the encode
// with the update's roots and the copy's narrowing done one after the other with the
// scalar kernels: spans that change mid-block and mid-vector, lengths that end mid-block,
// NaN and infinite gradients, a block of zero moments and one of subnormal moments.
TEST(MomentCodec, OnePassInt8UpdateEqualsDecodeUpdateEncode) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.grad_scale = 0.5f;
  h.step = 4;
  for (int64_t n : std::vector<int64_t>{1, 7, 17, 255, 256, 257, 700, 3 * kMomentBlock + 33}) {
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
      std::vector<Isa> isas = VectorIsas();
      isas.push_back(Isa::kScalar);
      for (Isa isa : isas) {
        SCOPED_TRACE(::testing::Message() << adamw_internal::IsaName(isa) << " n=" << n << " bf16_grad=" << bf16_grad);
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
// some CPUs, moment_codec.cc): a thread with flush-to-zero and denormals-are-zero set,
// as a library may leave it, gets the same codes, decoded values and update, subnormal
// codes included.
TEST(MomentCodec, Int8CodesIgnoreTheThreadsFlushToZeroMode) {
  const int64_t n = 2 * kMomentBlock + 40;
  std::vector<float> m = Spread(n, 31, false), v = Spread(n, 32, true);
  m[1] = 1.0f;  // this block's subnormal codes: m below 2^-14 of it (Spread reaches 2^-30)
  v[1] = 1.0f;
  auto run = [&](std::vector<float>* dm, std::vector<float>* dv, Stored* s, UpdateCase* u) {
    for (Isa isa : [] {
           std::vector<Isa> all = VectorIsas();
           all.push_back(Isa::kScalar);
           return all;
         }()) {
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
