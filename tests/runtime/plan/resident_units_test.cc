// Resident units (issue 21): the first units' training state on a GPU instead of host
// memory. Their placement over the workers (residency.h), what they change in the
// replayed step (no upload, no landing, a GPU update instead of the CPU's, with several
// workers a broadcast and a reduce on the collective), their GPU memory, how many the
// policy makes resident when left to auto (ResidentUnits, weighed against kept blocks),
// the OOM shrink order and the plan manager's and the worker's counts.
#include <gtest/gtest.h>

#include "tests/runtime/plan/plan_test_shapes.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>

#include "runtime/model/model_config.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/measurements.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/step_model.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // plan_test_shapes.h



ModelShape Qwen3B() { return ShapeOf(*PresetConfig("qwen2.5-3b")); }

JobShape Job(int64_t sequences, int64_t seq_len, int workers = 1, bool cuda = true) {
  JobShape j;
  j.sequences = sequences;
  j.seq_len = seq_len;
  j.workers = workers;
  j.cuda = cuda;
  j.param_bytes = 2;
  return j;
}

PlanKnobs Knobs(int64_t mbs, int64_t accum, int64_t resident, int64_t kept = 0) {
  PlanKnobs k;
  k.micro_batch_size = mbs;
  k.grad_accum = accum;
  k.policy.prefetch_depth = 2;
  k.policy.activations = ActivationPlacement::kDevice;
  k.policy.kept_blocks = kept;
  k.policy.resident_units = resident;
  return k;
}

int64_t FirstParams(const ModelShape& s, int n) {
  return std::accumulate(s.unit_params.begin(), s.unit_params.begin() + n, int64_t{0});
}

// ---------------------------------------------------------------------------------
// Placement.

TEST(Residency, PlacesTheFirstUnitsOnTheLeastLoadedRank) {
  const std::vector<int64_t> units = {32, 12, 12, 12, 20};
  const Residency one = PlaceResident(units, 3, 1);
  EXPECT_EQ(one.units, 3);
  EXPECT_EQ(one.owner, (std::vector<int>{0, 0, 0, -1, -1}));
  EXPECT_EQ(one.bytes, (std::vector<int64_t>{56 * 16}));
  EXPECT_TRUE(one.resident(2));
  EXPECT_FALSE(one.resident(3));
  EXPECT_FALSE(one.resident(-1));
  EXPECT_FALSE(one.resident(5));
  // Two ranks: the embedding alone on rank 0, the next two blocks on rank 1, then rank 1
  // (24) is still below rank 0 (32).
  const Residency two = PlaceResident(units, 4, 2);
  EXPECT_EQ(two.owner, (std::vector<int>{0, 1, 1, 1, -1}));
  EXPECT_EQ(two.bytes, (std::vector<int64_t>{32 * 16, 36 * 16}));
  EXPECT_EQ(two.max_bytes(), 36 * 16);
  // fp32 master and gradient, fp32 m and v; no compute copy (the worker casts the master
  // into a slot when it uses the unit).
  EXPECT_EQ(ResidentUnitBytes(1000), 16 * 1000);
  // Compact moments: bf16 4 bytes a parameter for m and v; int8 2, and two fp32 scales
  // per block of 256 (the last partial).
  EXPECT_EQ(ResidentUnitBytes(1000, MomentDtype::kBf16), 12 * 1000);
  EXPECT_EQ(ResidentUnitBytes(1000, MomentDtype::kInt8), 10 * 1000 + 4 * 8);
  EXPECT_EQ(PlaceResident(units, 3, 1, MomentDtype::kInt8).bytes,
            (std::vector<int64_t>{ResidentUnitBytes(32, MomentDtype::kInt8) + 2 * ResidentUnitBytes(12, MomentDtype::kInt8)}));
  // Counts out of range clamp.
  EXPECT_EQ(PlaceResident(units, 99, 2).units, 5);
  EXPECT_EQ(PlaceResident(units, -1, 2).units, 0);
  EXPECT_EQ(PlaceResident(units, 0, 2).max_bytes(), 0);
}

