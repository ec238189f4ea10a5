// Weight gradients into fp32 accumulators (runtime/model/weight_grad.h): the GEMM itself
// on each device (on a CUDA device: cuBLAS found through the LibTorch that is loaded),
// and the fused block ops with sinks (fused_ops.h, tiled_mlp.h): the sinks receive each
// weight's gradient summed over micro-batches and tiles in fp32, the weights get none
// from autograd, and every other gradient is the one without sinks, bit for bit.
// Tolerance: the sinks sum bf16 products in fp32 (no rounding to bf16 on the way), so
// against an fp32 reference of the same products they differ by summation order only:
// 1e-4 of the largest magnitude; against the bf16 gradients autograd returns without
// sinks, by those gradients' rounding: 2e-2 (fused_ops_test.cc's bound).
#include "runtime/model/weight_grad.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/model/fused_ops.h"
#include "runtime/model/ignore_index.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/tiled_mlp.h"
#include "runtime/model/transformer.h"
#include "tests/runtime/model/bf16_test_helpers.h"

namespace slidedp {
namespace {

using model_testing::Devices;
using model_testing::ExpectClose;
using model_testing::Leaf;
using model_testing::Randn;

void ExpectEqual(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  EXPECT_TRUE(at::equal(got.cpu(), want.cpu())) << what;
}

// The fp32 product of bf16 operands, the sinks' reference: dy^T x.
at::Tensor Fp32Product(const at::Tensor& dy, const at::Tensor& x) {
  return at::mm(dy.t().to(at::kFloat).cpu(), x.to(at::kFloat).cpu());
}

TEST(WeightGrad, AddsTheProductIntoAnFp32AccumulatorOnEachDevice) {
  at::manual_seed(3);
  for (const at::Device& dev : Devices()) {
    const at::Tensor dst0 = at::randn({5, 7}).to(dev);
    const at::Tensor wide = Randn({11, 9}, dev), x = Randn({11, 7}, dev);
    const at::Tensor dy = wide.narrow(1, 2, 5);  // a column slice: row stride 9
    at::Tensor dst = dst0.clone();
    ASSERT_TRUE(AddWeightGradient(dst, dy, x)) << dev.str() << ": no GEMM into fp32 on this device";
    ExpectClose(dst, dst0.cpu() + Fp32Product(dy, x), 1e-5, dev.str());
    // Into a row slice of a larger accumulator (a weight's view of a unit's buffer).
    at::Tensor acc = at::zeros({3 * 5 * 7}, at::TensorOptions().dtype(at::kFloat).device(dev));
    at::Tensor view = acc.narrow(0, 5 * 7, 5 * 7).view({5, 7});
    ASSERT_TRUE(AddWeightGradient(view, dy, x));
    ExpectClose(view, Fp32Product(dy, x), 1e-5, dev.str() + " view");
    EXPECT_EQ(acc.narrow(0, 0, 5 * 7).abs().sum().item<double>(), 0.0) << dev.str() << ": wrote outside the view";
    EXPECT_EQ(acc.narrow(0, 2 * 5 * 7, 5 * 7).abs().sum().item<double>(), 0.0) << dev.str() << ": wrote outside";
  }
}

TEST(WeightGrad, RefusesAnAccumulatorThatIsNotFp32OrDoesNotFit) {
  const at::Tensor dy = Randn({4, 3}, at::kCPU), x = Randn({4, 2}, at::kCPU);
  at::Tensor bf16 = at::zeros({3, 2}, at::kBFloat16);
  EXPECT_THROW(AddWeightGradient(bf16, dy, x), c10::Error);
  at::Tensor wrong = at::zeros({2, 3}, at::kFloat);
  EXPECT_THROW(AddWeightGradient(wrong, dy, x), c10::Error);
}

// Two micro-batches through FusedLinears over three weights (biases on), with sinks that
// lie back to back (one GEMM), apart (one a weight), or on one weight of the three.
TEST(WeightGrad, LinearsGiveTheirSinksTheGradientSumAndTheWeightsNone) {
  at::manual_seed(5);
  const int64_t B = 2, T = 3, in = 16;
  const std::vector<int64_t> outs{8, 4, 4};
  const int64_t total = 16;
  for (const at::Device& dev : Devices()) {
    for (int mode = 0; mode < 3; ++mode) {
      const std::string what = dev.str() + std::vector<std::string>{" adjacent", " apart", " one of three"}[mode];
      std::vector<at::Tensor> w0, b0;
      for (int64_t o : outs) {
        w0.push_back(Randn({o, in}, dev, 0.2));
        b0.push_back(Randn({o}, dev, 0.2));
      }
      const std::vector<at::Tensor> xs0{Randn({B, T, in}, dev), Randn({B, T, in}, dev)};
      const std::vector<at::Tensor> gys{Randn({B, T, total}, dev), Randn({B, T, total}, dev)};
      at::Tensor acc = at::zeros({total * in}, at::TensorOptions().dtype(at::kFloat).device(dev));
      std::vector<at::Tensor> sinks;
      int64_t off = 0;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (mode == 0) sinks.push_back(acc.narrow(0, off, outs[i] * in).view({outs[i], in}));
        if (mode == 1) sinks.push_back(at::zeros({outs[i], in}, acc.options()));
        if (mode == 2) sinks.push_back(i == 1 ? acc.narrow(0, off, outs[i] * in).view({outs[i], in}) : at::Tensor());
        off += outs[i] * in;
      }
      // Without sinks (autograd's gradients) and with them, the same leaves' values.
      std::vector<at::Tensor> wa, ba, ws, bs;
      for (size_t i = 0; i < outs.size(); ++i) {
        wa.push_back(Leaf(w0[i]));
        ba.push_back(Leaf(b0[i]));
        ws.push_back(Leaf(w0[i]));
        bs.push_back(Leaf(b0[i]));
      }
      at::Tensor want_product = at::zeros({total, in});
      for (size_t mb = 0; mb < 2; ++mb) {
        const at::Tensor xa = Leaf(xs0[mb]), xs = Leaf(xs0[mb]);
        const at::Tensor ya = FusedLinears(xa, wa, ba), ys = FusedLinears(xs, ws, bs, sinks);
        ExpectEqual(ys, ya, what + " y");
        ya.backward(gys[mb]);
        ys.backward(gys[mb]);
        ExpectEqual(xs.grad(), xa.grad(), what + " dx");
        want_product += Fp32Product(gys[mb].reshape({B * T, total}), xs0[mb].reshape({B * T, in}));
      }
      off = 0;
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::string wi = what + " weight " + std::to_string(i);
        ExpectEqual(bs[i].grad(), ba[i].grad(), wi + " bias");
        const at::Tensor want = want_product.narrow(0, off, outs[i]);
        if (sinks[i].defined()) {
          EXPECT_FALSE(ws[i].grad().defined()) << wi << ": autograd gave a weight with a sink a gradient";
          ExpectClose(sinks[i], want, 1e-4, wi + " sink against fp32");
          ExpectClose(sinks[i], wa[i].grad(), 2e-2, wi + " sink against autograd's bf16");
        } else {
          ExpectEqual(ws[i].grad(), wa[i].grad(), wi + " (no sink)");
        }
        off += outs[i];
      }
    }
  }
}

