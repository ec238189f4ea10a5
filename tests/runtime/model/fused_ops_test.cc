// The fused block ops (runtime/model/fused_ops.h) against the ATen composition that the
// CPU device runs (the same formulas as transformer.cc's ATen path), in bf16: forward
// and every gradient, odd sizes, residual and per-token RoPE tables. On the CPU this
// checks the autograd glue with the kernels' C++ reference; on a CUDA device (the H200)
// the CUDA kernels, and a whole block fused against unfused.
// Tolerance: bf16 keeps 8 significant bits; the fused kernels round once where ATen
// rounds after every op, so they differ by about one bf16 unit (2^-8 of the value): we
// accept a max error of 2% of the reference's largest magnitude.
#include "runtime/model/fused_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/transformer.h"

namespace slidedp {
namespace {

constexpr double kTolerance = 2e-2;

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const at::Tensor g = got.to(at::kFloat).cpu(), w = want.to(at::kFloat).cpu();
  const double scale = std::max(w.abs().max().item<double>(), 1e-6);
  const double err = (g - w).abs().max().item<double>();
  EXPECT_LE(err / scale, kTolerance) << what << ": max error " << err << " of max " << scale;
}

at::Tensor Leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

// Hugging Face's RMSNorm as transformer.cc's ATen path computes it.
at::Tensor AtenRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
  return w * h.to(x.scalar_type());
}

at::Tensor AtenRope(const at::Tensor& x /*[B,T,H,D]*/, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor xt = x.transpose(1, 2);
  const int64_t T = xt.size(2), half = xt.size(-1) / 2;
  const bool shared = cos.dim() == 2;
  const at::Tensor c = (shared ? cos.narrow(0, 0, T) : cos).to(x.scalar_type());
  const at::Tensor s = (shared ? sin.narrow(0, 0, T) : sin).to(x.scalar_type());
  const at::Tensor rot = at::cat({-xt.narrow(-1, half, half), xt.narrow(-1, 0, half)}, -1);
  return xt * c + rot * s;
}

std::vector<at::Device> Devices() {
  std::vector<at::Device> d{at::kCPU};
  if (at::hasCUDA()) d.emplace_back(at::kCUDA, 0);
  return d;
}

at::Tensor Randn(std::vector<int64_t> shape, const at::Device& device, double scale = 1.0) {
  return (at::randn(shape, at::kFloat) * scale).to(at::kBFloat16).to(device);
}

TEST(FusedOps, RmsNormMatchesAtenForwardAndGradients) {
  at::manual_seed(1);
  for (const at::Device& dev : Devices()) {
    for (int64_t cols : {64, 136, 2048}) {
      const at::Tensor x0 = Randn({3, 7, cols}, dev, 2.0), w0 = Randn({cols}, dev);
      const at::Tensor gy = Randn({3, 7, cols}, dev);
      at::Tensor xa = Leaf(x0), wa = Leaf(w0), xf = Leaf(x0), wf = Leaf(w0);
      const at::Tensor ya = AtenRmsNorm(xa, wa, 1e-6), yf = FusedRmsNorm(xf, wf, 1e-6);
      ya.backward(gy);
      yf.backward(gy);
      const std::string what = dev.str() + " cols " + std::to_string(cols);
      ExpectClose(yf, ya, what + " y");
      ExpectClose(xf.grad(), xa.grad(), what + " dx");
      ExpectClose(wf.grad(), wa.grad(), what + " dw");
    }
  }
}

