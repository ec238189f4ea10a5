// The CUDA kernels of runtime/model/fused_kernels_device.cuh run on the CPU (cuda_emulation.h):
// each vector form (16-byte accesses) against its scalar form on the same inputs, over
// the launchers' own forms (fused_kernels.cu's *Form: kernel, grid, block, shared
// memory), with strided and odd operands, and the choice of form (alignment, sizes). Swiglu and RoPE: bit for bit (the same arithmetic per
// element). RMSNorm: the sum of squares is added in another order, so rstd agrees within
// 1e-6 relative and outputs within one bf16 unit; its residual sum bit for bit. The
// scalar forms also equal the C++ reference (fused_kernels_cpu.cc) where the arithmetic
// is the same. That the kernels give these results on the GPU is for the CUDA tests on
// the H200 (fused_ops_test.cc); this proves the vector forms' indexing without one.
#include "tests/runtime/model/cuda_emulation.h"
#define SLIDEDP_CUDA_EMULATION 1
#include "runtime/model/fused_kernels.cu"
#undef SLIDEDP_CUDA_EMULATION

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/model/fused_kernels.h"

namespace slidedp::fused {
namespace {

namespace k = ::slidedp::fused::cuda;
using Bits = std::vector<uint16_t>;

uint16_t Bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
float Float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// bf16 values in an allocation that starts 16-byte aligned (std::vector of uint4 storage).
struct Buffer {
  explicit Buffer(size_t n) : words((n + 7) / 8 + 1), size(n) {}
  uint16_t* data() { return reinterpret_cast<uint16_t*>(words.data()); }
  std::vector<uint4> words;
  size_t size;
};

void Fill(uint16_t* p, size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  for (size_t i = 0; i < n; ++i) p[i] = Bf16(d(rng));
}

void ExpectBitEqual(const uint16_t* got, const uint16_t* want, size_t n, const std::string& what) {
  size_t differ = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      ++differ;
      if (first == n) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << n << " differ, first at " << first << " ("
                        << Float(got[first < n ? first : 0]) << " vs " << Float(want[first < n ? first : 0]) << ")";
}

// Within one bf16 unit of the value (2^-8 relative), or 1e-6 of the largest value (a
// difference of fp32 sum order where terms cancel).
void ExpectWithinOneUnit(const uint16_t* got, const uint16_t* want, size_t n, const std::string& what) {
  float largest = 0.0f;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(Float(want[i])));
  size_t worse = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    const float g = Float(got[i]), w = Float(want[i]);
    if (std::abs(g - w) > std::abs(w) / 256.0f + 1e-6f * largest) {
      ++worse;
      if (first == n) first = i;
    }
  }
  EXPECT_EQ(worse, 0u) << what << ": " << worse << " of " << n << ", first at " << first;
}

// --- SwiGLU -----------------------------------------------------------------------------

struct SwigluCase {
  int64_t rows, cols, ld;
};

// An op's form as its launcher launches it (kernel, grid, block, shared memory).
template <typename Args>
void RunForm(const k::Form<Args>& f, const Args& a) {
  cuda_emulation::Launch(f.kernel.fn, f.grid, f.block, f.shared, a);
}

// The op's vector form, which the operands must allow.
template <typename Args>
k::Form<Args> VectorForm(k::Form<Args> (*form)(const Args&, bool), const Args& a, void (*vector_kernel)(Args)) {
  const k::Form<Args> f = form(a, true);
  EXPECT_EQ(f.kernel.fn, vector_kernel) << "the operands allow the vector form";
  return f;
}