// The MLP whole and in tiles of 4 of 10 positions: the sinks hold the fp32 sums over
// the tiles, h's gradient is the one without sinks.
TEST(WeightGrad, MlpSinksSumEveryTileAndLeaveTheInputGradientAsItWas) {
  at::manual_seed(7);
  const int64_t T = 10, H = 16, F = 8;
  for (const at::Device& dev : Devices()) {
    for (int64_t tile : {int64_t{0}, int64_t{4}}) {
      const std::string what = dev.str() + (tile > 0 ? " tiled" : " whole");
      const at::Tensor h0 = Randn({1, T, H}, dev), gy = Randn({1, T, H}, dev);
      const at::Tensor gate0 = Randn({F, H}, dev, 0.3), up0 = Randn({F, H}, dev, 0.3), down0 = Randn({H, F}, dev, 0.3);
      const MlpWeights wa{Leaf(gate0), at::Tensor(), Leaf(up0), at::Tensor(), Leaf(down0), at::Tensor()};
      const MlpWeights ws{Leaf(gate0), at::Tensor(), Leaf(up0), at::Tensor(), Leaf(down0), at::Tensor()};
      const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat).device(dev);
      at::Tensor acc = at::zeros({2 * F * H + H * F}, fp32);  // gate | up | down, as in a unit
      const MlpSinks sinks{acc.narrow(0, 0, F * H).view({F, H}), acc.narrow(0, F * H, F * H).view({F, H}),
                           acc.narrow(0, 2 * F * H, H * F).view({H, F})};
      const at::Tensor ha = Leaf(h0), hs = Leaf(h0);
      const at::Tensor ya = TiledMlp(wa, ha, tile, /*fused=*/true);
      const at::Tensor ys = TiledMlp(ws, hs, tile, /*fused=*/true, /*output_unread=*/false, sinks);
      ExpectEqual(ys, ya, what + " y");
      ya.backward(gy);
      ys.backward(gy);
      ExpectEqual(hs.grad(), ha.grad(), what + " dh");
      const std::vector<std::pair<const char*, std::pair<at::Tensor, at::Tensor>>> pairs{
          {"gate", {ws.gate_w, wa.gate_w}}, {"up", {ws.up_w, wa.up_w}}, {"down", {ws.down_w, wa.down_w}}};
      const std::vector<at::Tensor> sink{sinks.gate, sinks.up, sinks.down};
      for (size_t i = 0; i < pairs.size(); ++i) {
        const std::string wi = what + " " + pairs[i].first;
        EXPECT_FALSE(pairs[i].second.first.grad().defined()) << wi << ": autograd gave a weight with a sink a gradient";
        ExpectClose(sink[i], pairs[i].second.second.grad(), 2e-2, wi + " sink against autograd's");
      }
    }
  }
}