TEST(Residency, SpreadsAModelEvenlyOverItsGpus) {
  const ModelShape s = Qwen3B();
  const int64_t largest = *std::max_element(s.unit_params.begin(), s.unit_params.end()) * 16;
  for (int workers : {1, 2, 4, 8}) {
    SCOPED_TRACE(workers);
    const Residency r = PlaceResident(s.unit_params, s.num_units(), workers);
    ASSERT_EQ(static_cast<int>(r.bytes.size()), workers);
    EXPECT_EQ(std::accumulate(r.bytes.begin(), r.bytes.end(), int64_t{0}), s.total_params() * 16);
    const auto [lo, hi] = std::minmax_element(r.bytes.begin(), r.bytes.end());
    EXPECT_LE(*hi - *lo, largest) << "greedy by bytes: no rank more than one unit ahead";
    for (int u = 0; u < s.num_units(); ++u) {
      EXPECT_GE(r.owner[u], 0);
      EXPECT_LT(r.owner[u], workers);
    }
  }
}

TEST(Residency, UnitsWithinABudgetAreTheMostThatFitAndGrowWithIt) {
  const ModelShape s = Qwen3B();
  int64_t previous = 0;
  for (int64_t budget = 0; budget <= 80 * kGiB; budget += 2 * kGiB) {
    for (int workers : {1, 2, 4}) {
      const int64_t n = ResidentUnitsWithin(s.unit_params, workers, budget);
      ASSERT_GE(n, 0);
      ASSERT_LE(n, s.num_units());
      EXPECT_LE(PlaceResident(s.unit_params, n, workers).max_bytes(), budget);
      if (n < s.num_units()) {
        EXPECT_GT(PlaceResident(s.unit_params, n + 1, workers).max_bytes(), budget);
      }
      if (workers == 1) {
        EXPECT_GE(n, previous) << "monotone in the budget";
        previous = n;
      }
    }
  }
  EXPECT_EQ(ResidentUnitsWithin(s.unit_params, 1, 0), 0);
  EXPECT_EQ(ResidentUnitsWithin(s.unit_params, 1, s.unit_params[0] * 16 - 1), 0) << "the embedding first";
  EXPECT_EQ(ResidentUnitsWithin(s.unit_params, 1, int64_t{1} << 50), s.num_units()) << "capped by the units";
  // Several GPUs hold more of them than one.
  EXPECT_GT(ResidentUnitsWithin(s.unit_params, 4, 16 * kGiB), ResidentUnitsWithin(s.unit_params, 1, 16 * kGiB));
}

// ---------------------------------------------------------------------------------
// The replayed step.