TEST(FusedKernelsEmulated, SwigluVectorFormEqualsScalarFormBitForBit) {
  std::mt19937 rng(1);
  // Flat (ld == cols, as FusedSwiglu: one row of all elements), and the halves of one
  // [rows, 2F] tensor (as the MLP's gate | up), F a multiple of 8 and wider than a block.
  for (const SwigluCase& c : {SwigluCase{1, 4000, 4000}, SwigluCase{3, 2056, 2056}, SwigluCase{5, 2112, 4224},
                              SwigluCase{4, 8, 16}}) {
    const std::string what = "rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " ld " +
                             std::to_string(c.ld);
    const size_t in_n = static_cast<size_t>(c.rows * c.ld), out_n = static_cast<size_t>(c.rows * c.cols);
    const bool flat = c.ld == c.cols;  // flat: gate and up are two [rows, cols] operands, one after the other
    const size_t both_n = flat ? 2 * in_n : in_n;
    Buffer gu(both_n), dy(out_n), y_vec(out_n), y_scalar(out_n), y_ref(out_n);
    Fill(gu.data(), gu.size, rng, 3.0f);
    Fill(dy.data(), out_n, rng, 1.0f);
    const uint16_t* gate = gu.data();
    const uint16_t* up = gu.data() + (flat ? in_n : c.cols);
    SwigluArgs a{gate, up, y_vec.data(), c.rows, c.cols, c.ld};
    RunForm(VectorForm(k::SwigluForm, a, k::SwigluVecKernel), a);
    a.out = y_scalar.data();
    RunForm(k::SwigluForm(a, false), a);
    a.out = y_ref.data();
    cpu::Swiglu(a);
    ExpectBitEqual(y_vec.data(), y_scalar.data(), out_n, what + " y, vector vs scalar");
    ExpectBitEqual(y_scalar.data(), y_ref.data(), out_n, what + " y, scalar vs C++ reference");

    const size_t grad_n = both_n;
    Buffer dgu_vec(grad_n), dgu_scalar(grad_n);
    const int64_t up_off = up - gate;
    SwigluGradArgs g{dy.data(), gate, up, dgu_vec.data(), dgu_vec.data() + up_off, c.rows, c.cols, c.ld};
    RunForm(VectorForm(k::SwigluBackwardForm, g, k::SwigluBackwardVecKernel), g);
    g.dgate = dgu_scalar.data();
    g.dup = dgu_scalar.data() + up_off;
    RunForm(k::SwigluBackwardForm(g, false), g);
    ExpectBitEqual(dgu_vec.data(), dgu_scalar.data(), grad_n, what + " dgate | dup, vector vs scalar");
  }
}

TEST(FusedKernelsEmulated, SwigluTakesTheScalarFormWhereVectorsDoNotFit) {
  Buffer b(64);
  const uint16_t* p = b.data();
  EXPECT_TRUE(k::VecSwiglu(2, 16, 32, {p, p + 16, b.data()}));
  EXPECT_FALSE(k::VecSwiglu(2, 12, 24, {p, p + 12, b.data()}));  // rows not a whole number of vectors
  EXPECT_FALSE(k::VecSwiglu(1, 15, 15, {p, p, b.data()}));        // flat, 15 elements
  EXPECT_FALSE(k::VecSwiglu(2, 16, 32, {p + 1, p + 17, b.data()}));  // not 16-byte aligned
  const SwigluArgs odd{p, p + 12, b.data(), 2, 12, 24};
  EXPECT_EQ(k::SwigluForm(odd, true).kernel.fn, k::SwigluKernel);
  EXPECT_TRUE(k::VecSwiglu(3, 8, 8, {p, p + 24, b.data()}));      // flat, 24 elements
}

// --- RoPE -------------------------------------------------------------------------------