// A whole fused block with its sinks in a unit's accumulator (SinkWeights), as the
// engine runs it on CUDA, against the same block without: Qwen2-style (QKV bias, the
// QKV weights apart: one GEMM each), Qwen3-style (q/k norms, no bias: one GEMM for QKV),
// a tiled MLP. Two micro-batches over the same leaves.
TEST(WeightGrad, BlockSinksTakeTheProjectionsGradientsAndChangeNoOtherGradient) {
  struct Case {
    std::string name;
    bool qk_norm, qkv_bias;
    int64_t mlp_tile;
  };
  const std::vector<Case> cases{{"qwen2", false, true, 0}, {"qwen3", true, false, 0}, {"tiled mlp", false, true, 24}};
  const std::vector<std::string> projections{"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                             "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                             "mlp.down_proj.weight"};
  for (const at::Device& dev : Devices()) {
    for (const Case& k : cases) {
      at::manual_seed(12);
      ModelConfig c = PresetConfig("tiny").value();
      c.qk_norm = k.qk_norm;
      c.qkv_bias = k.qkv_bias;
      const ModelLayout layout = BuildLayout(c);
      const UnitLayout& unit = layout.units[1];
      const at::Tensor flat = (at::randn({unit.numel}) * 0.05).to(at::kBFloat16).to(dev);
      const int64_t B = 2, T = 61;
      TokenLayout tokens;
      tokens.rope = MakeRope(c, T, dev);
      std::vector<at::Tensor> xs, gys;
      for (int mb = 0; mb < 2; ++mb) {
        xs.push_back(Randn({B, T, c.hidden_size}, dev));
        gys.push_back(Randn({B, T, c.hidden_size}, dev));
      }
      std::vector<at::Tensor> la, ls;  // leaves without and with sinks
      const BlockParams pa = ViewBlock(unit, flat, &la);
      BlockParams ps = ViewBlock(unit, flat, &ls);
      at::Tensor acc = at::zeros({unit.numel}, at::TensorOptions().dtype(at::kFloat).device(dev));
      SinkWeights(unit, acc, &ps);
      for (int mb = 0; mb < 2; ++mb) {
        const std::string what = dev.str() + " " + k.name + " micro-batch " + std::to_string(mb);
        const at::Tensor xa = Leaf(xs[mb]), xsk = Leaf(xs[mb]);
        const at::Tensor ya = FusedBlockForward(c, pa, xa, tokens, k.mlp_tile);
        const at::Tensor ysk = FusedBlockForward(c, ps, xsk, tokens, k.mlp_tile);
        ExpectEqual(ysk, ya, what + " y");
        ya.backward(gys[mb]);
        ysk.backward(gys[mb]);
        ExpectEqual(xsk.grad(), xa.grad(), what + " dx");
      }
      for (size_t i = 0; i < unit.params.size(); ++i) {
        const ParamSpec& spec = unit.params[i];
        const std::string what = dev.str() + " " + k.name + " " + spec.name;
        if (!la[i].defined()) continue;
        const bool projection = std::any_of(projections.begin(), projections.end(), [&](const std::string& p) {
          return spec.name.size() >= p.size() && spec.name.compare(spec.name.size() - p.size(), p.size(), p) == 0;
        });
        if (projection) {
          EXPECT_FALSE(ls[i].grad().defined()) << what << ": autograd gave a weight with a sink a gradient";
          ExpectClose(acc.narrow(0, spec.offset, spec.numel).view(spec.shape), la[i].grad(), 2e-2, what + " sink");
        } else {
          ExpectEqual(ls[i].grad(), la[i].grad(), what);
          EXPECT_EQ(acc.narrow(0, spec.offset, spec.numel).abs().sum().item<double>(), 0.0)
              << what << ": a parameter without a sink had its accumulator written";
        }
      }
    }
  }
}

