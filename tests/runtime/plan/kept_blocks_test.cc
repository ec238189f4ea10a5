// Kept blocks (issue 20, part 2): how many of the last decoder blocks keep their graph
// from forward to backward (KeptBlocks, KeptBlockBytes in memory_estimate.h), what that does
// to the predicted memory and step time, how the policy chooses the count within the
// budget and gives kept blocks up first after an out-of-memory, and the count the
// worker's ActivationPolicy resolves for the H200.
#include <gtest/gtest.h>

#include "tests/runtime/plan/plan_test_shapes.h"

#include <cstdint>

#include "runtime/model/model_config.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // plan_test_shapes.h


ModelShape Qwen3B() { return ShapeOf(*PresetConfig("qwen2.5-3b")); }

JobShape Job(int64_t sequences, bool cuda = true) {
  JobShape j;
  j.sequences = sequences;
  j.seq_len = 4096;
  j.cuda = cuda;
  j.param_bytes = 2;
  return j;
}

PlanKnobs Knobs(int64_t mbs, int64_t accum, int64_t kept) {
  PlanKnobs k;
  k.micro_batch_size = mbs;
  k.grad_accum = accum;
  k.policy.prefetch_depth = 2;
  k.policy.activations = ActivationPlacement::kDevice;
  k.policy.kept_blocks = kept;
  return k;
}

TEST(KeptBlocks, TheJobsCountWinsUpToTheLayersAndAutoKeepsNoneOnTheCpuDevice) {
  const ModelShape s = Qwen3B();
  EXPECT_EQ(KeptBlocks(s, Job(16), Knobs(4, 4, 0), 10 * kGiB), 0);
  EXPECT_EQ(KeptBlocks(s, Job(16), Knobs(4, 4, 5), 10 * kGiB), 5);  // forced, even over the budget
  EXPECT_EQ(KeptBlocks(s, Job(16), Knobs(4, 4, 1000), 0), s.layers);
  EXPECT_EQ(KeptBlocks(s, Job(16, /*cuda=*/false), Knobs(4, 4, -1), 0), 0);
  EXPECT_EQ(KeptBlocks(s, Job(16), Knobs(4, 4, -1), 0), s.layers) << "no limit known: all";
}

TEST(KeptBlocks, EachKeptBlockAddsItsGraphLessTheInputItNoLongerKeepsApart) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  const int64_t tokens = 16 * 4096;
  const int64_t input = tokens * s.hidden * 2;
  const int64_t graph = KeptBlockBytes(s, job, Knobs(4, 4, 0));
  // Per token: 4 x hidden, 3 x (q and kv widths), 2 x FFN in bf16, fp32 statistics.
  EXPECT_EQ(graph, tokens * ((4 * 2048 + 3 * 2048 + 3 * 256 + 2 * 11008) * 2 + (2 + 16) * 4));
  const int64_t none = EstimateMemory(s, job, Knobs(4, 4, 0)).total;
  EXPECT_EQ(EstimateMemory(s, job, Knobs(4, 4, 3)).total - none, 3 * (graph - input));
  // With the inputs in host memory a kept block's graph is all new.
  PlanKnobs host0 = Knobs(4, 4, 0), host3 = Knobs(4, 4, 3);
  host0.policy.activations = host3.policy.activations = ActivationPlacement::kHost;
  EXPECT_EQ(EstimateMemory(s, job, host3).total - EstimateMemory(s, job, host0).total, 3 * graph);
  // A tiled MLP keeps only its input: the FFN terms go.
  PlanKnobs tiled = Knobs(4, 4, 0);
  tiled.policy.mlp_tile_tokens = 1024;
  EXPECT_EQ(graph - KeptBlockBytes(s, job, tiled), tokens * 2 * 11008 * 2);
}

TEST(KeptBlocks, AutoKeepsTheMostThatFitInNineTenthsOfTheMemory) {
  const ModelShape s = Qwen3B();
  for (int64_t sequences : {4, 16, 64}) {
    for (int64_t memory : {24 * kGiB, 48 * kGiB, 96 * kGiB, kH200}) {
      SCOPED_TRACE(::testing::Message() << sequences << " sequences, " << memory / kGiB << " GiB");
      const JobShape job = Job(sequences);
      const int64_t kept = KeptBlocks(s, job, Knobs(4, sequences / 4, -1), memory);
      ASSERT_GE(kept, 0);
      ASSERT_LE(kept, s.layers);
      if (kept > 0) {
        EXPECT_LE(EstimateMemory(s, job, Knobs(4, sequences / 4, kept)).total, memory / 10 * 9);
      }
      if (kept < s.layers) {
        EXPECT_GT(EstimateMemory(s, job, Knobs(4, sequences / 4, kept + 1)).total, memory / 10 * 9);
      }
    }
  }
  // The H200 at the batches of issue 20: all 36 blocks at 4 x 4096, well over half at
  // 16 x 4096 (4.9 GB a block), a few at 64 x 4096.
  EXPECT_EQ(KeptBlocks(s, Job(4), Knobs(4, 1, -1), kH200), 36);
  const int64_t at16 = KeptBlocks(s, Job(16), Knobs(4, 4, -1), kH200);
  EXPECT_GE(at16, 20);
  EXPECT_LE(at16, 28);
  const int64_t at64 = KeptBlocks(s, Job(64), Knobs(4, 16, -1), kH200);
  EXPECT_GE(at64, 2);
  EXPECT_LT(at64, at16);
}