TEST(FusedKernelsEmulated, RopeVectorFormEqualsScalarFormBitForBit) {
  std::mt19937 rng(2);
  const int64_t B = 2, T = 5, H = 3, D = 32, Hkv = 1;
  // q as the attention reads it: a strided view of one [B, T, (H + 2 Hkv) * D] projection.
  const int64_t width = (H + 2 * Hkv) * D;
  Buffer qkv(static_cast<size_t>(B * T * width)), dy(static_cast<size_t>(B * H * T * D));
  Fill(qkv.data(), qkv.size, rng, 2.0f);
  Fill(dy.data(), dy.size, rng, 1.0f);
  // Tables: shared [T', D] rows, or per token [B * T, D] (table_row_b = T).
  std::uniform_real_distribution<float> angle(-1.0f, 1.0f);
  std::vector<float4> cos_store(static_cast<size_t>(B * T * D / 4 + 1)), sin_store(cos_store.size());
  float* cos = reinterpret_cast<float*>(cos_store.data());
  float* sin = reinterpret_cast<float*>(sin_store.data());
  for (int64_t i = 0; i < B * T * D; ++i) {
    cos[i] = std::cos(3.0f * angle(rng));
    sin[i] = std::sin(3.0f * angle(rng));
  }
  for (const int64_t table_row_b : {int64_t{0}, T}) {
    for (const bool backward : {false, true}) {
      const std::string what = std::string(table_row_b == 0 ? "shared" : "per-token") +
                               (backward ? " backward" : " forward");
      const size_t out_n = static_cast<size_t>(B * H * T * D);
      Buffer out_vec(out_n), out_scalar(out_n), out_ref(out_n);
      RopeArgs a{};
      if (!backward) {  // in: q of the projection; out: [B, H, T, D] contiguous
        a = RopeArgs{qkv.data(), out_vec.data(), cos, sin, B, H, T, D, T * width, D, width, H * T * D, T * D, D,
                     table_row_b, false};
      } else {  // in: dy [B, H, T, D]; out: dx [B, H, T, D]
        a = RopeArgs{dy.data(), out_vec.data(), cos, sin, B, H, T, D, H * T * D, T * D, D, H * T * D, T * D, D,
                     table_row_b, true};
      }
      RunForm(VectorForm(k::RopeForm, a, k::RopeVecKernel), a);
      a.out = out_scalar.data();
      RunForm(k::RopeForm(a, false), a);
      a.out = out_ref.data();
      cpu::Rope(a);
      ExpectBitEqual(out_vec.data(), out_scalar.data(), out_n, what + ", vector vs scalar");
      ExpectBitEqual(out_scalar.data(), out_ref.data(), out_n, what + ", scalar vs C++ reference");
    }
  }
  // A grid smaller than the work (the launchers cap it): the grid-stride loop covers it.
  Buffer small_grid(static_cast<size_t>(B * H * T * D)), full(small_grid.size);
  RopeArgs a{dy.data(), small_grid.data(), cos, sin, B, H, T, D, H * T * D, T * D, D, H * T * D, T * D, D, 0,
             false};
  cuda_emulation::Launch(k::RopeVecKernel, 1, 32, 0, a);
  a.out = full.data();
  RunForm(k::RopeForm(a, false), a);
  ExpectBitEqual(small_grid.data(), full.data(), full.size, "one block of 32 threads");
}

TEST(FusedKernelsEmulated, RopeTakesTheScalarFormWhereVectorsDoNotFit) {
  Buffer b(4096);
  std::vector<float4> t(256);
  float* f = reinterpret_cast<float*>(t.data());
  const RopeArgs ok{b.data(), b.data(), f, f, 1, 2, 3, 32, 192, 32, 64, 192, 96, 32, 0, false};
  EXPECT_TRUE(k::VecRope(ok));
  RopeArgs a = ok;
  a.D = 24;  // half 12: not whole vectors
  EXPECT_FALSE(k::VecRope(a));
  a = ok;
  a.in_t = 68;  // rows 136 bytes apart
  EXPECT_FALSE(k::VecRope(a));
  a = ok;
  a.in = b.data() + 4;  // 8 bytes off
  EXPECT_FALSE(k::VecRope(a));
  a = ok;
  a.cos = f + 1;
  EXPECT_FALSE(k::VecRope(a));
  EXPECT_EQ(k::RopeForm(a, true).kernel.fn, k::RopeKernel);
  EXPECT_EQ(k::RopeForm(ok, false).kernel.fn, k::RopeKernel);  // SLIDEDP_FUSED_VECTOR=0
}

// --- RMSNorm ----------------------------------------------------------------------------

