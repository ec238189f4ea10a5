// The GPU AdamW kernels of runtime/state/adamw_device.cu run on the CPU
// (tests/runtime/model/cuda_emulation.h: each CUDA thread a std::thread, barriers and
// warp shuffles as on the GPU): with bf16 and 8-bit moments each gives the bits of the
// CPU update of a streamed unit (AdamWUpdateStored), and with fp32 moments those of
// AdamWUpdate, over three steps of a unit whose weight decay changes mid-block, with a
// partial last block, a block of zero moments never updated, NaN and infinite
// gradients, and a grid smaller than the unit's blocks. That the GPU gives these bits is
// for the CUDA test on the H200 (adamw_device_cuda_test.cc).
#include "tests/runtime/model/cuda_emulation.h"
#define SLIDEDP_CUDA_EMULATION 1
#include "runtime/state/adamw_device.cu"
#undef SLIDEDP_CUDA_EMULATION

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_kernels.h"
#include "tests/runtime/state/stored_moments.h"

namespace slidedp {
namespace {

namespace emu = ::slidedp::device_adamw_emulated;

// One unit's state as the host stores it: the master and the stored moments.
struct UnitState : ::slidedp::testing::StoredMoments {
  std::vector<float> p;
  UnitState(MomentDtype d, int64_t n) : StoredMoments(d, n), p(n) {}
};

constexpr int64_t kN = 3 * kMomentBlock + 77;
const std::vector<DecaySpan> kSpans = {{0, 300, 0.1f}, {300, 301, 0.0f}, {301, kN, 0.05f}};

AdamWHyper Hyper(int64_t step) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.grad_scale = 0.5f;
  h.step = step;
  return h;
}

// The gradient of a step: a block (the second) whose gradient stays 0, a NaN and an
// infinity elsewhere.
std::vector<float> Gradient(int64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(100 + step));
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> g(kN);
  for (int64_t i = 0; i < kN; ++i) g[i] = (i / kMomentBlock == 1) ? 0.0f : normal(rng);
  if (step == 2) {
    g[5] = std::numeric_limits<float>::quiet_NaN();
    g[600] = -std::numeric_limits<float>::infinity();
  }
  return g;
}

UnitState Start(MomentDtype d) {
  UnitState s(d, kN);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> m(kN), v(kN);
  for (int64_t i = 0; i < kN; ++i) {
    s.p[i] = normal(rng);
    const bool fresh = i / kMomentBlock == 1;  // never updated: zero moments
    m[i] = fresh ? 0.0f : 1e-3f * normal(rng);
    v[i] = fresh ? 0.0f : 1e-6f * std::fabs(normal(rng));
  }
  adamw_internal::EncodeMoments(adamw_internal::Isa::kScalar, s.view(), kN, m.data(), v.data(), {0, 0});
  return s;
}

uint16_t EmulatedBf16(float p) { return __bfloat16_as_ushort(__float2bfloat16_rn(p)); }

TEST(AdamWDeviceEmulated, StoredMomentsEqualTheCpuUpdateBitForBit) {
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    for (bool out_bf16 : {true, false}) {
      SCOPED_TRACE(::testing::Message() << NameOf(d) << " out_bf16=" << out_bf16);
      UnitState cpu = Start(d), gpu = Start(d);
      std::vector<uint16_t> out16(kN);
      std::vector<float> out32(kN);
      for (int64_t step = 1; step <= 3; ++step) {
        const AdamWHyper h = Hyper(step);
        std::vector<float> g = Gradient(step);
        AdamWUpdateStored(h, kSpans, kN, cpu.p.data(), g.data(), nullptr, cpu.view(), /*first_index=*/0, 1);

        AdamWStoredDeviceArgs a{};
        const MomentView mv = gpu.view();
        a.param = gpu.p.data();
        a.grad = g.data();
        a.dtype = d;
        a.m = mv.m;
        a.v = mv.v;
        a.m_scale = mv.m_scale;
        a.v_scale = mv.v_scale;
        a.out = out_bf16 ? static_cast<void*>(out16.data()) : static_cast<void*>(out32.data());
        a.out_bf16 = out_bf16;
        a.n = kN;
        a.step = step;
        ASSERT_TRUE(SetDecaySpans(h, kSpans, &a));
        // Two thread blocks for the unit's four quantization blocks: the grid-stride loops.
        const emu::StoredLaunch launch{DeviceCoeffs(h), a};
        if (d == MomentDtype::kInt8) {
          cuda_emulation::Launch(emu::AdamWInt8MomentsKernel, 2, emu::kBlockThreads, 0, launch);
        } else {
          cuda_emulation::Launch(emu::AdamWBf16MomentsKernel, 2, emu::kBlockThreads, 0, launch);
        }
        SCOPED_TRACE(::testing::Message() << "step " << step);
        ASSERT_EQ(std::memcmp(gpu.p.data(), cpu.p.data(), kN * 4), 0);
        ASSERT_EQ(gpu.m, cpu.m);
        ASSERT_EQ(gpu.v, cpu.v);
        ASSERT_EQ(std::memcmp(gpu.ms.data(), cpu.ms.data(), gpu.ms.size() * 4), 0);
        ASSERT_EQ(std::memcmp(gpu.vs.data(), cpu.vs.data(), gpu.vs.size() * 4), 0);
        for (int64_t i = 0; i < kN; ++i) {
          if (out_bf16) {
            ASSERT_EQ(out16[i], EmulatedBf16(cpu.p[i])) << i;
          } else {
            ASSERT_EQ(std::memcmp(&out32[i], &cpu.p[i], 4), 0) << i;
          }
        }
      }
      if (d == MomentDtype::kInt8) {
        EXPECT_EQ(cpu.ms[1], 0.0f) << "the block never updated keeps a zero scale";
        EXPECT_NE(cpu.ms[0], 0.0f);
      }
    }
  }
}

