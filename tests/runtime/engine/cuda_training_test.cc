// The CUDA device against plain PyTorch: 5 training steps of a small Qwen2 model on one
// GPU must match PyTorch's bf16-autocast training with fp32 master weights (fixture made
// by tests/reference/make_gpu_training_fixture.py on the H200 host, transformers 5.17).
// Skipped where there is no GPU; the same fixture also runs on the CPU device in fp32 (below),
// and on W = 2 and 4 GPUs with every pair of routes against W = 1 (below; skipped where the
// machine has fewer GPUs).
//
// Tolerance, stated in units of what bf16 itself changes: the fixture also holds the
// same 5 steps run entirely in fp32. bf16 autocast moves PyTorch's weights away from the
// fp32 run by D = ||W_bf16 - W_fp32||. Our engine computes in bf16 too (with bf16
// weights throughout, where autocast keeps norms and softmax in fp32), so it may differ
// from PyTorch's bf16 run by the same order: we require ||W_ours - W_bf16|| <= 2 D over
// the whole model, and per-step losses within 0.5% of PyTorch's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/trainer.h"
#include "runtime/model/safetensors.h"

namespace slidedp {
namespace {

const std::string kDir = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/gpu_training";

at::Tensor Read(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsTensorInfo* info = f.Find(name);
  if (info == nullptr) return at::Tensor();
  at::Tensor t = at::empty({info->numel}, at::kFloat);
  EXPECT_TRUE(f.ReadAsFloat(name, t.data_ptr<float>(), info->numel).ok()) << name;
  return t;
}

// `variant` is the gradient landing ("bf16" or "fp32"), optionally followed by
// "+host_activations" (layer inputs offloaded to pinned host memory between forward and
// backward), "+prefetch2" (two units fetched ahead of compute) and "+mlp_tiles" (the MLP
// in tiles of a third of the sequence plus one, recomputed tile by tile in backward).
TrainConfig FixtureConfig(const nlohmann::json& s, const std::string& variant) {
  TrainConfig c;
  c.model = kDir + "/model";
  c.data.format = DataFormat::kTokens;
  c.data.path = kDir + "/tokens.bin";
  c.data.token_dtype = TokenDtype::kUint16;
  c.data.shuffle = false;
  c.seq_len = s["seq_len"];
  c.micro_batch_size = 2;
  c.grad_accum = s["rows_per_step"].get<int64_t>() / 2;  // fp32 accumulation over 2 micro-batches
  c.device = DeviceKind::kCuda;
  c.steps = s["steps"];
  c.optimizer.lr = s["lr"];
  c.optimizer.schedule = LrScheduleKind::kConstant;
  c.optimizer.warmup_steps = 0;
  c.optimizer.beta1 = s["beta1"];
  c.optimizer.beta2 = s["beta2"];
  c.optimizer.eps = s["eps"];
  c.optimizer.weight_decay = s["weight_decay"];
  c.optimizer.max_grad_norm = s["max_grad_norm"];
  c.policy.loss_chunk_tokens = 64;  // several loss chunks per micro-batch
  c.policy.grad_landing = *EnumFromName<GradLanding>(variant.substr(0, variant.find('+')));
  if (variant.find("+host_activations") != std::string::npos) c.policy.activations = ActivationPlacement::kHost;
  if (variant.find("+prefetch2") != std::string::npos) c.policy.prefetch_depth = 2;
  if (variant.find("+mlp_tiles") != std::string::npos) c.policy.mlp_tile_tokens = c.seq_len / 3 + 1;
  // Every block kept (auto on the GPU: micro-batch-major with the head) unless the
  // variant says how many ("+kept1": the last one; the others recompute).
  if (const size_t k = variant.find("+kept"); k != std::string::npos) {
    c.policy.kept_blocks = std::stoll(variant.substr(k + 5, variant.find('+', k + 1) - k - 5));
  }
  // Streamed units unless the variant asks for units resident on the GPU (issue 21):
  // "+resident" all of them, "+resident2" the first two.
  c.policy.resident_units = 0;
  if (const size_t r = variant.find("+resident"); r != std::string::npos) {
    const std::string count = variant.substr(r + 9, variant.find('+', r + 1) - r - 9);
    c.policy.resident_units = count.empty() ? int64_t{1} << 20 : std::stoll(count);
  }
  // Streamed units whose update the GPU runs, their state staged through it
  // ("+staged2": the last two), in chunks of 4096 (several a unit).
  if (const size_t st = variant.find("+staged"); st != std::string::npos) {
    c.policy.staged_updates = std::stoll(variant.substr(st + 7, variant.find('+', st + 1) - st - 7));
    c.policy.chunk_elems = 4096;
  }
  return c;
}

// The fixture's steps with `c`: every step's loss and gradient norm, and the weights
// exported to `out` and read back (the trainer's own export, as users get it).
struct FixtureRun {
  std::vector<double> losses, norms;
  std::map<std::string, at::Tensor> weights;
};

FixtureRun RunFixture(const TrainConfig& c, const std::string& out) {
  FixtureRun r;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  for (int64_t k = 0; k < c.steps; ++k) {
    absl::StatusOr<StepStats> s = (*t)->Step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return r;
    r.losses.push_back(s->loss);
    r.norms.push_back(s->grad_norm);
  }
  std::filesystem::remove_all(out);
  EXPECT_TRUE((*t)->ExportHf(out).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out + "/model.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return r;
  for (const SafetensorsTensorInfo& info : f->tensors()) r.weights[info.name] = Read(*f, info.name);
  return r;
}

class CudaTrainingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTrainingTest, FiveStepsMatchPyTorchBf16Autocast) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  std::ifstream sf(kDir + "/settings.json");
  ASSERT_TRUE(sf.good()) << kDir;
  const nlohmann::json settings = nlohmann::json::parse(sf);
  const TrainConfig c = FixtureConfig(settings, GetParam());
  std::string name = GetParam();
  std::replace(name.begin(), name.end(), '+', '_');
  const FixtureRun run = RunFixture(c, ::testing::TempDir() + "/cuda_training_" + name);
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(c.steps));
  absl::StatusOr<SafetensorsFile> ref = SafetensorsFile::Open(kDir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const at::Tensor ref_loss = Read(*ref, "bf16.loss");
  const at::Tensor ref_norm = Read(*ref, "bf16.grad_norm");
  for (int64_t k = 0; k < c.steps; ++k) {
    const double want = ref_loss[k].item<double>();
    EXPECT_NEAR(run.losses[k], want, 5e-3 * want) << "step " << k + 1;
    EXPECT_NEAR(run.norms[k], ref_norm[k].item<double>(), 0.02 * ref_norm[k].item<double>()) << "step " << k + 1;
  }
  absl::StatusOr<SafetensorsFile> init = SafetensorsFile::Open(kDir + "/model/model.safetensors");
  ASSERT_TRUE(init.ok()) << init.status();
  double ours_vs_bf16 = 0, fp32_vs_bf16 = 0, update = 0;
  int compared = 0;
  for (const auto& [wname, mine] : run.weights) {
    const at::Tensor b = Read(*ref, "bf16." + wname);
    const at::Tensor f = Read(*ref, "fp32." + wname);
    const at::Tensor w0 = Read(*init, wname);
    if (!b.defined() || !f.defined() || !w0.defined()) continue;  // e.g. a tied lm_head
    ++compared;
    ours_vs_bf16 += (mine - b).square().sum().item<double>();
    fp32_vs_bf16 += (f - b).square().sum().item<double>();
    update += (b - w0).square().sum().item<double>();
  }
  ASSERT_GT(compared, 5);
  const double d_ours = std::sqrt(ours_vs_bf16), d_bf16 = std::sqrt(fp32_vs_bf16), moved = std::sqrt(update);
  std::printf("weights: ||ours - torch_bf16|| = %.4g, ||torch_fp32 - torch_bf16|| = %.4g, ||torch_bf16 - init|| = %.4g\n",
              d_ours, d_bf16, moved);
  EXPECT_GT(moved, 10 * d_bf16) << "the fixture's steps must move the weights well beyond bf16 noise";
  EXPECT_LE(d_ours, 2.0 * d_bf16);
}

INSTANTIATE_TEST_SUITE_P(GradLanding, CudaTrainingTest,
                         ::testing::Values("bf16", "fp32", "bf16+host_activations+prefetch2+mlp_tiles",
                                           "bf16+resident", "fp32+resident2+prefetch2", "bf16+kept1+prefetch2",
                                           "bf16+staged3+prefetch2", "fp32+resident1+staged2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '+') ch = '_';
                           return n;
                         });

// The same fixture on the CPU device in fp32 (here, in CI): against PyTorch's fp32 run,
// which differs from ours only in summation order. Required: losses within 1e-4 relative,
// and weights 100 times closer to PyTorch's fp32 run than bf16 autocast moves them
// (measured: 3.7e-5 against 0.050).
TEST(CpuTrainingTest, FiveStepsMatchPyTorchFp32) {
  std::ifstream sf(kDir + "/settings.json");
  ASSERT_TRUE(sf.good()) << kDir;
  const nlohmann::json settings = nlohmann::json::parse(sf);
  TrainConfig c = FixtureConfig(settings, "fp32");
  c.device = DeviceKind::kCpu;
  c.compute_dtype = ComputeDtype::kFp32;
  const FixtureRun run = RunFixture(c, ::testing::TempDir() + "/cpu_training_fp32");
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(c.steps));
  absl::StatusOr<SafetensorsFile> ref = SafetensorsFile::Open(kDir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const at::Tensor ref_loss = Read(*ref, "fp32.loss");
  const at::Tensor ref_norm = Read(*ref, "fp32.grad_norm");
  for (int64_t k = 0; k < c.steps; ++k) {
    const double want = ref_loss[k].item<double>();
    EXPECT_NEAR(run.losses[k], want, 1e-4 * want) << "step " << k + 1;
    EXPECT_NEAR(run.norms[k], ref_norm[k].item<double>(), 1e-3 * ref_norm[k].item<double>()) << "step " << k + 1;
  }
  double ours_vs_fp32 = 0, fp32_vs_bf16 = 0;
  int compared = 0;
  for (const auto& [name, mine] : run.weights) {
    const at::Tensor b = Read(*ref, "bf16." + name);
    const at::Tensor f = Read(*ref, "fp32." + name);
    if (!b.defined() || !f.defined()) continue;
    ++compared;
    ours_vs_fp32 += (mine - f).square().sum().item<double>();
    fp32_vs_bf16 += (f - b).square().sum().item<double>();
  }
  ASSERT_GT(compared, 5);
  std::printf("weights: ||ours_fp32 - torch_fp32|| = %.4g, ||torch_fp32 - torch_bf16|| = %.4g\n",
              std::sqrt(ours_vs_fp32), std::sqrt(fp32_vs_bf16));
  EXPECT_LE(std::sqrt(ours_vs_fp32), 0.01 * std::sqrt(fp32_vs_bf16));
}

// Data parallel on W GPUs (issue "Data parallel across 2 to 4 H200 GPUs"): the fixture's
// 5 steps with W workers and the same global batch (4 sequences: W = 2 runs 2 a worker,
// W = 4 one), for each parameter route x gradient route, against W = 1 with replicate /
// gather_host. Tolerance in the fixture's bf16 unit D (above): the weights within D of
// the one-GPU run (which is itself within 2 D of PyTorch's bf16 run), every step's loss
// within 0.5% and gradient norm within 2%.
// `resident`: units of the W-GPU run whose state lives on the GPUs (issue 21), spread
// over them; the one-GPU run streams every unit.
void ExpectWGpusEqualOne(int W, const std::string& param_route, const std::string& grad_route, int64_t resident) {
  if (!at::hasCUDA() || static_cast<int>(at::getNumGPUs()) < W) {
    GTEST_SKIP() << "needs " << W << " GPUs; this machine has " << (at::hasCUDA() ? at::getNumGPUs() : 0);
  }
  std::ifstream sf(kDir + "/settings.json");
  ASSERT_TRUE(sf.good()) << kDir;
  const nlohmann::json settings = nlohmann::json::parse(sf);
  // Gradients land in bf16 where the devices reduce, in fp32 where the host sums.
  const TrainConfig base = FixtureConfig(settings, "auto");
  const int64_t rows = settings["rows_per_step"].get<int64_t>();
  ASSERT_EQ(rows % W, 0);
  TrainConfig one = base;
  one.workers = 1;
  TrainConfig many = base;
  many.workers = W;
  many.micro_batch_size = 1;
  many.grad_accum = rows / W;
  many.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  many.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  many.policy.resident_units = resident;
  const std::string tag = std::to_string(W) + "_" + param_route + "_" + grad_route + "_" + std::to_string(resident);
  const FixtureRun a = RunFixture(one, ::testing::TempDir() + "/multi_gpu_w1_" + tag);
  const FixtureRun b = RunFixture(many, ::testing::TempDir() + "/multi_gpu_" + tag);
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(base.steps));
  ASSERT_EQ(b.losses.size(), static_cast<size_t>(base.steps));
  for (int64_t k = 0; k < base.steps; ++k) {
    EXPECT_NEAR(b.losses[k], a.losses[k], 5e-3 * a.losses[k]) << "step " << k + 1;
    EXPECT_NEAR(b.norms[k], a.norms[k], 0.02 * a.norms[k]) << "step " << k + 1;
  }
  absl::StatusOr<SafetensorsFile> ref = SafetensorsFile::Open(kDir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  double many_vs_one = 0, fp32_vs_bf16 = 0;
  int compared = 0;
  for (const auto& [name, w1] : a.weights) {
    const at::Tensor bf = Read(*ref, "bf16." + name), f = Read(*ref, "fp32." + name);
    if (!bf.defined() || !f.defined() || b.weights.count(name) == 0) continue;
    ++compared;
    many_vs_one += (b.weights.at(name) - w1).square().sum().item<double>();
    fp32_vs_bf16 += (f - bf).square().sum().item<double>();
  }
  ASSERT_GT(compared, 5);
  std::printf("W = %d, %s / %s: ||W-GPU - one-GPU|| = %.4g, D = %.4g\n", W, param_route.c_str(), grad_route.c_str(),
              std::sqrt(many_vs_one), std::sqrt(fp32_vs_bf16));
  EXPECT_LE(std::sqrt(many_vs_one), std::sqrt(fp32_vs_bf16));
}

class CudaMultiGpu : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(CudaMultiGpu, FiveStepsOnWGpusEqualOneGpu) {
  const auto [W, param_route, grad_route] = GetParam();
  ExpectWGpusEqualOne(W, param_route, grad_route, /*resident=*/0);
}

// The same with 3 units resident on the GPUs (broadcast from their owner, gradients
// reduced to it, updated there) against one GPU streaming every unit.
TEST_P(CudaMultiGpu, FiveStepsWithResidentUnitsEqualOneStreamingGpu) {
  const auto [W, param_route, grad_route] = GetParam();
  ExpectWGpusEqualOne(W, param_route, grad_route, /*resident=*/3);
}

INSTANTIATE_TEST_SUITE_P(
    Routes, CudaMultiGpu,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Values("replicate", "scatter_allgather"),
                       ::testing::Values("gather_host", "reduce_scatter", "reduce_one")),
    [](const ::testing::TestParamInfo<std::tuple<int, std::string, std::string>>& info) {
      return "W" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) + "_" +
             std::get<2>(info.param);
    });

}  // namespace
}  // namespace slidedp