TEST(ResidentUnits, MoveNoPcieBytesOnOneGpuAndUpdateThere) {
  const ModelShape s = Synthetic();
  const JobShape job = Job(8, 1024);
  const Rates r = DefaultRates(s, job);
  const StepPrediction none = PredictStep(s, job, Knobs(8, 1, 0), r);
  const StepPrediction three = PredictStep(s, job, Knobs(8, 1, 3), r);
  const int64_t params = FirstParams(s, 3);  // the embedding and blocks 0 and 1: 56M
  EXPECT_EQ(params, 56'000'000);
  // No upload: the embedding's (forward) and the blocks' (forward and backward).
  const int64_t fetched = 32'000'000 + 2 * 24'000'000;
  EXPECT_EQ(none.h2d_bytes - three.h2d_bytes, fetched * 2);
  const int64_t landing = Bf16Landing(job, Knobs(8, 1, 3).policy) ? 2 : 4;
  EXPECT_EQ(none.d2h_bytes - three.d2h_bytes, params * landing) << "no gradient copied down";
  EXPECT_EQ(none.resident_params, 0);
  EXPECT_EQ(three.resident_params, params);
  // The CPU updates the streamed units only; the GPU's update stream the others.
  EXPECT_NEAR(none.busy.at(kResCpuUpdate), 160e6 / r.adamw_params_per_s, 1e-12);
  EXPECT_NEAR(three.busy.at(kResCpuUpdate), 104e6 / r.adamw_params_per_s, 1e-12);
  EXPECT_NEAR(three.busy.at(kResGpuUpdate), 56e6 / r.gpu_update_params_per_s, 1e-12);
  EXPECT_EQ(none.busy.count(kResGpuUpdate), 0u);
  EXPECT_EQ(three.busy.count(kResCollective), 0u) << "one GPU: nothing to broadcast or reduce";
  // Less host memory traffic: the DMA and the CPU update of those units.
  EXPECT_LT(three.busy.at(kResHostMemory), none.busy.at(kResHostMemory));
  // Every unit resident: nothing crosses PCIe at all.
  const StepPrediction all = PredictStep(s, job, Knobs(8, 1, 99), r);
  EXPECT_EQ(all.h2d_bytes, 0);
  EXPECT_EQ(all.d2h_bytes, 0);
  EXPECT_EQ(all.busy.at(kResCpuUpdate), 0.0);
  EXPECT_EQ(all.resident_params, s.total_params());
}

TEST(ResidentUnits, SeveralGpusBroadcastTheParametersAndReduceTheGradient) {
  const ModelShape s = Synthetic();
  const JobShape job = Job(16, 1024, /*workers=*/2);
  Rates r = DefaultRates(s, job);
  PlanKnobs none = Knobs(8, 1, 0), three = Knobs(8, 1, 3);
  none.policy.grad_route = three.policy.grad_route = GradRoute::kGatherHost;  // no collective of its own
  const StepPrediction p0 = PredictStep(s, job, none, r);
  const StepPrediction p3 = PredictStep(s, job, three, r);
  const int64_t params = FirstParams(s, 3);
  const int64_t fetched = 32'000'000 + 2 * 24'000'000;  // blocks in forward and backward
  EXPECT_EQ(p0.h2d_bytes - p3.h2d_bytes, fetched * 2);
  EXPECT_EQ(p0.d2h_bytes - p3.d2h_bytes, params * 4) << "fp32 landing: gather_host with two workers";
  EXPECT_EQ(p0.busy.count(kResCollective), 0u);
  // A bf16 broadcast of each fetch and an fp32 reduce of each gradient, at the bus bandwidth.
  EXPECT_NEAR(p3.busy.at(kResCollective), static_cast<double>(fetched * 2 + params * 4) / (r.collective_gbps * 1e9),
              1e-9);
  // Each GPU holds the units placed on it: the 32M embedding on one, the two blocks on the other.
  EXPECT_EQ(p3.memory.resident, 32'000'000 * 16);
}

TEST(ResidentUnits, TheCpuDeviceUpdatesThemOnTheUpdateThread) {
  const ModelShape s = Synthetic();
  const JobShape job = Job(8, 1024, 1, /*cuda=*/false);
  const Rates r = DefaultRates(s, job);
  EXPECT_EQ(r.gpu_update_params_per_s, r.adamw_params_per_s);
  const StepPrediction p = PredictStep(s, job, Knobs(8, 1, 3), r);
  EXPECT_NEAR(p.busy.at(kResCpuUpdate), 160e6 / r.adamw_params_per_s, 1e-9);
  EXPECT_EQ(p.busy.count(kResGpuUpdate), 0u);
}