// A staged unit (staged_updates.h) is updated chunk by chunk, each chunk's buffers from
// its element 0 with `first` its index in the unit, and no parameters out: the bits of
// the CPU's update of the whole unit (the 8-bit codes' rounding follows the unit's
// indices, the scales the unit's blocks).
TEST(AdamWDeviceEmulated, ChunksOfAUnitEqualTheWholeUnitsCpuUpdate) {
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    SCOPED_TRACE(NameOf(d));
    UnitState cpu = Start(d), gpu = Start(d);
    const int64_t width = MomentWidth(d);
    for (int64_t step = 1; step <= 3; ++step) {
      const AdamWHyper h = Hyper(step);
      std::vector<float> g = Gradient(step);
      AdamWUpdateStored(h, kSpans, kN, cpu.p.data(), g.data(), nullptr, cpu.view(), /*first_index=*/0, 1);
      // Chunks [0, 512) and [512, kN): the spans cut at the chunk's edges.
      const int64_t cut = 2 * kMomentBlock;
      const std::vector<DecaySpan> spans[2] = {{{0, 300, 0.1f}, {300, 301, 0.0f}, {301, cut, 0.05f}},
                                               {{0, kN - cut, 0.05f}}};
      const int64_t begin[2] = {0, cut}, n[2] = {cut, kN - cut};
      for (int c = 0; c < 2; ++c) {
        AdamWStoredDeviceArgs a{};
        const MomentView mv = gpu.view();
        a.param = gpu.p.data() + begin[c];
        a.grad = g.data() + begin[c];
        a.dtype = d;
        a.m = static_cast<uint8_t*>(mv.m) + begin[c] * width;
        a.v = static_cast<uint8_t*>(mv.v) + begin[c] * width;
        if (d == MomentDtype::kInt8) {
          a.m_scale = mv.m_scale + begin[c] / kMomentBlock;
          a.v_scale = mv.v_scale + begin[c] / kMomentBlock;
        }
        a.out = nullptr;
        a.n = n[c];
        a.step = step;
        a.first = begin[c];
        ASSERT_TRUE(SetDecaySpans(h, spans[c], &a));
        const emu::StoredLaunch launch{DeviceCoeffs(h), a};
        if (d == MomentDtype::kInt8) {
          cuda_emulation::Launch(emu::AdamWInt8MomentsKernel, 1, emu::kBlockThreads, 0, launch);
        } else {
          cuda_emulation::Launch(emu::AdamWBf16MomentsKernel, 1, emu::kBlockThreads, 0, launch);
        }
      }
      SCOPED_TRACE(::testing::Message() << "step " << step);
      ASSERT_EQ(std::memcmp(gpu.p.data(), cpu.p.data(), kN * 4), 0);
      ASSERT_TRUE(gpu == cpu);
    }
  }
}

// fp32 moments, a launch per span (as resident_state_cuda.cc issues them), against the
// CPU update of resident units on the CPU device (AdamWUpdate per span).
TEST(AdamWDeviceEmulated, Fp32MomentsEqualTheCpuUpdateBitForBit) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(kN), m(kN, 0.0f), v(kN, 0.0f);
  for (float& x : p) x = normal(rng);
  std::vector<float> gp = p, gm = m, gv = v, out(kN);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = Gradient(step);
    for (const DecaySpan& s : kSpans) {
      AdamWHyper h = Hyper(step);
      h.weight_decay = s.weight_decay;
      const int64_t b = s.begin, n = s.end - s.begin;
      AdamWUpdate(h, n, p.data() + b, g.data() + b, m.data() + b, v.data() + b, 1);
      const AdamWDeviceArgs a{gp.data() + b, g.data() + b, gm.data() + b, gv.data() + b, out.data() + b, false, n};
      cuda_emulation::Launch(emu::AdamWKernel, 1, 64, 0, emu::Fp32Launch{DeviceCoeffs(h), a});
    }
    ASSERT_EQ(std::memcmp(gp.data(), p.data(), kN * 4), 0) << step;
    ASSERT_EQ(std::memcmp(gm.data(), m.data(), kN * 4), 0) << step;
    ASSERT_EQ(std::memcmp(gv.data(), v.data(), kN * 4), 0) << step;
    ASSERT_EQ(std::memcmp(out.data(), p.data(), kN * 4), 0) << step;
  }
}

}  // namespace
}  // namespace slidedp
