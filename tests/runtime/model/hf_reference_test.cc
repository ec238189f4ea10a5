// Our model code against Hugging Face transformers: tiny random Llama (llama3 rope
// scaling, attention and MLP biases), Qwen2 (q/k/v biases, tied embeddings, sharded
// files), Qwen3 (q/k norms, head_dim != hidden/heads) and Mistral (sliding_window 4096,
// longer than the batch; skipped until its fixture is made) models saved by
// tests/reference/make_fixtures.py with their logits, loss and every parameter's
// gradient for a fixed batch. We load the directories with our reader, run forward and
// backward with plain LibTorch autograd over our model code, and match within 1e-4
// relative (norm of the difference over norm of the reference), fp32.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/model/full_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/transformer.h"
#include "runtime/state/host_state.h"

namespace slidedp {
namespace {

constexpr double kTolerance = 1e-4;

at::Tensor Read(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsTensorInfo* info = f.Find(name);
  EXPECT_NE(info, nullptr) << name;
  if (info == nullptr) return at::Tensor();
  at::Tensor t = at::empty(info->shape, at::kFloat);
  EXPECT_TRUE(f.ReadAsFloat(name, t.data_ptr<float>(), info->numel).ok()) << name;
  return t;
}

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(1e-30, want.norm().item<double>());
}

class HfReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfReference, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/" + GetParam();
  if (GetParam() == "mistral" && !std::filesystem::exists(dir + "/reference.safetensors")) {
    GTEST_SKIP() << dir << " is not made yet: make_fixtures.py --families mistral on the GPU host";
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  HostState state(*config, at::kFloat, 0, false);
  absl::Status loaded = state.LoadHf(dir);
  ASSERT_TRUE(loaded.ok()) << loaded;
  absl::StatusOr<SafetensorsFile> ref = SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();

  const at::Tensor ids = Read(*ref, "input_ids").to(at::kLong);
  const at::Tensor labels = Read(*ref, "labels").to(at::kLong);
  // Hugging Face shifts inside the loss: position t predicts label t+1.
  at::Tensor targets = at::full_like(labels, kIgnoreIndex);
  targets.narrow(1, 0, labels.size(1) - 1).copy_(labels.narrow(1, 1, labels.size(1) - 1));

  const ModelLayout& layout = state.layout();
  std::vector<at::Tensor> flats;
  for (int u = 0; u < layout.num_units(); ++u) flats.push_back(state.unit(u).master.clone().requires_grad_(true));
  at::Tensor logits = FullModelLogits(*config, layout, flats, ids);
  at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, config->vocab_size}), targets.reshape({-1}),
                                           {}, at::Reduction::Mean, kIgnoreIndex);
  loss.backward();

  EXPECT_LT(RelErr(logits, Read(*ref, "logits")), kTolerance);
  EXPECT_NEAR(loss.item<double>(), Read(*ref, "loss").item<double>(), kTolerance * loss.item<double>());
  int checked = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int i = 0; i < static_cast<int>(layout.units[u].params.size()); ++i) {
      const std::string& name = layout.units[u].params[i].name;
      at::Tensor want = Read(*ref, "grad." + name);
      if (!want.defined()) continue;
      EXPECT_LT(RelErr(ParamView(layout.units[u], flats[u].grad(), i), want), kTolerance) << name;
      ++checked;
    }
  }
  int in_fixture = 0;
  for (const SafetensorsTensorInfo& t : ref->tensors()) in_fixture += t.name.rfind("grad.", 0) == 0;
  EXPECT_EQ(checked, in_fixture);  // every reference gradient has a parameter of ours
}

INSTANTIATE_TEST_SUITE_P(Families, HfReference, ::testing::Values("llama", "qwen2", "qwen3", "mistral"));

}  // namespace
}  // namespace slidedp
