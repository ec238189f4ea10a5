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
#include "tests/runtime/model/bf16_test_helpers.h"

namespace slidedp {
namespace {

constexpr double kTolerance = 2e-2;

using model_testing::Devices;
using model_testing::Leaf;
using model_testing::Randn;

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  model_testing::ExpectClose(got, want, kTolerance, what);
}

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
      // The gradient contiguous for the shared tables, in attention's layout for the others.
      const at::Tensor x0 = Randn({B, T, H, D}, dev, 3.0);
      const at::Tensor gy = t == &shared ? Randn({B, H, T, D}, dev) : Randn({B, T, H, D}, dev).transpose(1, 2);
      at::Tensor xa = Leaf(x0), xf = Leaf(x0);
      const at::Tensor ya = AtenRope(xa, t->cos, t->sin), yf = FusedRope(xf, t->cos, t->sin);
      // [B, H, T, D] laid out as [B, T, H, D]: attention's output then needs no transposing copy.
      EXPECT_TRUE(yf.transpose(1, 2).is_contiguous());
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

TEST(FusedOps, RopeReadsStridedViewsInPlace) {
  at::manual_seed(7);
  ModelConfig c = PresetConfig("tiny").value();
  for (const at::Device& dev : Devices()) {
    const int64_t B = 2, T = 9, H = 3, D = c.head_dim;
    const RopeTables t = MakeRope(c, 16, dev);
    // q's columns of a QKV output [B, T, (H + 2) D], as the fused block makes them.
    const at::Tensor wide0 = Randn({B, T, (H + 2) * D}, dev, 3.0), gy = Randn({B, H, T, D}, dev);
    at::Tensor wa = Leaf(wide0), wf = Leaf(wide0);
    const at::Tensor xf = wf.narrow(-1, D, H * D).view({B, T, H, D});
    ASSERT_FALSE(xf.is_contiguous());
    const at::Tensor ya = AtenRope(wa.narrow(-1, D, H * D).view({B, T, H, D}), t.cos, t.sin);
    const at::Tensor yf = FusedRope(xf, t.cos, t.sin);
    ya.backward(gy);
    yf.backward(gy);
    ExpectClose(yf, ya, dev.str() + " y");
    ExpectClose(wf.grad(), wa.grad(), dev.str() + " dx");
  }
}

// The down projection of SwiGLU (the product recomputed in backward), also for gradients
// only (no output computed: only the gradients are compared),
// against silu(gate) * up then a linear, on gate | up halves of one tensor; odd sizes,
// with and without the bias.
TEST(FusedOps, SwigluDownMatchesAtenForwardAndEveryGradient) {
  at::manual_seed(8);
  for (const at::Device& dev : Devices()) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool bias = variant & 1;
      const bool output_unread = variant >= 2;
      const int64_t B = 3, T = 7, H = 45, F = 133;
      const at::Tensor gu0 = Randn({B, T, 2 * F}, dev, 2.0), w0 = Randn({H, F}, dev, 0.1);
      const at::Tensor b0 = bias ? Randn({H}, dev) : at::Tensor(), gy = Randn({B, T, H}, dev);
      at::Tensor gua = Leaf(gu0), wa = Leaf(w0), guf = Leaf(gu0), wf = Leaf(w0);
      at::Tensor ba = bias ? Leaf(b0) : at::Tensor(), bf = bias ? Leaf(b0) : at::Tensor();
      const at::Tensor act = at::silu(gua.narrow(-1, 0, F)) * gua.narrow(-1, F, F);
      const at::Tensor ya = bias ? at::linear(act, wa, ba) : at::linear(act, wa);
      const at::Tensor yf = FusedSwigluDown(guf, wf, bf, output_unread);
      ya.backward(gy);
      yf.backward(gy);
      const std::string what = dev.str() + (bias ? " with bias " : " without bias ") + std::to_string(variant / 2);
      ASSERT_EQ(yf.sizes(), ya.sizes()) << what;
      if (!output_unread) ExpectClose(yf, ya, what + " y");
      ExpectClose(guf.grad(), gua.grad(), what + " d(gate | up)");
      ExpectClose(wf.grad(), wa.grad(), what + " d down_w");
      if (bias) ExpectClose(bf.grad(), ba.grad(), what + " d down_b");
    }
  }
}