TEST(FusedOps, AddRmsNormMatchesAtenWithBothOutputsUsed) {
  at::manual_seed(2);
  for (const at::Device& dev : Devices()) {
    const int64_t cols = 200;
    const at::Tensor x0 = Randn({2, 9, cols}, dev), r0 = Randn({2, 9, cols}, dev), w0 = Randn({cols}, dev);
    const at::Tensor gs = Randn({2, 9, cols}, dev), gy = Randn({2, 9, cols}, dev);
    at::Tensor xa = Leaf(x0), ra = Leaf(r0), wa = Leaf(w0), xf = Leaf(x0), rf = Leaf(r0), wf = Leaf(w0);
    const at::Tensor sa = xa + ra, ya = AtenRmsNorm(sa, wa, 1e-5);
    auto [sf, yf] = FusedAddRmsNorm(xf, rf, wf, 1e-5);
    // The block uses s twice: in the norm and in the residual stream.
    ((sa * gs).sum() + (ya * gy).sum()).backward();
    ((sf * gs).sum() + (yf * gy).sum()).backward();
    ExpectClose(sf, sa, dev.str() + " s");
    ExpectClose(yf, ya, dev.str() + " y");
    ExpectClose(xf.grad(), xa.grad(), dev.str() + " dx");
    ExpectClose(rf.grad(), ra.grad(), dev.str() + " dresidual");
    ExpectClose(wf.grad(), wa.grad(), dev.str() + " dw");
  }
}

TEST(FusedOps, RopeMatchesAtenWithSharedAndPerTokenTables) {
  at::manual_seed(3);
  ModelConfig c = PresetConfig("tiny").value();
  for (const at::Device& dev : Devices()) {
    const int64_t B = 2, T = 11, H = 3, D = c.head_dim;
    const RopeTables shared = MakeRope(c, 16, dev);
    const at::Tensor pos = at::randint(0, 16, {B, T}, at::kLong);
    const at::Tensor flat = pos.reshape({-1}).to(dev);
    const RopeTables per_token{shared.cos.index_select(0, flat).view({B, 1, T, D}),
                               shared.sin.index_select(0, flat).view({B, 1, T, D})};
    for (const RopeTables* t : {&shared, &per_token}) {
      const at::Tensor x0 = Randn({B, T, H, D}, dev, 3.0), gy = Randn({B, H, T, D}, dev);
      at::Tensor xa = Leaf(x0), xf = Leaf(x0);
      const at::Tensor ya = AtenRope(xa, t->cos, t->sin), yf = FusedRope(xf, t->cos, t->sin);
      EXPECT_TRUE(yf.is_contiguous());
      ya.backward(gy);
      yf.backward(gy);
      const std::string what = dev.str() + (t == &shared ? " shared" : " per-token");
      ExpectClose(yf, ya, what + " y");
      ExpectClose(xf.grad(), xa.grad(), what + " dx");
    }
  }
}

TEST(FusedOps, SwigluMatchesAten) {
  at::manual_seed(4);
  for (const at::Device& dev : Devices()) {
    const at::Tensor g0 = Randn({5, 333}, dev, 3.0), u0 = Randn({5, 333}, dev), gy = Randn({5, 333}, dev);
    at::Tensor ga = Leaf(g0), ua = Leaf(u0), gf = Leaf(g0), uf = Leaf(u0);
    const at::Tensor ya = at::silu(ga) * ua, yf = FusedSwiglu(gf, uf);
    ya.backward(gy);
    yf.backward(gy);
    ExpectClose(yf, ya, dev.str() + " y");
    ExpectClose(gf.grad(), ga.grad(), dev.str() + " dgate");
    ExpectClose(uf.grad(), ua.grad(), dev.str() + " dup");
  }
}

