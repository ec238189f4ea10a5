// TiledMlp against the MLP computed whole: forward, the input's gradient and every
// weight's gradient, in fp32 on the CPU, for tiles that do and do not divide the sequence;
// and in bf16 on a CUDA device where there is one, against an fp32 reference.
#include "runtime/model/tiled_mlp.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace slidedp {
namespace {

struct Grads {
  at::Tensor out, gh;
  std::vector<at::Tensor> gw;
};

// RunMlp: runs the MLP on `h` with `tile` and backpropagates `gy`; weights are fresh leaves.
Grads RunMlp(const MlpWeights& base, const at::Tensor& h0, const at::Tensor& gy, int64_t tile) {
  MlpWeights w;
  std::vector<at::Tensor> leaves;
  auto leaf = [&](const at::Tensor& t) {
    if (!t.defined()) return at::Tensor();
    leaves.push_back(t.detach().clone().requires_grad_(true));
    return leaves.back();
  };
  w.gate_w = leaf(base.gate_w);
  w.gate_b = leaf(base.gate_b);
  w.up_w = leaf(base.up_w);
  w.up_b = leaf(base.up_b);
  w.down_w = leaf(base.down_w);
  w.down_b = leaf(base.down_b);
  at::Tensor h = h0.detach().clone().requires_grad_(true);
  Grads g;
  g.out = TiledMlp(w, h, tile);
  g.out.backward(gy);
  g.gh = h.grad();
  for (const at::Tensor& l : leaves) g.gw.push_back(l.grad());
  return g;
}

MlpWeights RandomWeights(int64_t H, int64_t F, bool bias) {
  MlpWeights w;
  w.gate_w = at::randn({F, H}) * 0.2;
  w.up_w = at::randn({F, H}) * 0.2;
  w.down_w = at::randn({H, F}) * 0.2;
  if (bias) {
    w.gate_b = at::randn({F}) * 0.1;
    w.up_b = at::randn({F}) * 0.1;
    w.down_b = at::randn({H}) * 0.1;
  }
  return w;
}

// Tiles only change the order of fp32 sums (a weight gradient sums B x T products, by
// tile first): every element within 1e-5 of the tensor's largest magnitude. (An
// element-wise rtol fails on elements near 0 whose sums cancel: MKL's order on the H200
// host moved one by 5.7e-6 where the largest was ~10.)
void ExpectAllClose(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5 * scale) << what << ": max |diff| " << diff << ", max |value| " << scale;
}

class TiledMlpTest : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(TiledMlpTest, EqualsTheWholeMlpInForwardAndBackward) {
  const auto [tile, bias] = GetParam();
  at::manual_seed(7);
  const int64_t B = 2, T = 37, H = 16, F = 48;
  const MlpWeights w = RandomWeights(H, F, bias);
  const at::Tensor h = at::randn({B, T, H});
  const at::Tensor gy = at::randn({B, T, H});
  const Grads whole = RunMlp(w, h, gy, 0);
  const Grads tiled = RunMlp(w, h, gy, tile);
  ExpectAllClose(tiled.out, whole.out, "output");
  ExpectAllClose(tiled.gh, whole.gh, "input gradient");
  ASSERT_EQ(tiled.gw.size(), bias ? 6u : 3u);
  for (size_t i = 0; i < whole.gw.size(); ++i) ExpectAllClose(tiled.gw[i], whole.gw[i], "weight gradient");
}

INSTANTIATE_TEST_SUITE_P(Tiles, TiledMlpTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 8, 36), ::testing::Bool()));

MlpWeights To(const MlpWeights& w, const at::TensorOptions& o) {
  auto to = [&](const at::Tensor& t) { return t.defined() ? t.to(o) : at::Tensor(); };
  return MlpWeights{to(w.gate_w), to(w.gate_b), to(w.up_w), to(w.up_b), to(w.down_w), to(w.down_b)};
}

// The largest |a - b| over the largest |b|.
double MaxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bf = b.to(at::kFloat);
  return (a.to(at::kFloat) - bf).abs().max().item<double>() / std::max(1e-30, bf.abs().max().item<double>());
}

// bf16 on the GPU, 2 x 3000 positions, tiles of 1024 (the last one short): each tiled
// result is within 1e-2 of the largest magnitude of the whole bf16 one (bf16 keeps 8
// bits: one rounding is up to 3.9e-3), and no further from the fp32 whole result than
// 1.25 x the whole bf16 one's distance plus 1e-3 (weight gradients sum over the tiles in
// fp32, so tiling must not add error of its own).
TEST(TiledMlpCuda, Bf16TiledEqualsUntiledAsBf16Allows) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  at::manual_seed(11);
  const int64_t B = 2, T = 3000, H = 256, F = 688, tile = 1024;
  const MlpWeights w = RandomWeights(H, F, true);
  const at::Tensor h = at::randn({B, T, H});
  const at::Tensor gy = at::randn({B, T, H}) * 0.1;
  const at::TensorOptions f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::TensorOptions bf16 = f32.dtype(at::kBFloat16);
  const Grads ref = RunMlp(To(w, f32), h.to(f32), gy.to(f32), 0);
  const Grads whole = RunMlp(To(w, bf16), h.to(bf16), gy.to(bf16), 0);
  const Grads tiled = RunMlp(To(w, bf16), h.to(bf16), gy.to(bf16), tile);
  EXPECT_EQ(tiled.out.scalar_type(), at::kBFloat16);
  auto check = [](const at::Tensor& t, const at::Tensor& u, const at::Tensor& r, const std::string& what) {
    const double vs_whole = MaxRelDiff(t, u), tiled_err = MaxRelDiff(t, r), whole_err = MaxRelDiff(u, r);
    EXPECT_LE(vs_whole, 1e-2) << what;
    EXPECT_LE(tiled_err, 1.25 * whole_err + 1e-3) << what << ": whole bf16 off the fp32 one by " << whole_err;
  };
  check(tiled.out, whole.out, ref.out, "output");
  check(tiled.gh, whole.gh, ref.gh, "input gradient");
  ASSERT_EQ(tiled.gw.size(), 6u);
  for (size_t i = 0; i < tiled.gw.size(); ++i) {
    check(tiled.gw[i], whole.gw[i], ref.gw[i], "weight gradient " + std::to_string(i));
  }
}

TEST(TiledMlp, WithoutGradModeItTilesAndKeepsNoGraph) {
  at::manual_seed(3);
  const MlpWeights w = RandomWeights(8, 24, false);
  const at::Tensor h = at::randn({1, 20, 8});
  const at::Tensor whole = TiledMlp(w, h, 0);
  c10::NoGradGuard no_grad;
  const at::Tensor tiled = TiledMlp(w, h, 6);
  EXPECT_FALSE(tiled.requires_grad());
  ExpectAllClose(tiled, whole, "output");
}

TEST(TiledMlp, AutoTileKeepsOneIntermediateUnderTheBudget) {
  // 3.09B shape: FFN 11008, bf16. 4 x 4096 fits in 1 GiB whole; 256K positions do not.
  EXPECT_EQ(AutoMlpTile(4, 4096, 11008, 2), 4096);
  const int64_t t = AutoMlpTile(1, 262144, 11008, 2);
  EXPECT_LT(t, 262144);
  EXPECT_EQ(t % 256, 0);
  EXPECT_LE(t * 11008 * 2, int64_t{1} << 30);
  EXPECT_GT((t + 256) * 11008 * 2, int64_t{1} << 30);
  EXPECT_EQ(AutoMlpTile(64, 1 << 20, 1 << 20, 4), 256) << "never below 256 positions";
}

}  // namespace
}  // namespace slidedp
