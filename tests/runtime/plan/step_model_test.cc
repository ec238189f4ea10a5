// The step-time model and the plan search on synthetic rates: a PCIe-bound, a
// compute-bound and a CPU-update-bound step each named as such, the critical path with
// its fill (the first unit's update and upload) and drain (the last landing), the
// search against a brute-force enumeration under a memory budget, the OOM shrink order,
// the re-plan hysteresis. The model against the H200 figures of RESULTS.md:
// step_model_h200_test.cc.
#include <gtest/gtest.h>

#include "tests/runtime/plan/plan_test_shapes.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // plan_test_shapes.h

TEST(StepModel, PcieBoundStepIsNamedH2d) {
  Rates r = BalancedRates();
  r.h2d_gbps = 0.5;  // D2H keeps its rate
  const StepPrediction p = PredictStep(Synthetic(), SweepJob(), SweepKnobs(8, 1), r);
  EXPECT_EQ(p.bottleneck, kResH2d);
  EXPECT_GT(p.busy.at(kResH2d), 0.8 * p.step_seconds);
  EXPECT_GT(p.exposed.at(kResH2d), 0.5 * p.step_seconds);
}

TEST(StepModel, ComputeBoundStepIsNamedGpu) {
  Rates r = BalancedRates();
  r.forward_s *= 50;
  r.recompute_s *= 50;
  r.backward_s *= 50;
  const StepPrediction p = PredictStep(Synthetic(), SweepJob(), SweepKnobs(8, 1), r);
  EXPECT_EQ(p.bottleneck, kResGpu);
  EXPECT_GT(p.busy.at(kResGpu), 0.9 * p.step_seconds);
}

TEST(StepModel, CpuUpdateBoundStepIsNamedCpuUpdate) {
  Rates r = BalancedRates();
  r.adamw_params_per_s = 2e7;  // 8 s of updates for 160M parameters
  const StepPrediction p = PredictStep(Synthetic(), SweepJob(), SweepKnobs(8, 1), r);
  EXPECT_EQ(p.bottleneck, kResCpuUpdate);
  EXPECT_NEAR(p.busy.at(kResCpuUpdate), 160e6 / 2e7, 1e-9);
  EXPECT_GT(p.step_seconds, p.busy.at(kResCpuUpdate));
  EXPECT_GT(p.exposed.at(kResCpuUpdate), 0.8 * p.step_seconds);
}

// Issue 22: compact moments move fewer bytes in the update; the model's default rate
// and its host-memory load follow the job's optimizer.state_dtype.
TEST(StepModel, UpdateRateFollowsTheMomentDtype) {
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  EXPECT_EQ(JobShapeOf(c).update_bytes_per_param, 28.0);
  c.optimizer.state_dtype = MomentDtype::kBf16;
  EXPECT_EQ(JobShapeOf(c).update_bytes_per_param, 20.0);
  c.optimizer.state_dtype = MomentDtype::kInt8;
  const JobShape int8 = JobShapeOf(c);
  EXPECT_EQ(int8.update_bytes_per_param, 16.0 + 16.0 / 256);
  c.optimizer.state_dtype = MomentDtype::kFp32;
  const JobShape fp32 = JobShapeOf(c);
  const double ratio = DefaultRates(Synthetic(), int8).adamw_params_per_s / DefaultRates(Synthetic(), fp32).adamw_params_per_s;
  EXPECT_NEAR(ratio, 28.0 / (16.0 + 16.0 / 256), 1e-12);
  Rates r = BalancedRates();
  r.adamw_params_per_s = 2e7;
  JobShape job = SweepJob();
  const double fp32_step = PredictStep(Synthetic(), job, SweepKnobs(8, 1), r).step_seconds;
  r.adamw_params_per_s = 2e7 * ratio;  // what calibration measures with int8 moments
  job.update_bytes_per_param = int8.update_bytes_per_param;
  EXPECT_LT(PredictStep(Synthetic(), job, SweepKnobs(8, 1), r).step_seconds, 0.7 * fp32_step);
}

TEST(StepModel, CriticalPathHasFillAndDrain) {
  const Rates r = BalancedRates();
  const StepPrediction p = PredictStep(Synthetic(), SweepJob(/*clip=*/true), SweepKnobs(8, 1), r);
  ASSERT_GE(p.critical_path.size(), 3u);
  // With clipping every update waits for the last landing: the step begins with the
  // update of the embedding (the first unit) and its upload, and ends with a landing.
  EXPECT_EQ(p.critical_path.front().resource, kResCpuUpdate);
  EXPECT_NE(p.critical_path.front().what.find("update embedding"), std::string::npos) << p.critical_path.front().what;
  const double update_emb = 32e6 / r.adamw_params_per_s;
  const double upload_emb = 32e6 * 2 / (r.h2d_gbps * 1e9);
  EXPECT_GE(p.fill_seconds, update_emb + upload_emb - 1e-9);
  EXPECT_EQ(p.critical_path.back().resource, kResD2h);
  EXPECT_NE(p.critical_path.back().what.find("land embedding"), std::string::npos);
  EXPECT_GE(p.drain_seconds, 32e6 * 2 / (r.duplex_gbps / 2 * 1e9) - 1e-9);
  double total = 0;
  for (const PathSegment& s : p.critical_path) total += s.seconds;
  EXPECT_NEAR(total, p.step_seconds, 1e-9);
}

