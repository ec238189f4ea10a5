// The step-time model with its default rates (DefaultRates: this engine's, read from
// its traces) against the H100 runs of 2026-12-06 (tests/bench/RESULTS.md, "H100 host,
// one GPU, 2026-12-06 (ninth session)"): qwen2.5-7b at seq 4096, clipping on, prefetch
// 2, weight sinks on, each with the resident units and kept blocks the run forced or
// resolved. The worker resolves auto counts with these rates (ChooseActivations), so
// their order decides the plan a job without policy.auto runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "runtime/model/model_config.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/step_model.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/train_config.h"
#include "tests/runtime/plan/plan_test_shapes.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // plan_test_shapes.h

struct H100Run {
  int64_t sequences, mbs, resident, kept;
  double seconds;  // measured, the mean of steps 2 and 3
};

// Every run of the session; a plan run in two calls (on two machines) appears twice.
constexpr H100Run kRuns[] = {
    {16, 4, 7, 0, 6.101},  {16, 4, 7, 0, 6.096},  {16, 4, 0, 12, 6.112}, {16, 4, 0, 12, 6.091},
    {16, 4, 3, 6, 5.930},  {16, 4, 3, 6, 5.857},  {16, 2, 7, 1, 6.167},  {16, 2, 0, 19, 6.412},
    {16, 1, 0, 25, 6.764}, {32, 4, 0, 9, 11.522}, {32, 2, 0, 18, 11.149},
};

ModelShape Qwen7B() { return ShapeOf(*PresetConfig("qwen2.5-7b")); }

JobShape Job(int64_t sequences) {
  JobShape j;
  j.sequences = sequences;
  j.seq_len = 4096;
  return j;
}

PlanKnobs Knobs(int64_t sequences, int64_t mbs, int64_t resident, int64_t kept) {
  PlanKnobs k = SweepKnobs(mbs, sequences / mbs, 2);
  k.policy.loss_chunk_tokens = 4096;  // step_bench's
  k.policy.resident_units = resident;
  k.policy.kept_blocks = kept;
  return k;
}

double Predict(int64_t sequences, int64_t mbs, int64_t resident, int64_t kept) {
  const ModelShape s = Qwen7B();
  const JobShape job = Job(sequences);
  return PredictStep(s, job, Knobs(sequences, mbs, resident, kept), DefaultRates(s, job)).step_seconds;
}

// Each run within 2.5% (the largest miss is 1.3%; the rates of 2026-12-03 missed these by
// 13-23%, all too slow).
TEST(StepModel, MatchesTheH100RunsOfThisEngine) {
  for (const H100Run& run : kRuns) {
    const double p = Predict(run.sequences, run.mbs, run.resident, run.kept);
    std::printf("%lld x 4096 in %lld, %lld resident, %lld kept: measured %.3f predicted %.3f (%+.1f%%)\n",
                (long long)run.sequences, (long long)run.mbs, (long long)run.resident, (long long)run.kept,
                run.seconds, p, 100 * (p / run.seconds - 1));
    EXPECT_NEAR(p / run.seconds, 1.0, 0.025) << run.sequences << " in " << run.mbs << ", " << run.resident
                                             << " resident, " << run.kept << " kept";
  }
}