// FusedLinears against one at::linear per weight: weights back to back in one flat leaf
// (stacked as a view), the same as per-parameter leaves (detached views, each its own
// leaf, as ViewBlock makes them), and separate tensors with biases (stacked by a copy).
TEST(FusedOps, LinearsMatchSeparateLinearsForEveryGradient) {
  at::manual_seed(9);
  for (const at::Device& dev : Devices()) {
    const int64_t B = 2, T = 5, in = 37;
    const std::vector<int64_t> outs{29, 13, 13};
    for (int mode = 0; mode < 3; ++mode) {
      const bool bias = mode == 2;
      int64_t total = 0;
      for (int64_t o : outs) total += o;
      const at::Tensor flat0 = Randn({total * in + (bias ? total : 0)}, dev, 0.2);
      const at::Tensor x0 = Randn({B, T, in}, dev), gy = Randn({B, T, total}, dev);
      // Parameter i's slice of flat: the weights first, then the biases.
      auto slice = [&](const at::Tensor& flat, size_t i, bool b) {
        int64_t off = b ? total * in : 0;
        for (size_t j = 0; j < i; ++j) off += outs[j] * (b ? 1 : in);
        return b ? flat.narrow(0, off, outs[i]) : flat.narrow(0, off, outs[i] * in).view({outs[i], in});
      };
      at::Tensor flat_a = Leaf(flat0), flat_f = Leaf(flat0), xa = Leaf(x0), xf = Leaf(x0);
      std::vector<at::Tensor> wa, ba, wf, bf;
      for (size_t i = 0; i < outs.size(); ++i) {
        wa.push_back(slice(flat_a, i, false));
        if (bias) ba.push_back(slice(flat_a, i, true));
        if (mode == 0) {
          wf.push_back(slice(flat_f, i, false));
        } else {
          wf.push_back(slice(flat_f, i, false).detach().clone(at::MemoryFormat::Contiguous));
          if (mode == 1) wf.back() = slice(flat_f, i, false).detach();
          wf.back().requires_grad_(true);
          if (bias) bf.push_back(slice(flat_f, i, true).detach().clone().requires_grad_(true));
        }
      }
      std::vector<at::Tensor> ya;
      for (size_t i = 0; i < outs.size(); ++i) ya.push_back(bias ? at::linear(xa, wa[i], ba[i]) : at::linear(xa, wa[i]));
      const at::Tensor yf = FusedLinears(xf, wf, bf);
      at::cat(ya, -1).backward(gy);
      yf.backward(gy);
      const std::string what = dev.str() + std::vector<std::string>{" one flat leaf", " leaf per weight", " copies with biases"}[mode];
      ExpectClose(yf, at::cat(ya, -1), what + " y");
      ExpectClose(xf.grad(), xa.grad(), what + " dx");
      for (size_t i = 0; i < outs.size(); ++i) {
        const at::Tensor dw = mode == 0 ? slice(flat_f.grad(), i, false) : wf[i].grad();
        ExpectClose(dw, slice(flat_a.grad(), i, false), what + " dw" + std::to_string(i));
        if (bias) ExpectClose(bf[i].grad(), slice(flat_a.grad(), i, true), what + " db" + std::to_string(i));
      }
    }
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

// The whole fused block (FusedBlockForward, the C++ reference of the kernels) on the CPU
// against the same block in fp32, with ATen's bf16 block as the yardstick, by the
// CUDA test's criterion above: Qwen2-style (QKV bias: the QKV weights stacked by a copy,
// gate/up by a view), Qwen3-style (q/k norms, no bias: QKV as a view), an MLP with
// biases, per-parameter leaves (as the engine makes them), a tiled MLP, and documents
// with per-token positions.
TEST(FusedOps, CpuFusedBlockIsAsCloseToFp32AsAtensBf16Block) {
  struct Case {
    std::string name;
    bool qk_norm, qkv_bias, mlp_bias, leaves, documents;
    int64_t mlp_tile;
  };
  const std::vector<Case> cases{{"qwen2", false, true, false, false, false, 0},
                                {"qwen3 leaves", true, false, false, true, false, 0},
                                {"mlp bias leaves", false, true, true, true, false, 0},
                                {"tiled mlp", false, true, false, true, false, 24},
                                {"documents", false, true, false, false, true, 0}};
  for (const Case& k : cases) {
    at::manual_seed(10);
    ModelConfig c = PresetConfig("tiny").value();
    c.qk_norm = k.qk_norm;
    c.qkv_bias = k.qkv_bias;
    c.mlp_bias = k.mlp_bias;
    const ModelLayout layout = BuildLayout(c);
    const UnitLayout& unit = layout.units[1];
    const at::Tensor flat0 = at::randn({unit.numel}) * 0.05;
    const int64_t B = 2, T = 61;
    const at::Tensor x0 = at::randn({B, T, c.hidden_size}), gy = at::randn({B, T, c.hidden_size});
    TokenLayout tokens;
    tokens.rope = MakeRope(c, T, at::kCPU);
    if (k.documents) {
      at::Tensor positions = at::arange(T, at::kLong).repeat({B, 1});
      positions.narrow(0, 1, 1).narrow(1, 20, T - 20).sub_(20);  // row 1: documents at 0 and 20
      RopeTables table = tokens.rope;
      tokens = DocumentLayout(c, positions, positions, &table);
    }
    struct Out {
      at::Tensor y, dx, dflat;
    };
    auto run = [&](bool fused, at::ScalarType dtype) {
      at::Tensor flat = Leaf(flat0.to(dtype)), x = Leaf(x0.to(dtype));
      std::vector<at::Tensor> leaves;
      const BlockParams p = ViewBlock(unit, flat, k.leaves ? &leaves : nullptr);
      at::Tensor y = fused ? FusedBlockForward(c, p, x, tokens, k.mlp_tile) : BlockForward(c, p, x, tokens, k.mlp_tile);
      y.backward(gy.to(dtype));
      at::Tensor dflat = k.leaves ? at::zeros({unit.numel}, at::kFloat) : flat.grad().to(at::kFloat);
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (!leaves[i].defined()) continue;
        EXPECT_TRUE(leaves[i].grad().defined()) << k.name << " " << unit.params[i].name;
        if (leaves[i].grad().defined()) {
          dflat.narrow(0, unit.params[i].offset, unit.params[i].numel).copy_(leaves[i].grad().reshape({-1}));
        }
      }
      return Out{y.to(at::kFloat), x.grad().to(at::kFloat), dflat};
    };
    const Out ref = run(false, at::kFloat), aten = run(false, at::kBFloat16), fused = run(true, at::kBFloat16);
    auto check = [&](const at::Tensor& f, const at::Tensor& a, const at::Tensor& r, const std::string& what) {
      const double norm = std::max(r.norm().item<double>(), 1e-12);
      const double err_fused = (f - r).norm().item<double>() / norm;
      const double err_aten = (a - r).norm().item<double>() / norm;
      EXPECT_LE(err_fused, 2.0 * err_aten + 1e-2)
          << k.name << " " << what << ": relative L2 error fused " << err_fused << ", ATen bf16 " << err_aten;
    };
    check(fused.y, aten.y, ref.y, "block y");
    check(fused.dx, aten.dx, ref.dx, "block dx");
    for (const ParamSpec& ps : unit.params) {
      check(fused.dflat.narrow(0, ps.offset, ps.numel), aten.dflat.narrow(0, ps.offset, ps.numel),
            ref.dflat.narrow(0, ps.offset, ps.numel), "block d" + ps.name);
    }
  }
}

}  // namespace
}  // namespace slidedp