// With clipping every update waits for the last landing and the GPU's go in unit order
// (the next forward's); without, each starts as its gradient is complete, in backward
// order, during the backward of the units below.
TEST(ResidentUnits, WithoutClippingTheyUpdateAsTheyLand) {
  const ModelShape s = Synthetic();
  Rates r = DefaultRates(s, Job(8, 1024));
  r.gpu_update_params_per_s = 1e8;  // slow enough to be the critical path: 0.56 s for the three units
  for (double* x : {&r.forward_s, &r.recompute_s, &r.backward_s, &r.head_s}) *x *= 20;
  const StepPrediction clip = PredictStep(s, Job(8, 1024), Knobs(8, 1, 3), r);
  JobShape no_clip = Job(8, 1024);
  no_clip.clip = false;
  const StepPrediction early = PredictStep(s, no_clip, Knobs(8, 1, 3), r);
  auto updates = [](const StepPrediction& p) {
    for (const PathSegment& seg : p.critical_path) {
      if (seg.resource == kResGpuUpdate) return seg;
    }
    return PathSegment{};
  };
  EXPECT_EQ(updates(clip).what, "update embedding .. update block 1");
  EXPECT_NEAR(updates(clip).seconds, 0.56, 1e-6) << "all three after the last landing";
  EXPECT_EQ(updates(early).what, "update block 1 .. update embedding");
  EXPECT_LT(updates(early).seconds, 0.54) << "partly during backward";
  EXPECT_LT(early.step_seconds, clip.step_seconds - 0.02);
}

// The update thread's busy time measures the CPU's rate over the streamed units only.
TEST(ResidentUnits, TheCpuRateIsMeasuredOverTheStreamedUnits) {
  const ModelShape s = Synthetic();
  const JobShape job = Job(8, 1024);
  Rates r = DefaultRates(s, job);
  const double adamw = r.adamw_params_per_s;
  const StepPrediction predicted = PredictStep(s, job, Knobs(8, 1, 3), r);
  StepMeasurement m;
  m.step_seconds = predicted.step_seconds;
  m.update_busy_seconds = 104e6 / 1e9;  // the 104M streamed parameters at 1e9 a second
  RefineRates(m, predicted, s, 0.5, r);
  EXPECT_DOUBLE_EQ(r.adamw_params_per_s, 0.5 * adamw + 0.5 * 1e9);
  // Every unit resident: the update thread measures nothing.
  r.adamw_params_per_s = adamw;
  RefineRates(m, PredictStep(s, job, Knobs(8, 1, 99), r), s, 0.5, r);
  EXPECT_DOUBLE_EQ(r.adamw_params_per_s, adamw);
}

// ---------------------------------------------------------------------------------
// Memory.

TEST(ResidentUnits, EstimateMemoryGrowsByTheirBytesAndKeptBlocksGiveWay) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(16, 4096);
  const MemoryEstimate none = EstimateMemory(s, job, Knobs(4, 4, 0));
  EXPECT_EQ(none.resident, 0);
  EXPECT_EQ(EstimateMemory(s, job, Knobs(4, 4, -1)).total, none.total) << "auto counts as none here";
  for (int64_t n : {1, 5, 20, 38}) {
    const MemoryEstimate m = EstimateMemory(s, job, Knobs(4, 4, n));
    EXPECT_EQ(m.resident, FirstParams(s, static_cast<int>(n)) * 16);
    EXPECT_EQ(m.total - none.total, m.resident);
  }
  // Four workers: the rank holding most.
  const JobShape four = Job(64, 4096, 4);
  EXPECT_EQ(EstimateMemory(s, four, Knobs(4, 4, 38)).resident, PlaceResident(s.unit_params, 38, 4).max_bytes());
  // Kept blocks get what resident units leave, and still fit (64 GiB: the H200 keeps all
  // 36 at this batch either way).
  const int64_t memory = MemoryBudget(0, 64 * kGiB);
  const int64_t kept0 = KeptBlocks(s, job, Knobs(4, 4, 0, -1), memory);
  const int64_t kept20 = KeptBlocks(s, job, Knobs(4, 4, 20, -1), memory);
  EXPECT_LT(kept20, kept0);
  EXPECT_LE(EstimateMemory(s, job, Knobs(4, 4, 20, kept20)).total, AutoCountsBytes(memory));
  EXPECT_GT(EstimateMemory(s, job, Knobs(4, 4, 20, kept20 + 1)).total, AutoCountsBytes(memory));
}

