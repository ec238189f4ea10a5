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

TEST(KeptBlocks, EachKeptBlockAddsOneMicroBatchsGraphItsSlotAndAccumulatorLessTheInputsItNoLongerKeepsApart) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  const int64_t tokens = 16 * 4096, micro = 4 * 4096;
  const int64_t input = tokens * s.hidden * 2;  // every micro-batch's
  const int64_t block = s.unit_params[1];
  const int64_t bytes = KeptBlockBytes(s, job, Knobs(4, 4, 0));
  // Per token of one micro-batch: 4 x hidden, 2 x (q and kv widths: after RoPE, v and
  // attention's output), 2 x FFN in bf16, fp32 statistics; the block's bf16 slot and
  // fp32 accumulator.
  const int64_t graph = micro * ((4 * 2048 + 2 * 2048 + 2 * 256 + 2 * 11008) * 2 + (2 + 16) * 4);
  EXPECT_EQ(bytes, graph + block * (2 + 4));
  // Normed q and k (Qwen3) keep the norms' inputs too.
  ModelShape normed = s;
  normed.qk_norm = true;
  EXPECT_EQ(KeptBlockBytes(normed, job, Knobs(4, 4, 0)) - bytes, micro * (2048 + 256) * 2);
  // Micro-batch-major: more micro-batches of the same size keep no more.
  EXPECT_EQ(KeptBlockBytes(s, Job(64), Knobs(4, 16, 0)), bytes);
  const int64_t none = EstimateMemory(s, job, Knobs(4, 4, 0)).total;
  EXPECT_EQ(EstimateMemory(s, job, Knobs(4, 4, 3)).total - none, 3 * (bytes - input));
  // With the inputs in host memory a kept block's bytes are all new.
  PlanKnobs host0 = Knobs(4, 4, 0), host3 = Knobs(4, 4, 3);
  host0.policy.activations = host3.policy.activations = ActivationPlacement::kHost;
  EXPECT_EQ(EstimateMemory(s, job, host3).total - EstimateMemory(s, job, host0).total, 3 * bytes);
  // A tiled MLP keeps only its input: the FFN terms go.
  PlanKnobs tiled = Knobs(4, 4, 0);
  tiled.policy.mlp_tile_tokens = 1024;
  EXPECT_EQ(bytes - KeptBlockBytes(s, job, tiled), micro * 2 * 11008 * 2);
}

// AutoCountsBytes: nine tenths of the memory, or all but 6 GiB on the larger cards.
TEST(KeptBlocks, AutoKeepsTheMostThatFitInTheAutoCountsBytes) {
  const ModelShape s = Qwen3B();
  for (int64_t sequences : {4, 16, 64}) {
    for (int64_t memory : {24 * kGiB, 48 * kGiB, 96 * kGiB, kH200}) {
      SCOPED_TRACE(::testing::Message() << sequences << " sequences, " << memory / kGiB << " GiB");
      const JobShape job = Job(sequences);
      const int64_t kept = KeptBlocks(s, job, Knobs(4, sequences / 4, -1), memory);
      ASSERT_GE(kept, 0);
      ASSERT_LE(kept, s.layers);
      if (kept > 0) {
        EXPECT_LE(EstimateMemory(s, job, Knobs(4, sequences / 4, kept)).total, AutoCountsBytes(memory));
      }
      if (kept < s.layers) {
        EXPECT_GT(EstimateMemory(s, job, Knobs(4, sequences / 4, kept + 1)).total, AutoCountsBytes(memory));
      }
    }
  }
  // The H200 at the batches of issue 20: all 36 blocks at 4, 16 and 64 x 4096 (micro-
  // batches of 4 x 4096: 1.6 GB a kept block, less the 0.25-1 GB of inputs it no longer
  // keeps); the qwen2.5-7b shape at 32 x 4096 (micro-batches of 4 x 4096: 3.5 GB a block
  // less 0.9 GB) all of its 28, on an 80 GB GPU about half.
  EXPECT_EQ(KeptBlocks(s, Job(4), Knobs(4, 1, -1), kH200), 36);
  EXPECT_EQ(KeptBlocks(s, Job(16), Knobs(4, 4, -1), kH200), 36);
  EXPECT_EQ(KeptBlocks(s, Job(64), Knobs(4, 16, -1), kH200), 36);
  const ModelShape s7 = ShapeOf(*PresetConfig("qwen2.5-7b"));
  EXPECT_EQ(KeptBlocks(s7, Job(32), Knobs(4, 8, -1), kH200), 28);
  const int64_t at80 = KeptBlocks(s7, Job(32), Knobs(4, 8, -1), 80 * kGiB);
  EXPECT_GE(at80, 8);
  EXPECT_LE(at80, 20);
}