TEST(KeptBlocks, KeepingSavesTheRecomputeInThePrediction) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  Rates r = DefaultRates(s, job);
  r.adamw_params_per_s = 1e12;  // the GPU alone sets the step
  r.h2d_gbps = r.d2h_gbps = r.duplex_gbps = 1e4;
  const double none = PredictStep(s, job, Knobs(4, 4, 0), r).step_seconds;
  const double half = PredictStep(s, job, Knobs(4, 4, 18), r).step_seconds;
  const double all = PredictStep(s, job, Knobs(4, 4, 36), r).step_seconds;
  const double recompute = 16.0 * 4096 * r.recompute_s;  // one block's, for the step's tokens
  EXPECT_NEAR(none - half, 18 * recompute, 0.01 * none);
  EXPECT_NEAR(none - all, 36 * recompute, 0.01 * none);
}

// The H200 call of 2026-12-04 (tests/bench/RESULTS.md, issue 20 part 2), qwen2.5-3b,
// prefetch 2, every block recomputing against the policy's count (before the lean MLP):
// 16 x 4096 3.646 s and 3.351 s with 17 blocks kept; 64 x 4096 13.894 s and 13.633 s
// with 3. The default rates predict these fused-kernel steps about 12% slow (they were
// fitted before the kernels; calibration corrects them at job start), but the gain of
// keeping within 2 points of the measured one.
TEST(KeptBlocks, PredictsTheH200GainOfKeeping) {
  const ModelShape s = Qwen3B();
  struct Run {
    int64_t sequences, accum, kept;
    double recompute_s, kept_s;
  };
  for (const Run& run : {Run{16, 4, 17, 3.646, 3.351}, Run{64, 16, 3, 13.894, 13.633}}) {
    const JobShape job = Job(run.sequences);
    PlanKnobs none = Knobs(4, run.accum, 0), kept = Knobs(4, run.accum, run.kept);
    none.policy.loss_chunk_tokens = kept.policy.loss_chunk_tokens = 4096;  // step_bench's
    const Rates r = DefaultRates(s, job);
    const double predicted = PredictStep(s, job, kept, r).step_seconds / PredictStep(s, job, none, r).step_seconds;
    EXPECT_NEAR(predicted, run.kept_s / run.recompute_s, 0.02) << run.sequences << " x 4096";
  }
}

TEST(KeptBlocks, KeptBlocksAreNeitherOffloadedNorRestored) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  PlanKnobs host0 = Knobs(4, 4, 0), host10 = Knobs(4, 4, 10);
  host0.policy.activations = host10.policy.activations = ActivationPlacement::kHost;
  const Rates r = DefaultRates(s, job);
  const int64_t input = int64_t{16} * 4096 * s.hidden * 2;
  EXPECT_EQ(PredictStep(s, job, host0, r).d2h_bytes - PredictStep(s, job, host10, r).d2h_bytes, 10 * input);
  EXPECT_EQ(PredictStep(s, job, host0, r).h2d_bytes - PredictStep(s, job, host10, r).h2d_bytes, 10 * input);
}

TEST(KeptBlocks, ThePolicyKeepsWhatTheBudgetAllowsAndShrinksKeptBlocksFirst) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  const Rates r = DefaultRates(s, job);
  int64_t previous = -1;
  for (int64_t budget : {24 * kGiB, 48 * kGiB, 96 * kGiB}) {
    absl::StatusOr<PlanChoice> choice = ChoosePlan(s, job, Knobs(4, 4, -1), r, budget);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_LE(choice->prediction.memory.total, budget);
    for (const Candidate& c : choice->candidates) EXPECT_GE(c.knobs.policy.kept_blocks, 0) << "resolved";
    EXPECT_GT(choice->knobs.policy.kept_blocks, previous) << budget / kGiB << " GiB keeps more";
    previous = choice->knobs.policy.kept_blocks;
  }
  // A job that forbids keeping gets none.
  absl::StatusOr<PlanChoice> none = ChoosePlan(s, job, Knobs(4, 4, 0), r, 96 * kGiB);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->knobs.policy.kept_blocks, 0);
  // After an out-of-memory: half the kept blocks, down to none, before anything else.
  PlanKnobs k = Knobs(4, 4, 9);
  for (int64_t want : {4, 2, 1, 0}) {
    std::optional<PlanKnobs> next = Shrink(k);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->policy.kept_blocks, want);
    EXPECT_EQ(next->micro_batch_size, 4);
    k = *next;
  }
  EXPECT_EQ(Shrink(k)->micro_batch_size, 2);
  EXPECT_EQ(DescribeKnobs(Knobs(4, 4, 9)),
            "4 x 4 micro-batches, prefetch 2, activations device, replicate/gather_host, 9 blocks kept");
}