// ---------------------------------------------------------------------------------
// How many, left to auto.

TEST(ResidentUnits, TheJobsCountWinsAndAutoMakesNoneOnTheCpuDevice) {
  const ModelShape s = Qwen3B();
  EXPECT_EQ(ResidentUnits(s, Job(4, 4096), Knobs(4, 1, 0), kH200), 0);
  EXPECT_EQ(ResidentUnits(s, Job(4, 4096), Knobs(4, 1, 7), 10 * kGiB), 7) << "forced, even over the budget";
  EXPECT_EQ(ResidentUnits(s, Job(4, 4096), Knobs(4, 1, 1000), kH200), s.num_units());
  EXPECT_EQ(ResidentUnits(s, Job(4, 4096, 1, /*cuda=*/false), Knobs(4, 1, -1), 0), 0);
  // JobShapeOf says which moments the job keeps.
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  EXPECT_EQ(JobShapeOf(c).moments, MomentDtype::kFp32);
  c.optimizer.state_dtype = MomentDtype::kInt8;
  EXPECT_EQ(JobShapeOf(c).moments, MomentDtype::kInt8);
  c.optimizer.state_dtype = MomentDtype::kBf16;
  EXPECT_EQ(JobShapeOf(c).moments, MomentDtype::kBf16);
  // Nothing fits beside the plan: none.
  EXPECT_EQ(ResidentUnits(s, Job(4, 4096), Knobs(4, 1, -1), 8 * kGiB), 0);
}

// The small batch of the H200 runs (qwen2.5-3b, 4 x 4096, clipping): the CPU update of
// 3.1B parameters (0.86 s at 3.6e9 a second) paces the next forward; units resident on
// the GPU update there in milliseconds. Auto makes units resident within the H200's
// memory, beside the kept blocks, and predicts a much shorter step than none.
TEST(ResidentUnits, AutoMakesUnitsResidentAtSmallBatchOnTheH200) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(4, 4096);
  ASSERT_TRUE(job.clip);
  const Rates r = DefaultRates(s, job);
  const int64_t memory = MemoryBudget(0, kH200);
  auto predict = [&](int64_t resident) {
    PlanKnobs k = Knobs(4, 1, resident, -1);
    k.policy.kept_blocks = KeptBlocks(s, job, k, memory);
    return PredictStep(s, job, k, r);
  };
  const int64_t chosen = ResidentUnits(s, job, Knobs(4, 1, -1, -1), memory, r);
  EXPECT_GT(chosen, s.num_units() / 2);
  EXPECT_EQ(ResidentUnits(s, job, Knobs(4, 1, -1, -1), memory), chosen) << "the default rates";
  const StepPrediction none = predict(0), resident = predict(chosen);
  EXPECT_EQ(none.bottleneck, kResCpuUpdate);
  EXPECT_EQ(resident.bottleneck, kResGpu);
  EXPECT_LT(resident.step_seconds, 0.7 * none.step_seconds);
  EXPECT_LE(resident.memory.total, AutoCountsBytes(memory));
  // The best count of all (auto tries every count that fits).
  double best = none.step_seconds;
  for (int64_t n = 1; n <= s.num_units(); ++n) {
    PlanKnobs k = Knobs(4, 1, n, -1);
    k.policy.kept_blocks = KeptBlocks(s, job, k, memory);
    if (EstimateMemory(s, job, k).total <= AutoCountsBytes(memory)) best = std::min(best, PredictStep(s, job, k, r).step_seconds);
  }
  EXPECT_LE(resident.step_seconds, (1 + 1e-6) * best);
  // No limit known: every unit may be resident; a smaller GPU holds fewer.
  EXPECT_GE(ResidentUnits(s, job, Knobs(4, 1, -1, -1), 0, r), chosen);
  EXPECT_LT(ResidentUnits(s, job, Knobs(4, 1, -1, -1), 40 * kGiB, r), chosen);
  // A large batch keeps its GPU busy with compute, but its kept blocks run
  // micro-batch-major: the first micro-batch reaches the last blocks early and would wait
  // for their CPU update (clipping starts it after the last landing), so resident units
  // pay there too, and the policy keeps every block beside them.
  const int64_t at64 = ResidentUnits(s, Job(64, 4096), Knobs(4, 16, -1, -1), memory, r);
  EXPECT_GT(at64, s.num_units() / 2);
  PlanKnobs k64 = Knobs(4, 16, at64, -1);
  EXPECT_EQ(KeptBlocks(s, Job(64, 4096), k64, memory), s.layers);
  k64.policy.kept_blocks = s.layers;
  PlanKnobs none64 = k64;
  none64.policy.resident_units = 0;
  EXPECT_LT(PredictStep(s, Job(64, 4096), k64, r).step_seconds,
            0.97 * PredictStep(s, Job(64, 4096), none64, r).step_seconds);
}