TEST(FusedKernelsEmulated, RmsNormVectorFormMatchesScalarForm) {
  std::mt19937 rng(3);
  for (const int64_t cols : {int64_t{64}, int64_t{264}, int64_t{2048}}) {
    for (const bool residual : {false, true}) {
      const int64_t rows = 19;  // two blocks of 8 warps and a part
      const std::string what = "cols " + std::to_string(cols) + (residual ? " with residual" : "");
      const size_t n = static_cast<size_t>(rows * cols);
      Buffer x(n), r(n), w(static_cast<size_t>(cols)), sum_vec(n), sum_scalar(n), y_vec(n), y_scalar(n);
      Fill(x.data(), n, rng, 2.0f);
      Fill(r.data(), n, rng, 1.0f);
      Fill(w.data(), w.size, rng, 1.0f);
      std::vector<float> rstd_vec(rows), rstd_scalar(rows);
      RmsNormArgs a{x.data(), residual ? r.data() : nullptr, w.data(), sum_vec.data(), y_vec.data(),
                    rstd_vec.data(), rows, cols, 1e-6f};
      RunForm(VectorForm(k::RmsNormForm, a, k::RmsNormVecKernel), a);
      a.sum = sum_scalar.data();
      a.y = y_scalar.data();
      a.rstd = rstd_scalar.data();
      RunForm(k::RmsNormForm(a, false), a);
      for (int64_t i = 0; i < rows; ++i) {
        EXPECT_NEAR(rstd_vec[i], rstd_scalar[i], 1e-6 * rstd_scalar[i]) << what << " row " << i;
      }
      if (residual) ExpectBitEqual(sum_vec.data(), sum_scalar.data(), n, what + " sum");
      ExpectWithinOneUnit(y_vec.data(), y_scalar.data(), n, what + " y");

      // Backward over the same rows, the gradient of s from its other use included.
      Buffer dy(n), dsum(n), dx_vec(n), dx_scalar(n);
      Fill(dy.data(), n, rng, 1.0f);
      Fill(dsum.data(), n, rng, 1.0f);
      const int parts = k::BackwardParts(rows);
      std::vector<float> dw_vec(static_cast<size_t>(parts * cols)), dw_scalar(dw_vec.size());
      const uint16_t* s = residual ? sum_scalar.data() : x.data();
      RmsNormGradArgs g{dy.data(), s, w.data(), rstd_scalar.data(), residual ? dsum.data() : nullptr,
                        dx_vec.data(), dw_vec.data(), parts, rows, cols};
      RunForm(VectorForm(k::RmsNormBackwardForm, g, k::RmsNormBackwardVecKernel), g);
      g.dx = dx_scalar.data();
      g.dw_partial = dw_scalar.data();
      RunForm(k::RmsNormBackwardForm(g, false), g);
      ExpectWithinOneUnit(dx_vec.data(), dx_scalar.data(), n, what + " dx");
      for (int64_t c = 0; c < cols; ++c) {
        double sv = 0.0, ss = 0.0, mag = 0.0;
        for (int p = 0; p < parts; ++p) {
          sv += dw_vec[p * cols + c];
          ss += dw_scalar[p * cols + c];
          mag += std::abs(dw_scalar[p * cols + c]);
        }
        ASSERT_NEAR(sv, ss, 1e-5 * (mag + 1.0)) << what << " dw column " << c;
      }
    }
  }
}

TEST(FusedKernelsEmulated, RmsNormTakesTheScalarFormWhereVectorsDoNotFit) {
  Buffer b(1024);
  float rstd[4];
  RmsNormArgs a{b.data(), nullptr, b.data(), nullptr, b.data(), rstd, 4, 64, 1e-6f};
  EXPECT_TRUE(k::VecRmsNorm(a));
  a.cols = 60;
  EXPECT_FALSE(k::VecRmsNorm(a));
  a.cols = 64;
  a.residual = b.data() + 2;
  EXPECT_FALSE(k::VecRmsNorm(a));
  RmsNormGradArgs g{b.data(), b.data(), b.data(), rstd, nullptr, b.data(), nullptr, 1, 4, 64};
  EXPECT_TRUE(k::VecRmsNormBackward(g));
  g.dsum = b.data() + 1;
  EXPECT_FALSE(k::VecRmsNormBackward(g));
  EXPECT_EQ(k::RmsNormBackwardForm(g, true).kernel.fn, k::RmsNormBackwardKernel);
}

}  // namespace
}  // namespace slidedp::fused