TEST(FusedOps, LinearCrossEntropyMatchesAtenWithIgnoredTargets) {
  at::manual_seed(6);
  for (const at::Device& dev : Devices()) {
    const int64_t n = 37, H = 48, V = 1001;
    const at::Tensor h0 = Randn({n, H}, dev), w0 = Randn({V, H}, dev, 0.3);
    at::Tensor targets = at::randint(0, V, {n}, at::kLong);
    targets.index_put_({at::arange(0, n, 5)}, kIgnoreIndex);
    targets = targets.to(dev);
    const double scale = 1.0 / 29;
    at::Tensor ha = Leaf(h0), wa = Leaf(w0);
    const at::Tensor loss_a = at::cross_entropy_loss(at::linear(ha, wa).to(at::kFloat), targets, {},
                                                     at::Reduction::Sum, kIgnoreIndex) * scale;
    loss_a.backward();
    const LinearCrossEntropy f = FusedLinearCrossEntropy(h0, w0, targets, scale);
    const std::string what = dev.str();
    EXPECT_NEAR(f.loss.item<double>(), loss_a.item<double>(), 1e-3 * std::abs(loss_a.item<double>())) << what;
    ExpectClose(f.dh, ha.grad(), what + " dh");
    ExpectClose(f.dw, wa.grad(), what + " dw");
    // Ignored rows get no gradient at all.
    EXPECT_EQ(f.dh.narrow(0, 0, 1).abs().max().item<double>(), 0.0) << what;
  }
}

// A whole Qwen3-style block (q/k norm, GQA, QKV bias) on the GPU: fused bf16 and ATen's
// bf16 ops, each against the same block in fp32, by the relative L2 error of each tensor
// (output, input gradient, every parameter's gradient). Gradients that are sums over
// many positions (the biases) carry errors of several bf16 units whichever way they are
// rounded (one H200 run: k_proj.bias max error 4.1% of its scale fused, 2.4% ATen; the
// next draw may swap them), so the criterion is relative to ATen's own bf16 error: at
// most twice it plus 1%. A wrong formula is off by O(1).
TEST(FusedOps, CudaBlockIsAsCloseToFp32AsAtensBf16Block) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  at::manual_seed(5);
  ModelConfig c = PresetConfig("tiny").value();
  c.qk_norm = true;
  c.qkv_bias = true;
  const ModelLayout layout = BuildLayout(c);
  const UnitLayout& unit = layout.units[1];
  const at::Device dev(at::kCUDA, 0);
  const at::Tensor flat0 = (at::randn({unit.numel}) * 0.05).to(dev);
  const int64_t B = 2, T = 64;
  const at::Tensor x0 = at::randn({B, T, c.hidden_size}).to(dev), gy = at::randn({B, T, c.hidden_size}).to(dev);
  TokenLayout tokens;
  tokens.rope = MakeRope(c, T, dev);
  struct Out {
    at::Tensor y, dx, dflat;
  };
  auto run = [&](bool fused, at::ScalarType dtype) {
    EnableFusedOps(fused);
    at::Tensor flat = Leaf(flat0.to(dtype)), x = Leaf(x0.to(dtype));
    at::Tensor y = BlockForward(c, ViewBlock(unit, flat), x, tokens);
    y.backward(gy.to(dtype));
    return Out{y.to(at::kFloat), x.grad().to(at::kFloat), flat.grad().to(at::kFloat)};
  };
  const Out ref = run(false, at::kFloat), aten = run(false, at::kBFloat16), fused = run(true, at::kBFloat16);
  EnableFusedOps(true);
  auto check = [](const at::Tensor& f, const at::Tensor& a, const at::Tensor& r, const std::string& what) {
    const double norm = std::max(r.norm().item<double>(), 1e-12);
    const double err_fused = (f - r).norm().item<double>() / norm;
    const double err_aten = (a - r).norm().item<double>() / norm;
    EXPECT_LE(err_fused, 2.0 * err_aten + 1e-2)
        << what << ": relative L2 error fused " << err_fused << ", ATen bf16 " << err_aten;
  };
  check(fused.y, aten.y, ref.y, "block y");
  check(fused.dx, aten.dx, ref.dx, "block dx");
  for (const ParamSpec& ps : unit.params) {
    check(fused.dflat.narrow(0, ps.offset, ps.numel), aten.dflat.narrow(0, ps.offset, ps.numel),
          ref.dflat.narrow(0, ps.offset, ps.numel), "block d" + ps.name);
  }
}

}  // namespace
}  // namespace slidedp