// Issue 22 with 21: compact moments take fewer GPU bytes a resident unit (12 or about 10
// a parameter against 16), so more units fit one budget; on the one-H200 host the
// qwen3-14b shape with int8 moments (the capacity case) makes units resident at 4 x 4096
// and is predicted faster than with none.
TEST(ResidentUnits, CompactMomentsFitMoreUnitsAndAutoMakesThemResident) {
  const ModelShape s = ShapeOf(*PresetConfig("qwen3-14b"));
  const int64_t budget = 60 * kGiB;
  const int64_t fp32 = ResidentUnitsWithin(s.unit_params, 1, budget);
  const int64_t bf16 = ResidentUnitsWithin(s.unit_params, 1, budget, MomentDtype::kBf16);
  const int64_t int8 = ResidentUnitsWithin(s.unit_params, 1, budget, MomentDtype::kInt8);
  EXPECT_GT(fp32, 0);
  EXPECT_GT(bf16, fp32);
  EXPECT_GT(int8, bf16);
  JobShape job = Job(4, 4096);
  job.moments = MomentDtype::kInt8;
  TrainConfig int8_job;
  int8_job.optimizer.state_dtype = MomentDtype::kInt8;
  job.update_bytes_per_param = JobShapeOf(int8_job).update_bytes_per_param;  // the worker's
  const Rates r = DefaultRates(s, job);
  const int64_t memory = MemoryBudget(0, kH200);
  const int64_t chosen = ResidentUnits(s, job, Knobs(4, 1, -1, -1), memory, r);
  EXPECT_GT(chosen, 0);
  PlanKnobs none = Knobs(4, 1, 0, -1), resident = Knobs(4, 1, chosen, -1);
  none.policy.kept_blocks = KeptBlocks(s, job, none, memory);
  resident.policy.kept_blocks = KeptBlocks(s, job, resident, memory);
  const StepPrediction p0 = PredictStep(s, job, none, r), p1 = PredictStep(s, job, resident, r);
  EXPECT_LT(p1.step_seconds, p0.step_seconds);
  EXPECT_LE(p1.memory.total, AutoCountsBytes(memory));
  // The int8 update on the GPU moves 16 bytes a parameter to fp32's 28.
  JobShape fp32_job = Job(4, 4096);
  EXPECT_NEAR(r.gpu_update_params_per_s / DefaultRates(s, fp32_job).gpu_update_params_per_s, 28.0 / 16.0625, 1e-9);
}

