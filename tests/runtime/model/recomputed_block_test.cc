// RecomputedBlockBackward (runtime/model/transformer.h): a block's backward recomputed
// from its input gives the gradients of BlockForward(...).backward(dy), bit for bit on
// the CPU, for the fused path (the kernels' C++ reference; its recomputation skips the
// MLP's down projection) and ATen's: Qwen2-style (QKV bias), Qwen3-style (q/k norms),
// MLP biases, per-parameter leaves as the engine makes them, a tiled MLP, and documents
// with per-token positions. On a CUDA device the same on the fused kernels, within the
// nondeterminism of attention's backward (its atomics): relative L2 error 2e-3.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/transformer.h"
#include "tests/runtime/model/bf16_test_helpers.h"

namespace slidedp {
namespace {

using model_testing::Leaf;

struct Case {
  std::string name;
  bool qk_norm, qkv_bias, mlp_bias, leaves, documents;
  int64_t mlp_tile;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases{{"qwen2", false, true, false, false, false, 0},
                                       {"qwen3 leaves", true, false, false, true, false, 0},
                                       {"mlp bias leaves", false, true, true, true, false, 0},
                                       {"tiled mlp", false, true, false, true, false, 24},
                                       {"documents", false, true, false, false, true, 0}};
  return cases;
}

enum class Path { kFusedCpu, kAten, kDevice };

struct Grads {
  at::Tensor dx, dflat;  // dflat: every parameter's gradient at its offset in the unit
};

// The gradients of one block (the case's config, seeded inputs) by plain autograd over
// the block's output (`recomputed` false) or by RecomputedBlockBackward.
Grads BlockGrads(const Case& k, Path path, at::ScalarType dtype, bool recomputed) {
  at::manual_seed(12);
  ModelConfig c = PresetConfig("tiny").value();
  c.qk_norm = k.qk_norm;
  c.qkv_bias = k.qkv_bias;
  c.mlp_bias = k.mlp_bias;
  const at::Device device = path == Path::kDevice ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const ModelLayout layout = BuildLayout(c);
  const UnitLayout& unit = layout.units[1];
  const int64_t B = 2, T = 61;
  const at::TensorOptions opt = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor flat = Leaf((at::randn({unit.numel}) * 0.05).to(opt));
  at::Tensor x = Leaf(at::randn({B, T, c.hidden_size}).to(opt));
  const at::Tensor dy = at::randn({B, T, c.hidden_size}).to(opt);
  TokenLayout tokens;
  tokens.rope = MakeRope(c, T, device);
  if (k.documents) {
    at::Tensor positions = at::arange(T, at::kLong).repeat({B, 1});
    positions.narrow(0, 1, 1).narrow(1, 20, T - 20).sub_(20);  // row 1: documents at 0 and 20
    RopeTables table = tokens.rope;
    tokens = DocumentLayout(c, positions, positions.to(device), &table);
  }
  std::vector<at::Tensor> leaves;
  const BlockParams p = ViewBlock(unit, flat, k.leaves ? &leaves : nullptr);
  const bool fused = path == Path::kFusedCpu;
  if (recomputed) {
    fused ? FusedRecomputedBlockBackward(c, p, x, tokens, k.mlp_tile, dy)
          : RecomputedBlockBackward(c, p, x, tokens, k.mlp_tile, dy);
  } else {
    (fused ? FusedBlockForward(c, p, x, tokens, k.mlp_tile) : BlockForward(c, p, x, tokens, k.mlp_tile)).backward(dy);
  }
  Grads g{x.grad(), k.leaves ? at::zeros({unit.numel}, opt) : flat.grad()};
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].defined()) continue;
    EXPECT_TRUE(leaves[i].grad().defined()) << k.name << " " << unit.params[i].name;
    if (leaves[i].grad().defined()) {
      g.dflat.narrow(0, unit.params[i].offset, unit.params[i].numel).copy_(leaves[i].grad().reshape({-1}));
    }
  }
  return g;
}

TEST(RecomputedBlock, GradientsEqualBackwardThroughTheBlocksOutputBitForBit) {
  struct PathCase {
    Path path;
    at::ScalarType dtype;
    const char* name;
  };
  for (const PathCase& pc : {PathCase{Path::kFusedCpu, at::kBFloat16, "fused bf16"},
                             PathCase{Path::kAten, at::kBFloat16, "ATen bf16"},
                             PathCase{Path::kAten, at::kFloat, "ATen fp32"}}) {
    for (const Case& k : Cases()) {
      const Grads want = BlockGrads(k, pc.path, pc.dtype, false), got = BlockGrads(k, pc.path, pc.dtype, true);
      EXPECT_TRUE(at::equal(got.dx, want.dx)) << pc.name << " " << k.name << ": dx";
      EXPECT_TRUE(at::equal(got.dflat, want.dflat)) << pc.name << " " << k.name << ": parameters' gradients";
    }
  }
}

TEST(RecomputedBlock, CudaGradientsEqualBackwardThroughTheBlocksOutput) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const Case& k : Cases()) {
    const Grads want = BlockGrads(k, Path::kDevice, at::kBFloat16, false), got = BlockGrads(k, Path::kDevice, at::kBFloat16, true);
    auto err = [](const at::Tensor& a, const at::Tensor& b) {
      const at::Tensor fa = a.to(at::kFloat), fb = b.to(at::kFloat);
      return (fa - fb).norm().item<double>() / std::max(fb.norm().item<double>(), 1e-12);
    };
    EXPECT_LE(err(got.dx, want.dx), 2e-3) << k.name << ": dx";
    EXPECT_LE(err(got.dflat, want.dflat), 2e-3) << k.name << ": parameters' gradients";
  }
}

}  // namespace
}  // namespace slidedp