// The loss head's fused chunk (FusedHeadBackward, the worker's and calibration's one
// definition): its loss and gradients against autograd through HeadLogits and
// CrossEntropySum, and lm_head's gradient in the fp32 accumulator whether it is sunk
// there or added from bf16 (then within that bf16 rounding of each other); the other
// gradients do not depend on the sink, bit for bit, and lm_head gets none from autograd.
TEST(WeightGrad, FusedHeadPutsTheLmHeadsGradientInItsAccumulatorWithOrWithoutASink) {
  at::manual_seed(8);
  ModelConfig c = PresetConfig("tiny").value();
  const int64_t B = 2, T = 24, H = c.hidden_size, V = c.vocab_size;
  const double scale = 1.0 / (B * T);
  for (const at::Device& dev : Devices()) {
    const std::string what = dev.str();
    const at::Tensor x0 = Randn({B, T, H}, dev), lm0 = Randn({V, H}, dev, 0.3);
    const at::Tensor norm0 = (1.0 + 0.1 * at::randn({H})).to(at::kBFloat16).to(dev);
    at::Tensor targets = at::randint(0, V, {B, T}, at::kLong);
    targets.index_put_({0, at::arange(0, T, 7)}, kIgnoreIndex);
    targets = targets.to(dev);
    at::Tensor xa = Leaf(x0), na = Leaf(norm0), la = Leaf(lm0);
    const at::Tensor loss_a = CrossEntropySum(HeadLogits(c, na, la, xa), targets) * scale;
    loss_a.backward();
    std::vector<at::Tensor> dx, dnorm, dlm;
    for (bool sink : {false, true}) {
      at::Tensor xf = Leaf(x0), nf = Leaf(norm0), lf = Leaf(lm0);
      const at::Tensor acc = at::zeros({V, H}, at::TensorOptions().device(dev).dtype(at::kFloat));
      const at::Tensor loss = FusedHeadBackward(c, nf, lf, xf, targets, scale, acc, sink);
      const std::string w = what + (sink ? " sunk" : " added");
      EXPECT_NEAR(loss.item<double>(), loss_a.item<double>(), 1e-3 * std::abs(loss_a.item<double>())) << w;
      ExpectClose(xf.grad(), xa.grad(), 2e-2, w + " dx");
      ExpectClose(nf.grad(), na.grad(), 2e-2, w + " dnorm");
      ExpectClose(acc, la.grad(), 2e-2, w + " dlm");
      EXPECT_FALSE(lf.grad().defined()) << w;
      dx.push_back(xf.grad());
      dnorm.push_back(nf.grad());
      dlm.push_back(acc);
    }
    EXPECT_TRUE(at::equal(dx[0], dx[1])) << what;
    EXPECT_TRUE(at::equal(dnorm[0], dnorm[1])) << what;
    ExpectClose(dlm[1], dlm[0], 1e-2, what + " sunk against added");
  }
}

}  // namespace
}  // namespace slidedp