TEST(KeptBlocks, TheWorkerResolvesAutoAgainstTheDevicesMemory) {
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  c.compute_dtype = ComputeDtype::kBf16;
  c.seq_len = 4096;
  c.micro_batch_size = 4;
  c.grad_accum = 4;
  c.policy.prefetch_depth = 2;
  const ModelConfig m = *PresetConfig("qwen2.5-3b");
  const ActivationPlan plan = ChooseActivations(c, m, 2, kH200);
  EXPECT_FALSE(plan.offload_inputs);
  // The same count the model gives for the device's memory less the 1 GiB reserve, beside
  // the resident units chosen with it (resident_units_test.cc).
  auto with_resident = [](int64_t resident) {
    PlanKnobs k = Knobs(4, 4, -1);
    k.policy.resident_units = resident;
    return k;
  };
  EXPECT_EQ(plan.kept_blocks,
            KeptBlocks(ShapeOf(m), Job(16), with_resident(plan.resident_units), MemoryBudget(0, kH200)));
  // Another process holding half the GPU leaves fewer (what this process can allocate).
  const ActivationPlan shared = ChooseActivations(c, m, 2, kH200, kH200 / 2);
  EXPECT_EQ(shared.kept_blocks,
            KeptBlocks(ShapeOf(m), Job(16), with_resident(shared.resident_units), MemoryBudget(0, kH200 / 2)));
  EXPECT_LT(shared.kept_blocks, plan.kept_blocks);
  // With no resident units the count is the model's for the memory alone.
  c.policy.resident_units = 0;
  EXPECT_EQ(ChooseActivations(c, m, 2, kH200).kept_blocks,
            KeptBlocks(ShapeOf(m), Job(16), Knobs(4, 4, -1), MemoryBudget(0, kH200)));
  c.policy.resident_units = -1;
  // A budget caps it; the job's count wins; the CPU device keeps none by itself.
  c.policy.gpu_memory_budget_bytes = 48 * kGiB;
  EXPECT_LT(ChooseActivations(c, m, 2, kH200).kept_blocks, plan.kept_blocks);
  c.policy.kept_blocks = 0;
  EXPECT_EQ(ChooseActivations(c, m, 2, kH200).kept_blocks, 0);
  c.policy.kept_blocks = -1;
  c.device = DeviceKind::kCpu;
  EXPECT_EQ(ChooseActivations(c, m, 4, 0).kept_blocks, 0);
}

// policy.auto off: after a GPU out-of-memory only kept blocks the job left to auto give
// way, by halves; the job's own knobs (and a count it set) never do.
TEST(KeptBlocks, WithoutAutoOnlyKeptBlocksLeftToAutoShrinkAfterAnOutOfMemory) {
  const ModelConfig m = *PresetConfig("qwen2.5-3b");
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  c.seq_len = 4096;
  c.micro_batch_size = 4;
  c.grad_accum = 4;
  absl::StatusOr<PlanManager> plan = UncalibratedPlan(m, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->SetKeptBlocks(9);  // what the workers resolved
  EXPECT_EQ(plan->knobs().policy.kept_blocks, 9);
  const absl::Status oom = absl::ResourceExhaustedError("CUDA out of memory");
  for (int64_t want : {4, 2, 1, 0}) {
    absl::StatusOr<PlanKnobs> next = plan->AfterOutOfMemory(oom, 1);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->policy.kept_blocks, want);
    EXPECT_EQ(next->micro_batch_size, 4) << "the job's own knobs stay";
  }
  EXPECT_EQ(plan->report().oom_retries, 4);
  EXPECT_TRUE(absl::IsResourceExhausted(plan->AfterOutOfMemory(oom, 1).status()));
  // A count the job set is the job's: no retry.
  c.policy.kept_blocks = 9;
  absl::StatusOr<PlanManager> fixed = UncalibratedPlan(m, c);
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(fixed->AfterOutOfMemory(oom, 1).status()));
}

}  // namespace
}  // namespace slidedp