// A kept block that is also resident accumulates into its resident gradient: no fp32
// accumulator of its own (4 bytes a parameter), 0.9 GB a block of the 7.62B; its slot
// holds its parameters cast from the resident master. 18 resident units (the embedding
// and blocks 1-17) and the last 18 of 28 blocks kept share 7 blocks; the auto count
// spends what they free on more kept blocks.
TEST(KeptBlocks, AKeptBlockThatIsAlsoResidentTakesNoAccumulatorOfItsOwn) {
  const ModelShape s7 = ShapeOf(*PresetConfig("qwen2.5-7b"));
  const int64_t own = s7.unit_params[1] * 4;
  JobShape job = Job(4);
  job.moments = MomentDtype::kInt8;
  auto knobs = [](int64_t kept, int64_t resident) {
    PlanKnobs k = Knobs(4, 1, kept);
    k.policy.resident_units = resident;
    return k;
  };
  EXPECT_EQ(KeptResidentSaving(s7, job, knobs(18, 18), 18), 7 * own);
  EXPECT_EQ(KeptResidentSaving(s7, job, knobs(10, 18), 10), 0);  // blocks 19-28 kept
  EXPECT_EQ(KeptResidentSaving(s7, job, knobs(28, 29), 28), 28 * own);
  EXPECT_EQ(KeptResidentSaving(s7, job, knobs(28, 29), int64_t{1} << 62), 28 * own);  // more than the blocks
  EXPECT_EQ(KeptResidentSaving(s7, job, knobs(18, 0), 18), 0);
  const int64_t resident_bytes = ResidencyOf(s7, job, knobs(18, 18)).max_bytes();
  EXPECT_EQ(EstimateMemory(s7, job, knobs(18, 18)).total,
            EstimateMemory(s7, job, knobs(18, 0)).total + resident_bytes - 7 * own);
  // Two GPUs: each owns some of the shared blocks; the rank owning fewest sets it.
  JobShape two = job;
  two.workers = 2;
  const int64_t saving2 = KeptResidentSaving(s7, two, knobs(18, 18), 18);
  EXPECT_GT(saving2, 0);
  EXPECT_LE(saving2, 7 * own / 2);
  // Auto on an H200 beside 18 resident units: more than the blocks' full bytes allow,
  // and the most that fit.
  const int64_t kept = KeptBlocks(s7, job, knobs(-1, 18), kH200);
  EXPECT_LE(EstimateMemory(s7, job, knobs(kept, 18)).total, AutoCountsBytes(kH200));
  EXPECT_GT(EstimateMemory(s7, job, knobs(kept + 1, 18)).total, AutoCountsBytes(kH200));
  EXPECT_GT(EstimateMemory(s7, job, knobs(kept, 18)).total + KeptResidentSaving(s7, job, knobs(kept, 18), kept),
            AutoCountsBytes(kH200));
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
// prefetch 2, 64 x 4096: every block recomputing 13.894 s, 3 blocks kept (layer-major
// then) 13.633 s. The default rates predict these fused-kernel steps about 12% slow
// (they were fitted before the kernels; calibration corrects them at job start), but the
// gain of keeping within 2 points of the measured one. Running the 3 kept blocks
// micro-batch-major changes neither their compute nor what waits: the first micro-batch
// reaches them after 33 blocks of 16 micro-batches, long after the CPU update. (The same
// call's 16 x 4096 pair, 17 kept, no longer describes the engine: there the first
// micro-batch now reaches the kept blocks before the update has done them, the next
// test; the `keptfix` step of h200_session.sh measures both batches again.)
TEST(KeptBlocks, PredictsTheH200GainOfKeeping) {
  const ModelShape s = Qwen3B();
  struct Run {
    int64_t sequences, accum, kept;
    double recompute_s, kept_s;
  };
  for (const Run& run : {Run{64, 16, 3, 13.894, 13.633}}) {
    const JobShape job = Job(run.sequences);
    PlanKnobs none = Knobs(4, run.accum, 0), kept = Knobs(4, run.accum, run.kept);
    none.policy.loss_chunk_tokens = kept.policy.loss_chunk_tokens = 4096;  // step_bench's
    const Rates r = DefaultRates(s, job);
    const double predicted = PredictStep(s, job, kept, r).step_seconds / PredictStep(s, job, none, r).step_seconds;
    EXPECT_NEAR(predicted, run.kept_s / run.recompute_s, 0.02) << run.sequences << " x 4096";
  }
}

// The H200 call of 2026-12-06 (tests/bench/RESULTS.md, `ab64` and `ab7b32`): this engine
// with its policy's plan against the layer-major engine of dffcd8f with its plan (3 kept,
// 4 resident), prefetch 2, micro-batches of 4 x 4096. qwen2.5-3b at 64 x 4096: 36 kept and
// 33 resident 10.027 s against 11.953 s; qwen2.5-7b at 32 x 4096: 13 kept and 8 resident
// 11.497 s against 12.187 s (one step each side). The reference's 3 kept blocks are
// reached after the recomputing blocks' forward of every micro-batch, as in this engine
// (previous test), so this engine's prediction for that plan stands for the reference's.
// The default rates put both steps too slow (fitted before the fused kernels), the ratio
// within 2 points of the measured one.
TEST(KeptBlocks, PredictsTheH200GainOfMicroBatchMajorKeeping) {
  struct Run {
    const char* model;
    int64_t sequences, accum, kept, resident;
    double plan_s, reference_s;
  };
  for (const Run& run : {Run{"qwen2.5-3b", 64, 16, 36, 33, 10.027, 11.953},
                         Run{"qwen2.5-7b", 32, 8, 13, 8, 11.497, 12.187}}) {
    const ModelShape s = ShapeOf(*PresetConfig(run.model));
    const JobShape job = Job(run.sequences);
    PlanKnobs plan = Knobs(4, run.accum, run.kept), reference = Knobs(4, run.accum, 3);
    plan.policy.resident_units = run.resident;
    reference.policy.resident_units = 4;
    plan.policy.loss_chunk_tokens = reference.policy.loss_chunk_tokens = 4096;  // step_bench's
    const Rates r = DefaultRates(s, job);
    const double predicted =
        PredictStep(s, job, plan, r).step_seconds / PredictStep(s, job, reference, r).step_seconds;
    EXPECT_NEAR(predicted, run.plan_s / run.reference_s, 0.02) << run.model;
  }
}

// Kept blocks run micro-batch-major: the first micro-batch reaches them soon after the
// last recomputing block's forward and needs their weights, which with clipping the CPU
// update of the previous step gives in forward order after the last landing. At 16 x
// 4096 (the rates of 2026-12-03, whose CPU update was 30% slower than today's default)
// keeping 17 blocks exposes more of that update than keeping none; units resident on
// the GPU (updated there) take it off the CPU and the gain returns.
TEST(KeptBlocks, MicroBatchMajorKeptBlocksExposeTheUpdateAndResidentUnitsHideIt) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  const Rates r = RatesOf20261203(s, job);
  auto predict = [&](int64_t resident, int64_t kept) {
    PlanKnobs k = Knobs(4, 4, kept);
    k.policy.resident_units = resident;
    return PredictStep(s, job, k, r);
  };
  auto exposed = [](const StepPrediction& p) {
    auto it = p.exposed.find(kResCpuUpdate);
    return it == p.exposed.end() ? 0.0 : it->second;
  };
  EXPECT_GT(exposed(predict(0, 17)), exposed(predict(0, 0)) + 0.15);
  EXPECT_GT(exposed(predict(0, 36)), exposed(predict(0, 17)) + 0.15);
  EXPECT_LT(exposed(predict(20, 17)), 0.01);
  EXPECT_LT(predict(20, 36).step_seconds, 0.9 * predict(20, 0).step_seconds);
}

TEST(KeptBlocks, KeptBlocksAreNeitherOffloadedNorRestored) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16);
  PlanKnobs host0 = Knobs(4, 4, 0), host10 = Knobs(4, 4, 10);
  host0.policy.activations = host10.policy.activations = ActivationPlacement::kHost;
  const Rates r = DefaultRates(s, job);
  const int64_t input = int64_t{16} * 4096 * s.hidden * 2;
  EXPECT_EQ(PredictStep(s, job, host0, r).d2h_bytes - PredictStep(s, job, host10, r).d2h_bytes, 10 * input);
  // Nor fetched twice: their weights stay in their slots from forward to backward.
  const int64_t block = s.unit_params[1] * 2;
  EXPECT_EQ(PredictStep(s, job, host0, r).h2d_bytes - PredictStep(s, job, host10, r).h2d_bytes,
            10 * (input + block));
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
