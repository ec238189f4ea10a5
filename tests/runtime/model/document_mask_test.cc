// Document masking (TokenBatch::positions) in the model code: a row packed with three
// documents gives, for each document, the logits, loss and parameter gradients of that
// document run alone (fp32, 1e-5 relative), for Llama (llama3 RoPE scaling, biases),
// Qwen2 (q/k/v biases, tied embeddings) and Qwen3 (q/k norms) shapes. A document at
// positions that do not start at 0 (RoPE being relative) gives the same as at 0, and
// without positions the packed row does not (the check can fail). The same on a CUDA
// device where there is one (SDPA's fused kernels, one call per document; fp32 within
// 1e-4: the kernels differ by document length, so the sums' order does too).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/model/full_model.h"
#include "runtime/model/transformer.h"
#include "runtime/state/host_state.h"

namespace slidedp {
namespace {

constexpr double kCpuTolerance = 1e-5;
constexpr double kCudaTolerance = 1e-4;

ModelConfig Shape(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 10000.0;
  if (family == ModelFamily::kLlama) {
    c.qkv_bias = true;
    c.o_bias = true;
    c.mlp_bias = true;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8;
  } else if (family == ModelFamily::kQwen2) {
    c.qkv_bias = true;
    c.tie_word_embeddings = true;
  } else {
    c.qk_norm = true;
    c.head_dim = 16;
  }
  return c;
}

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(1e-30, want.norm().item<double>());
}

// The model's flat parameters as fresh leaves (seeded weights, non-trivial norms).
std::vector<at::Tensor> Leaves(const HostState& state, at::Device device) {
  std::vector<at::Tensor> flats;
  for (int u = 0; u < state.num_units(); ++u) {
    at::Tensor f = state.unit(u).master.clone();
    for (const ParamSpec& p : state.layout().units[u].params) {
      if (p.shape.size() == 1) f.narrow(0, p.offset, p.numel).add_(at::linspace(-0.2, 0.2, p.numel));
    }
    flats.push_back(f.to(device).requires_grad_(true));
  }
  return flats;
}

// Row 0 packs documents of 5, 7 and 4 tokens; row 1 is one document of 16 tokens whose
// positions start at 9 (past the 16 of a row: the RoPE table grows).
struct Packed {
  std::vector<int64_t> starts = {0, 5, 12};
  std::vector<int64_t> lengths = {5, 7, 4};
  int64_t row1_first_position = 9;
  at::Tensor ids, targets, positions;  // [2, 16]
};

Packed MakePacked(int64_t vocab) {
  Packed p;
  at::manual_seed(3);
  p.ids = at::randint(vocab, {2, 16}, at::kLong);
  p.targets = at::randint(vocab, {2, 16}, at::kLong);
  p.targets[0][4] = kIgnoreIndex;  // ignored targets count in neither
  p.positions = at::empty({2, 16}, at::kLong);
  for (size_t d = 0; d < p.starts.size(); ++d) {
    p.positions[0].narrow(0, p.starts[d], p.lengths[d]).copy_(at::arange(p.lengths[d], at::kLong));
  }
  p.positions[1].copy_(at::arange(p.row1_first_position, p.row1_first_position + 16, at::kLong));
  return p;
}

at::Tensor LossSum(const ModelConfig& c, const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, c.vocab_size}), targets.reshape({-1}), {},
                                at::Reduction::Sum, kIgnoreIndex);
}

// (family, on a CUDA device)
class DocumentMask : public ::testing::TestWithParam<std::tuple<ModelFamily, bool>> {};

TEST_P(DocumentMask, PackedDocumentsEqualEachDocumentAlone) {
  const auto [family, cuda] = GetParam();
  if (cuda && !at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const double kTolerance = cuda ? kCudaTolerance : kCpuTolerance;
  const ModelConfig c = Shape(family);
  HostState state(c, at::kFloat, 0, false);
  ASSERT_TRUE(state.InitRandom(5).ok());
  const ModelLayout& layout = state.layout();
  Packed p = MakePacked(c.vocab_size);
  p.ids = p.ids.to(device);
  p.targets = p.targets.to(device);

  // Packed: both rows in one forward with positions (CPU: the model moves them).
  std::vector<at::Tensor> packed = Leaves(state, device);
  const at::Tensor logits = FullModelLogits(c, layout, packed, p.ids, p.positions);
  ASSERT_EQ(logits.device(), device);
  const at::Tensor loss = LossSum(c, logits, p.targets);
  loss.backward();

  // Alone: each document of row 0 and row 1's document, from position 0.
  std::vector<at::Tensor> alone = Leaves(state, device);
  double alone_loss = 0;
  auto run_alone = [&](int64_t row, int64_t start, int64_t len) {
    const at::Tensor ids = p.ids[row].narrow(0, start, len).unsqueeze(0);
    const at::Tensor l = FullModelLogits(c, layout, alone, ids);
    EXPECT_LT(RelErr(logits[row].narrow(0, start, len), l[0].detach()), kTolerance)
        << "row " << row << " document at " << start;
    const at::Tensor ls = LossSum(c, l, p.targets[row].narrow(0, start, len).unsqueeze(0));
    ls.backward();
    alone_loss += ls.item<double>();
  };
  for (size_t d = 0; d < p.starts.size(); ++d) run_alone(0, p.starts[d], p.lengths[d]);
  run_alone(1, 0, 16);

  EXPECT_NEAR(loss.item<double>(), alone_loss, kTolerance * alone_loss);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int i = 0; i < static_cast<int>(layout.units[u].params.size()); ++i) {
      EXPECT_LT(RelErr(ParamView(layout.units[u], packed[u].grad(), i),
                       ParamView(layout.units[u], alone[u].grad(), i)),
                kTolerance)
          << layout.units[u].params[i].name;
    }
  }

  // Without positions the later documents see the earlier ones: different logits.
  const at::Tensor unmasked = FullModelLogits(c, layout, packed, p.ids).detach();
  EXPECT_GT(RelErr(unmasked[0].narrow(0, 5, 7), logits[0].narrow(0, 5, 7).detach()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentMask,
                         ::testing::Combine(::testing::Values(ModelFamily::kLlama, ModelFamily::kQwen2,
                                                              ModelFamily::kQwen3),
                                            ::testing::Values(false)));
INSTANTIATE_TEST_SUITE_P(CudaFamilies, DocumentMask,
                         ::testing::Combine(::testing::Values(ModelFamily::kLlama, ModelFamily::kQwen2,
                                                              ModelFamily::kQwen3),
                                            ::testing::Values(true)));

TEST(DocumentLayoutTest, StartsAtZerosAndRowStartsAndGathersTheTables) {
  ModelConfig c = Shape(ModelFamily::kQwen3);
  RopeTables table = MakeRope(c, 4, at::kCPU);
  const at::Tensor positions = at::tensor({3, 4, 0, 1, 2, 0, 0, 1}, at::kLong).view({2, 4});
  const TokenLayout layout = DocumentLayout(c, positions, positions, &table);
  ASSERT_EQ(layout.doc_starts.size(), 2u);
  EXPECT_EQ(layout.doc_starts[0], (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(layout.doc_starts[1], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_GE(table.cos.size(0), 5);  // position 4 needed a longer table
  const RopeTables full = MakeRope(c, 5, at::kCPU);
  EXPECT_TRUE(at::equal(layout.rope.cos[0][0][1], full.cos[4]));
  EXPECT_TRUE(at::equal(layout.rope.sin[1][0][3], full.sin[1]));
}

}  // namespace
}  // namespace slidedp