TEST(ResidentUnits, TiesGoToFewer) {
  const ModelShape s = Synthetic();
  const JobShape job = Job(8, 1024);
  Rates r = DefaultRates(s, job);
  // Updates and copies so fast that only the GPU's compute sets the step.
  r.adamw_params_per_s = 1e18;
  r.gpu_update_params_per_s = 1e18;
  r.h2d_gbps = r.d2h_gbps = r.duplex_gbps = 1e9;
  r.host_memory_gbps = 1e9;
  const double streamed = PredictStep(s, job, Knobs(8, 1, 0), r).step_seconds;
  ASSERT_NEAR(PredictStep(s, job, Knobs(8, 1, 10), r).step_seconds, streamed, 1e-7 * streamed)
      << "a tie: within ResidentUnits' part in a million";
  EXPECT_EQ(ResidentUnits(s, job, Knobs(8, 1, -1), 0, r), 0);
  // With the usual CPU update they pay.
  EXPECT_GT(ResidentUnits(s, job, Knobs(8, 1, -1), 0, DefaultRates(s, job)), 0);
}

// ---------------------------------------------------------------------------------
// The policy, the plan manager and the worker.

TEST(ResidentUnits, ThePolicyResolvesAutoPerCandidateAndShrinksThemAfterKeptBlocks) {
  const ModelShape s = Qwen3B();
  const JobShape job = Job(4, 4096);
  const Rates r = DefaultRates(s, job);
  const int64_t budget = MemoryBudget(0, kH200);
  absl::StatusOr<PlanChoice> choice = ChoosePlan(s, job, Knobs(4, 1, -1, -1), r, budget);
  ASSERT_TRUE(choice.ok()) << choice.status();
  for (const Candidate& c : choice->candidates) {
    EXPECT_GE(c.knobs.policy.resident_units, 0) << "resolved";
    EXPECT_EQ(c.prediction.memory.resident, ResidencyOf(s, job, c.knobs).max_bytes());
  }
  EXPECT_GT(choice->knobs.policy.resident_units, 0);
  EXPECT_LE(choice->prediction.memory.total, budget);
  absl::StatusOr<PlanChoice> small = ChoosePlan(s, job, Knobs(4, 1, -1, -1), r, 48 * kGiB);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_LT(small->knobs.policy.resident_units, choice->knobs.policy.resident_units);
  // A job that forbids them gets none.
  absl::StatusOr<PlanChoice> none = ChoosePlan(s, job, Knobs(4, 1, 0, -1), r, budget);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->knobs.policy.resident_units, 0);
  EXPECT_GT(none->prediction.step_seconds, choice->prediction.step_seconds);

  // After an out-of-memory: half the kept blocks, then half the resident units, then
  // the micro-batches.
  PlanKnobs k = Knobs(4, 4, 6, 9);
  EXPECT_EQ(DescribeKnobs(k),
            "4 x 4 micro-batches, prefetch 2, activations device, replicate/gather_host, 9 blocks kept, "
            "6 units resident");
  struct Want {
    int64_t kept, resident;
  };
  for (const Want& want : {Want{4, 6}, Want{2, 6}, Want{1, 6}, Want{0, 6}, Want{0, 3}, Want{0, 1}, Want{0, 0}}) {
    std::optional<PlanKnobs> next = Shrink(k);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->policy.kept_blocks, want.kept);
    EXPECT_EQ(next->policy.resident_units, want.resident);
    EXPECT_EQ(next->micro_batch_size, 4);
    k = *next;
  }
  EXPECT_EQ(Shrink(k)->micro_batch_size, 2);
}

