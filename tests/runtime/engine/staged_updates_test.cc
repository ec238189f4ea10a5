// Staged updates on the CPU device (policy.staged_updates: the last streamed units'
// AdamW on a "GPU", their state copied in and out chunk by chunk through buffers of
// their own, the same code path as on CUDA): the weights of the run whose CPU updates
// every unit, bit for bit, for fp32, bf16 and int8 moments, with and without clipping,
// gradients landed in fp32 or in the bf16 streamed copy, beside resident units, with 1
// and 2 workers and several chunks a unit; a checkpoint taken with staged units resumes
// bit-exactly; the plan's memory counts their buffers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/measurements.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/plan_shapes.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/step_model.h"
#include "runtime/state/moment_codec.h"
#include "runtime/train_config.h"
#include "tests/runtime/engine/reference_training.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // reference_training.h

void ExpectBitEqual(const Weights& a, const Weights& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, w] : b) EXPECT_TRUE(at::equal(a.at(name), w)) << name;
}

struct Case {
  MomentDtype moments;
  int64_t staged, resident;
  int workers;
  bool clip, bf16_landing;
};

class StagedUpdatesCpu : public ::testing::TestWithParam<Case> {};

TEST_P(StagedUpdatesCpu, EqualTheCpuUpdatesBitForBit) {
  const Case k = GetParam();
  const ModelConfig c = TinyShape(ModelFamily::kQwen2);
  const std::string dir = ::testing::TempDir() + "/staged_" + std::string(NameOf(k.moments)) + "_" +
                          std::to_string(k.staged) + "_" + std::to_string(k.resident) + "_w" +
                          std::to_string(k.workers) + (k.clip ? "_clip" : "") + (k.bf16_landing ? "_bf16" : "");
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 37);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.optimizer.state_dtype = k.moments;
  if (!k.clip) tc.optimizer.max_grad_norm = 0;
  tc.workers = k.workers;
  tc.micro_batch_size = 2;
  tc.grad_accum = 4 / k.workers;
  tc.policy.activations = ActivationPlacement::kDevice;
  tc.policy.resident_units = k.resident;
  tc.policy.chunk_elems = 512;  // several chunks a unit, through the two buffers in turn
  if (k.bf16_landing) {
    tc.compute_dtype = ComputeDtype::kBf16;
    tc.policy.grad_landing = GradLanding::kBf16;
    if (k.workers > 1) tc.policy.grad_route = GradRoute::kReduceScatter;
  }
  TrainConfig cpu = tc;
  tc.policy.staged_updates = k.staged;
  std::vector<StepStats> stats, cpu_stats;
  const Weights staged = RunEngine(tc, c, dir + "/staged", {}, &stats);
  EXPECT_GT((staged.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  ExpectBitEqual(staged, RunEngine(cpu, c, dir + "/cpu", {}, &cpu_stats));
  // The same steps, norms and bytes over the links: the staging moves its own.
  ASSERT_EQ(stats.size(), cpu_stats.size());
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_EQ(stats[i].grad_norm, cpu_stats[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(stats[i].h2d_bytes, cpu_stats[i].h2d_bytes) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, StagedUpdatesCpu,
    ::testing::Values(Case{MomentDtype::kFp32, 1, 0, 1, true, false}, Case{MomentDtype::kFp32, 3, 0, 1, false, false},
                      Case{MomentDtype::kBf16, 2, 1, 1, true, false}, Case{MomentDtype::kInt8, 2, 0, 1, true, false},
                      Case{MomentDtype::kInt8, 99, 2, 1, false, false}, Case{MomentDtype::kInt8, 2, 0, 1, true, true},
                      Case{MomentDtype::kFp32, 2, 1, 2, true, false}, Case{MomentDtype::kInt8, 3, 0, 2, true, true},
                      Case{MomentDtype::kFp32, 2, 99, 1, true, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& k = info.param;
      return std::string(NameOf(k.moments)) + "_staged" + std::to_string(k.staged) + "_resident" +
             std::to_string(k.resident) + "_w" + std::to_string(k.workers) + (k.clip ? "_clip" : "_noclip") +
             (k.bf16_landing ? "_bf16landing" : "");
    });

// A checkpoint of a run with staged units (taken after the updates drain) and its
// resume give the digest of the run without a break.
TEST(StagedUpdates, CheckpointAndResumeAreBitExact) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/staged_resume";
  std::filesystem::remove_all(dir);
  MakeModelDir(c, dir + "/init", 41);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.steps = 6;
  tc.optimizer.state_dtype = MomentDtype::kInt8;
  tc.policy.staged_updates = 2;
  tc.policy.chunk_elems = 256;
  auto whole = Trainer::Create(tc);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int s = 0; s < 6; ++s) ASSERT_TRUE((*whole)->Step().ok());
  TrainConfig first = tc;
  first.checkpoint_dir = dir + "/ckpt";
  auto a = Trainer::Create(first);
  ASSERT_TRUE(a.ok()) << a.status();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*a)->Step().ok());
  ASSERT_TRUE((*a)->SaveCheckpoint().ok());
  a->reset();
  TrainConfig second = first;
  second.resume_from = first.checkpoint_dir;
  auto b = Trainer::Create(second);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->completed_steps(), 3);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*b)->Step().ok());
  EXPECT_EQ((*b)->WeightsDigest(), (*whole)->WeightsDigest());
}