TEST(StepModel, NoClipOverlapsUpdatesWithBackward) {
  Rates r = BalancedRates();
  r.adamw_params_per_s = 1e9;
  const StepPrediction clip = PredictStep(Synthetic(), SweepJob(true), SweepKnobs(8, 1), r);
  const StepPrediction noclip = PredictStep(Synthetic(), SweepJob(false), SweepKnobs(8, 1), r);
  EXPECT_LT(noclip.step_seconds, clip.step_seconds);
  EXPECT_LT(noclip.critical.count(kResCpuUpdate) ? noclip.critical.at(kResCpuUpdate) : 0.0,
            clip.critical.at(kResCpuUpdate));
}

TEST(StepModel, BytesMatchTheEngine) {
  // Forward fetches every unit, backward the blocks again; gradients land in bf16.
  const ModelShape s = Synthetic();
  const StepPrediction p = PredictStep(s, SweepJob(), SweepKnobs(8, 1), BalancedRates());
  EXPECT_EQ(p.h2d_bytes, (s.total_params() + 8 * 12'000'000) * 2);
  EXPECT_EQ(p.d2h_bytes, s.total_params() * 2);
  PlanKnobs host = SweepKnobs(8, 1);
  host.policy.activations = ActivationPlacement::kHost;
  const StepPrediction q = PredictStep(s, SweepJob(), host, BalancedRates());
  const int64_t act = 8 * 1024 * 1024 * 2;  // one block's input, bf16
  EXPECT_EQ(q.d2h_bytes - p.d2h_bytes, 8 * act);  // every block's input down and back
  EXPECT_EQ(q.h2d_bytes - p.h2d_bytes, 8 * act);
}

TEST(StepModel, MemoryGrowsWithTheKnobs) {
  const ModelShape s = Synthetic();
  PlanKnobs dev = SweepKnobs(8, 1), host = SweepKnobs(8, 1), deep = SweepKnobs(8, 1, 4), small = SweepKnobs(1, 8);
  host.policy.activations = ActivationPlacement::kHost;
  const int64_t base = EstimateMemory(s, SweepJob(), dev).total;
  EXPECT_LT(EstimateMemory(s, SweepJob(), host).total, base);
  EXPECT_EQ(EstimateMemory(s, SweepJob(), deep).total - base, 2 * 32'000'000 * 2);
  EXPECT_LT(EstimateMemory(s, SweepJob(), small).total, base);
}

// ------------------------------------------------------------------ the search

TEST(Policy, ChoosesTheBestFittingCandidateOfABruteForceSweep) {
  const ModelShape s = Synthetic();
  const JobShape job = SweepJob();
  Rates r = BalancedRates();
  r.launch_s = 1e-3;  // many small micro-batches cost launches
  // A budget that rules out the largest plans.
  const int64_t budget = EstimateMemory(s, job, SweepKnobs(4, 2, 2)).total;
  absl::StatusOr<PlanChoice> choice = ChoosePlan(s, job, SweepKnobs(8, 1), r, budget);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_LE(choice->prediction.memory.total, budget);
  int fits = 0, over = 0;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t mbs : {1, 2, 4, 8}) {
    for (int depth = 1; depth <= 4; ++depth) {
      for (const ActivationPlacement act : {ActivationPlacement::kDevice, ActivationPlacement::kHost}) {
        PlanKnobs k = SweepKnobs(mbs, 8 / mbs, depth);
        k.policy.activations = act;
        const StepPrediction p = PredictStep(s, job, k, r);
        if (p.memory.total > budget) {
          ++over;
          continue;
        }
        ++fits;
        best = std::min(best, p.step_seconds);
      }
    }
  }
  EXPECT_GT(over, 0);
  EXPECT_GT(fits, 0);
  EXPECT_EQ(choice->candidates.size(), 32u);
  EXPECT_NEAR(choice->prediction.step_seconds, best, 1e-6 * best);
  EXPECT_EQ(choice->knobs.micro_batch_size * choice->knobs.grad_accum, 8);
  // Deterministic.
  absl::StatusOr<PlanChoice> again = ChoosePlan(s, job, SweepKnobs(8, 1), r, budget);
  EXPECT_EQ(DescribeKnobs(again->knobs), DescribeKnobs(choice->knobs));
}