// policy.auto off: the engine's count is reported; after a GPU out-of-memory the kept
// blocks and then the resident units the job left to auto give way, by halves.
TEST(ResidentUnits, ThePlanManagerTakesTheEnginesCountAndHalvesItAfterAnOutOfMemory) {
  const ModelConfig m = *PresetConfig("qwen2.5-3b");
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  c.seq_len = 4096;
  c.micro_batch_size = 4;
  c.grad_accum = 1;
  absl::StatusOr<PlanManager> plan = UncalibratedPlan(m, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->report().units, 38);
  EXPECT_EQ(plan->report().blocks, 36);
  EXPECT_EQ(plan->prediction().memory.resident, 0) << "auto predicts none until the engine says";
  const double streamed = plan->prediction().step_seconds;
  plan->SetKeptBlocks(2);
  plan->SetResidentUnits(10);  // what the workers resolved
  EXPECT_EQ(plan->knobs().policy.resident_units, 10);
  EXPECT_EQ(plan->prediction().resident_params, FirstParams(ShapeOf(m), 10));
  EXPECT_GT(plan->prediction().memory.resident, 0);
  EXPECT_LT(plan->prediction().step_seconds, streamed);
  const absl::Status oom = absl::ResourceExhaustedError("CUDA out of memory");
  struct Want {
    int64_t kept, resident;
  };
  for (const Want& want : {Want{1, 10}, Want{0, 10}, Want{0, 5}, Want{0, 2}, Want{0, 1}, Want{0, 0}}) {
    absl::StatusOr<PlanKnobs> next = plan->AfterOutOfMemory(oom, 1);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->policy.kept_blocks, want.kept);
    EXPECT_EQ(next->policy.resident_units, want.resident);
    EXPECT_EQ(next->micro_batch_size, 4) << "the job's own knobs stay";
  }
  EXPECT_TRUE(absl::IsResourceExhausted(plan->AfterOutOfMemory(oom, 1).status()));
  // A count the job set is the job's: no retry.
  c.policy.kept_blocks = 0;
  c.policy.resident_units = 10;
  absl::StatusOr<PlanManager> fixed = UncalibratedPlan(m, c);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->knobs().policy.resident_units, 10);
  EXPECT_TRUE(absl::IsResourceExhausted(fixed->AfterOutOfMemory(oom, 1).status()));
}

TEST(ResidentUnits, TheWorkerResolvesAutoWithTheKeptBlocksAgainstTheDevicesMemory) {
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  c.compute_dtype = ComputeDtype::kBf16;
  c.seq_len = 4096;
  c.micro_batch_size = 4;
  c.grad_accum = 1;
  c.policy.prefetch_depth = 2;
  const ModelConfig m = *PresetConfig("qwen2.5-3b");
  const ModelShape s = ShapeOf(m);
  const int64_t memory = MemoryBudget(0, kH200);
  const ActivationPlan plan = ChooseActivations(c, m, 2, kH200);
  EXPECT_EQ(plan.resident_units, ResidentUnits(s, Job(4, 4096), Knobs(4, 1, -1, -1), memory));
  EXPECT_GT(plan.resident_units, 0);
  EXPECT_EQ(plan.kept_blocks, KeptBlocks(s, Job(4, 4096), Knobs(4, 1, plan.resident_units, -1), memory));
  // The job's count wins; the CPU device makes none by itself. Compact moments are
  // resolved as fp32 ones, with their own (fewer) bytes a unit.
  c.policy.resident_units = 3;
  EXPECT_EQ(ChooseActivations(c, m, 2, kH200).resident_units, 3);
  c.policy.resident_units = -1;
  c.optimizer.state_dtype = MomentDtype::kBf16;
  JobShape bf16 = Job(4, 4096);
  bf16.moments = MomentDtype::kBf16;
  bf16.update_bytes_per_param = JobShapeOf(c).update_bytes_per_param;
  EXPECT_EQ(ChooseActivations(c, m, 2, kH200).resident_units, ResidentUnits(s, bf16, Knobs(4, 1, -1, -1), memory));
  EXPECT_GT(ChooseActivations(c, m, 2, kH200).resident_units, 0);
  c.optimizer.state_dtype = MomentDtype::kFp32;
  c.device = DeviceKind::kCpu;
  EXPECT_EQ(ChooseActivations(c, m, 4, 0).resident_units, 0);
}

}  // namespace
}  // namespace slidedp