// The twelfth session's runs (RESULTS.md, "H100 host, one GPU, 2026-12-06 (twelfth
// session)"): 4 x 4096 in one micro-batch of 4, the plans the worker resolved on the
// H100 (and int8 with nothing resident), the model given each run's moments. int8 within
// 3.5% (-2.8% and -0.2%): issue 21's H200 goal at this batch rests on int8's prediction;
// fp32 within 7% (+6.5%, not explained: this host's update rate was not measured; its
// fp32 update 10% faster than the default rate would account for most of it).
TEST(StepModel, MatchesTheH100RunsInOneMicroBatchOfFour) {
  struct Run {
    MomentDtype moments;
    int64_t resident, kept;
    double seconds, tolerance;
  };
  for (const Run& run : {Run{MomentDtype::kInt8, 15, 0, 1.769, 0.035}, Run{MomentDtype::kInt8, 0, 14, 2.041, 0.035},
                         Run{MomentDtype::kFp32, 9, 1, 2.156, 0.07}}) {
    const ModelShape s = Qwen7B();
    TrainConfig moments;
    moments.optimizer.state_dtype = run.moments;
    JobShape job = Job(4);
    job.moments = run.moments;
    job.update_bytes_per_param = JobShapeOf(moments).update_bytes_per_param;  // the worker's
    const double p = PredictStep(s, job, Knobs(4, 4, run.resident, run.kept), DefaultRates(s, job)).step_seconds;
    std::printf("4 x 4096 in 4, %s, %lld resident, %lld kept: measured %.3f predicted %.3f (%+.1f%%)\n",
                NameOf(run.moments), (long long)run.resident, (long long)run.kept, run.seconds, p,
                100 * (p / run.seconds - 1));
    EXPECT_NEAR(p / run.seconds, 1.0, run.tolerance) << NameOf(run.moments) << ", " << run.resident << " resident";
  }
}

// What the choice rests on: at 16 x 4096 in micro-batches of 4, 3 resident units with 6
// kept blocks ran 2.8-4.0% faster than either 7 resident and none kept (what the worker
// chose with the rates of before) or 12 kept and none resident; at 32 x 4096, 16
// micro-batches of 2 with 18 kept 3.2% faster than 8 of 4 with 9. The model orders them so.
TEST(StepModel, OrdersTheH100PlansAsTheyRan) {
  EXPECT_LT(Predict(16, 4, 3, 6), Predict(16, 4, 7, 0));
  EXPECT_LT(Predict(16, 4, 3, 6), Predict(16, 4, 0, 12));
  EXPECT_LT(Predict(16, 4, 7, 0), Predict(16, 2, 0, 19));
  EXPECT_LT(Predict(16, 2, 0, 19), Predict(16, 1, 0, 25));
  EXPECT_LT(Predict(32, 2, 0, 18), Predict(32, 4, 0, 9));
  // The rates of 2026-12-03 put 7 resident first and 3 with 6 kept behind it.
  const ModelShape s = Qwen7B();
  const JobShape job = Job(16);
  const Rates then = RatesOf20261203(s, job);
  EXPECT_GT(PredictStep(s, job, Knobs(16, 4, 3, 6), then).step_seconds,
            PredictStep(s, job, Knobs(16, 4, 7, 0), then).step_seconds);
}

// The worker's resolution of auto counts (policy.resident_units and kept_blocks -1) on an
// H100's memory (78 GiB left to the plan: its 79.6 GiB free less MemoryBudget's reserve,
// give or take a GiB): a mix of resident units and kept blocks predicted within 1% of the
// fastest plan run, not the 7 resident units and no kept block it chose before.
TEST(StepModel, ResolvesAutoOnAnH100NearTheFastestPlanRun) {
  const ModelShape s = Qwen7B();
  const JobShape job = Job(16);
  const double fastest = Predict(16, 4, 3, 6);
  for (int64_t gib : {77, 78, 79}) {
    SCOPED_TRACE(gib);
    const int64_t memory = gib * kGiB;
    PlanKnobs k = Knobs(16, 4, -1, -1);
    k.policy.resident_units = ResidentUnits(s, job, k, memory);
    k.policy.kept_blocks = KeptBlocks(s, job, k, memory);
    EXPECT_GE(k.policy.resident_units, 2);
    EXPECT_LE(k.policy.resident_units, 5);
    EXPECT_GE(k.policy.kept_blocks, 3);
    EXPECT_LT(PredictStep(s, job, k, DefaultRates(s, job)).step_seconds, 1.01 * fastest);
  }
}

}  // namespace
}  // namespace slidedp