// The last streamed units go to the ranks in turn, the head first; the resident ones
// are skipped; the two buffers of a chunk each (fp32 master and gradient, m and v as
// stored, the streamed copy) count in the plan's memory.
TEST(StagedUpdates, PlacementAndMemory) {
  const std::vector<int64_t> units = {3000, 1000, 1000, 1000, 3000};
  const Residency none;
  Staging s = PlaceStaged(units, none, 2, 1, 2);
  EXPECT_EQ(s.lane, (std::vector<int>{-1, -1, -1, 0, 0}));
  EXPECT_EQ(s.chunk_elems, 3072) << "the largest staged unit, in whole 256-element blocks";
  EXPECT_EQ(s.bytes_per_rank, 2 * (3072 * (8 + 2) + MomentBytes(MomentDtype::kFp32, 3072)));
  s = PlaceStaged(units, PlaceResident(units, 4, 1), 3, 2, 2, MomentDtype::kInt8, 600);
  EXPECT_EQ(s.lane, (std::vector<int>{-1, -1, -1, -1, 0})) << "only the head is left streamed";
  EXPECT_EQ(s.chunk_elems, 768);
  s = PlaceStaged(units, none, 3, 2, 2);
  EXPECT_EQ(s.lane, (std::vector<int>{-1, -1, 0, 1, 0}));
  EXPECT_EQ(PlaceStaged(units, none, 0, 1, 2).bytes_per_rank, 0);

  TrainConfig tc;
  tc.device = DeviceKind::kCuda;
  tc.model = "qwen2.5-7b";
  tc.seq_len = 4096;
  tc.micro_batch_size = 4;
  tc.compute_dtype = ComputeDtype::kBf16;
  tc.optimizer.state_dtype = MomentDtype::kInt8;
  const ModelShape shape = ShapeOf(*PresetConfig("qwen2.5-7b"));
  const JobShape job = JobShapeOf(tc);
  PlanKnobs k = KnobsOf(tc);
  k.policy.kept_blocks = 4;
  k.policy.resident_units = 10;
  const MemoryEstimate without = EstimateMemory(shape, job, k);
  k.policy.staged_updates = 3;
  const MemoryEstimate with = EstimateMemory(shape, job, k);
  EXPECT_EQ(with.staged, 2 * (kStagedChunkElems * 10 + MomentBytes(MomentDtype::kInt8, kStagedChunkElems)));
  EXPECT_EQ(with.total - without.total, with.staged);
  // The prediction names the staged parameters, and the rates' refinement leaves them out
  // of the CPU's (the update thread's busy time does not count them).
  const StepPrediction p = PredictStep(shape, job, k, DefaultRates(shape, job));
  EXPECT_EQ(p.staged_params, shape.unit_params[29] + shape.unit_params[28] + shape.unit_params[27]);
  StepMeasurement m;
  m.update_busy_seconds = 1.0;
  Rates r = DefaultRates(shape, job);
  RefineRates(m, p, shape, /*alpha=*/1.0, r);
  EXPECT_DOUBLE_EQ(r.adamw_params_per_s, static_cast<double>(shape.total_params() - p.resident_params - p.staged_params));
}

TEST(StagedUpdates, ConfigIsChecked) {
  TrainConfig tc = testing::TinyTrainConfig(2);
  tc.policy.staged_updates = -1;
  absl::Status s = ValidateTrainConfig(tc);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("policy.staged_updates"), std::string::npos) << s;
  tc.policy.staged_updates = 2;
  EXPECT_TRUE(ValidateTrainConfig(tc).ok());
}

}  // namespace
}  // namespace slidedp