TEST(Policy, RoutesAreSearchedWithSeveralWorkers) {
  JobShape job = SweepJob();
  job.workers = 2;
  Rates r = BalancedRates();
  r.h2d_gbps = 1;  // PCIe-bound: scatter_allgather moves half the bytes per GPU
  r.duplex_gbps = 2;
  absl::StatusOr<PlanChoice> choice = ChoosePlan(Synthetic(), job, SweepKnobs(4, 1), r, 0);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->candidates.size(), 3u * 4 * 2 * 2 * 3);  // mbs 4,2,1; depth; act; routes
  EXPECT_EQ(choice->knobs.policy.param_route, ParamRoute::kScatterAllGather);
}

TEST(Policy, NothingFitsIsResourceExhausted) {
  absl::StatusOr<PlanChoice> choice = ChoosePlan(Synthetic(), SweepJob(), SweepKnobs(8, 1), BalancedRates(), 1000);
  ASSERT_FALSE(choice.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(choice.status())) << choice.status();
}

TEST(Policy, ShrinkHalvesMicroBatchesThenOffloadsThenPrefetchesLess) {
  PlanKnobs k = SweepKnobs(4, 1, 2);
  std::vector<std::string> steps;
  while (std::optional<PlanKnobs> next = Shrink(k)) {
    EXPECT_EQ(next->micro_batch_size * next->grad_accum, 4);
    EXPECT_LT(EstimateMemory(Synthetic(), SweepJob(), *next).total, EstimateMemory(Synthetic(), SweepJob(), k).total + 1);
    k = *next;
    steps.push_back(DescribeKnobs(k));
  }
  ASSERT_GE(steps.size(), 4u);
  EXPECT_EQ(steps[0], "2 x 2 micro-batches, prefetch 2, activations device, replicate/gather_host");
  EXPECT_EQ(steps[1], "1 x 4 micro-batches, prefetch 2, activations device, replicate/gather_host");
  EXPECT_EQ(steps[2], "1 x 4 micro-batches, prefetch 2, activations host, replicate/gather_host");
  EXPECT_EQ(steps[3], "1 x 4 micro-batches, prefetch 1, activations host, replicate/gather_host");
  EXPECT_EQ(k.policy.loss_chunk_tokens, 64);
}

TEST(Policy, MemoryBudgetTakesTheSmallerOfJobAndFreeMemory) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(MemoryBudget(0, 0), 0);
  EXPECT_EQ(MemoryBudget(10 * gib, 0), 10 * gib);
  EXPECT_EQ(MemoryBudget(0, 80 * gib), 79 * gib);
  EXPECT_EQ(MemoryBudget(100 * gib, 80 * gib), 79 * gib);
  EXPECT_EQ(MemoryBudget(10 * gib, 80 * gib), 10 * gib);
}

TEST(Policy, DriftMonitorReplansOnceAndRearmsAfterSettling) {
  DriftMonitor m(/*threshold=*/0.15, /*patience=*/3, /*smoothing=*/0.0);
  EXPECT_FALSE(m.Observe(1.0, 1.05));
  EXPECT_FALSE(m.Observe(1.0, 1.10));
  // Over the threshold: only after three steps in a row.
  EXPECT_FALSE(m.Observe(1.0, 1.3));
  EXPECT_FALSE(m.Observe(1.0, 1.3));
  EXPECT_TRUE(m.Observe(1.0, 1.3));
  // Still over: no second trigger (hysteresis) ...
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(m.Observe(1.0, 1.3));
  // ... until the drift fell under half the threshold.
  EXPECT_FALSE(m.Observe(1.0, 1.10));  // under the threshold, not under half of it
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(m.Observe(1.0, 1.3));
  EXPECT_FALSE(m.Observe(1.0, 1.02));  // re-armed
  EXPECT_FALSE(m.Observe(1.0, 0.7));
  EXPECT_FALSE(m.Observe(1.0, 0.7));
  EXPECT_TRUE(m.Observe(1.0, 0.7));  // faster than predicted drifts too
}

TEST(Policy, DriftMonitorSmoothsASingleSlowStep) {
  DriftMonitor m(0.15, 1, 0.5);
  EXPECT_FALSE(m.Observe(1.0, 1.0));
  EXPECT_FALSE(m.Observe(1.0, 1.25));  // smoothed: 12.5%
  EXPECT_TRUE(m.Observe(1.0, 1.25));   // 18.75%
}

}  // namespace
}  // namespace slidedp
