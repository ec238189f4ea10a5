// The policy manager inside the trainer, on the CPU device: every step carries a
// prediction and a bottleneck (policy.auto or not); policy.auto calibrates and plans at
// start within the global batch; a GPU out-of-memory (injected through the fault seam)
// shrinks the plan and retries the step from the same host state, giving the weights
// of a run that used the shrunk plan from the start.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "runtime/engine/calibration.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/engine/trainer.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/measurements.h"
#include "runtime/plan/plan_manager.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

TrainConfig Tiny() {
  TrainConfig c = testing::TinyTrainConfig(/*steps=*/4);
  c.micro_batch_size = 4;
  c.workers = 1;
  c.policy.replan_threshold = 1e9;  // no re-plan midway: the report names the knobs that ran
  return c;
}

std::string Train(const TrainConfig& c, int steps, PlanReport* plan = nullptr) {
  auto t = Trainer::Create(c);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepStats> st = (*t)->Step();
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return "";
    EXPECT_TRUE(std::isfinite(st->loss));
  }
  if (plan != nullptr) *plan = (*t)->Plan();
  return (*t)->WeightsDigest();
}

TEST(PlanTrainer, EveryStepCarriesAPredictionWithoutAuto) {
  auto t = Trainer::Create(Tiny());
  ASSERT_TRUE(t.ok()) << t.status();
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<StepStats> st = (*t)->Step();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_GT(st->predicted_step_seconds, 0);
    EXPECT_FALSE(st->bottleneck.empty());
  }
  const PlanReport plan = (*t)->Plan();
  EXPECT_TRUE(plan.available);
  EXPECT_FALSE(plan.auto_plan);
  EXPECT_EQ(plan.knobs.micro_batch_size, 4);
  EXPECT_EQ(plan.steps, 3);
  EXPECT_GT(plan.measured_step_seconds, 0);
  EXPECT_EQ(plan.calibration_seconds, 0);
}

TEST(PlanTrainer, AutoCalibratesAndPlansWithinTheGlobalBatch) {
  TrainConfig c = Tiny();
  c.policy.auto_plan = true;
  c.micro_batch_size = 2;
  c.grad_accum = 2;
  auto t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  const PlanReport plan = (*t)->Plan();
  EXPECT_TRUE(plan.auto_plan);
  EXPECT_GT(plan.calibration_seconds, 0);
  EXPECT_LT(plan.calibration_seconds, 10);
  EXPECT_GT(plan.rates.adamw_params_per_s, 0);
  EXPECT_GT(plan.rates.forward_s, 0);
  EXPECT_EQ(plan.candidates.size(), 3u * 4 * 2);  // micro-batches 4, 2, 1; depth 1..4; placement
  EXPECT_EQ(plan.knobs.micro_batch_size * plan.knobs.grad_accum, 4);
  // config() stays the job's request; the plan is what runs.
  EXPECT_EQ((*t)->config().micro_batch_size, 2);
  ASSERT_TRUE((*t)->Step().ok());
}

TEST(PlanTrainer, RatesMeasuredInSeconds) {
  absl::StatusOr<Calibration> cal = Calibrate(*PresetConfig("tiny"), Tiny());
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_LT(cal->seconds, 10);
  EXPECT_GT(cal->rates.host_memory_gbps, 0);
  EXPECT_GT(cal->rates.h2d_gbps, 0);
  EXPECT_GT(cal->rates.head_s, 0);
  EXPECT_GE(cal->notes.size(), 3u);
}

// On a GPU, calibration times the worker's own paths (the weight sinks, the fused head):
// every GPU rate measured, finite and positive, on the cuda device in bf16.
TEST(PlanTrainer, CalibratesTheWorkersPathsOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  TrainConfig c = Tiny();
  c.device = DeviceKind::kCuda;
  c.compute_dtype = ComputeDtype::kBf16;
  absl::StatusOr<Calibration> cal = Calibrate(*PresetConfig("tiny"), c);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_LT(cal->seconds, 60);
  for (double rate : {cal->rates.forward_s, cal->rates.backward_s, cal->rates.head_s}) {
    EXPECT_TRUE(std::isfinite(rate));
    EXPECT_GT(rate, 0.0);
  }
  EXPECT_GE(cal->rates.recompute_s, 0.0);
  bool on_gpu = false;
  for (const std::string& n : cal->notes) on_gpu |= n.find("cuda:0") != std::string::npos;
  EXPECT_TRUE(on_gpu) << "no note names the GPU";
}

TEST(PlanTrainer, CollectiveBandwidthMeasuredAmongTheJobsWorkers) {
  TrainConfig c = Tiny();
  c.workers = 2;
  absl::StatusOr<Calibration> cal = Calibrate(*PresetConfig("tiny"), c);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_LT(cal->seconds, 10);
  bool measured = false;
  for (const std::string& n : cal->notes) measured |= n.rfind("collective ", 0) == 0 && n.find("2 workers") != std::string::npos;
  EXPECT_TRUE(measured) << "no collective note among " << cal->notes.size();
  // All-gathers of 4 MB among two threads: some GB/s, not the model's default.
  EXPECT_GT(cal->rates.collective_gbps, 0.01);
  EXPECT_LT(cal->rates.collective_gbps, 1000);
  EXPECT_NE(cal->rates.collective_gbps, DefaultRates(ShapeOf(*PresetConfig("tiny")), JobShapeOf(c)).collective_gbps);
}

// An out-of-memory in the first step, after the head and one block have landed: the
// plan shrinks (fewer sequences per micro-batch) and the same step runs again.
void ExpectRetryMatchesShrunkPlan(double max_grad_norm) {
  TrainConfig c = Tiny();
  c.optimizer.max_grad_norm = max_grad_norm;
  c.policy.auto_plan = true;
  InjectOutOfMemory(/*grad_buffers=*/3);
  PlanReport plan;
  const std::string retried = Train(c, 4, &plan);
  EXPECT_EQ(plan.oom_retries, 1);
  EXPECT_NE(plan.last_change.find("out of memory in step 1"), std::string::npos) << plan.last_change;
  // The same job with the shrunk plan's knobs from the start, no policy.
  TrainConfig fixed = WithKnobs(c, plan.knobs);
  fixed.policy.auto_plan = false;
  EXPECT_EQ(retried, Train(fixed, 4));
}

TEST(PlanTrainer, OutOfMemoryShrinksAndRetriesExactlyWithClipping) { ExpectRetryMatchesShrunkPlan(1.0); }

TEST(PlanTrainer, OutOfMemoryShrinksAndRetriesExactlyWithoutClipping) {
  // Without clipping units update as they land; a plan's first step holds them back
  // until its last landing so that it can be retried.
  ExpectRetryMatchesShrunkPlan(0.0);
}

TEST(PlanTrainer, OutOfMemoryLaterWithClippingRetries) {
  TrainConfig c = Tiny();
  c.policy.auto_plan = true;
  auto t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Step().ok());
  const int64_t mbs = (*t)->Plan().knobs.micro_batch_size;
  InjectOutOfMemory(2);
  absl::StatusOr<StepStats> st = (*t)->Step();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->step, 2);
  EXPECT_TRUE(std::isfinite(st->loss));
  EXPECT_EQ((*t)->Plan().oom_retries, 1);
  EXPECT_LE((*t)->Plan().knobs.micro_batch_size, mbs);
}

// On a GPU a job that leaves policy.kept_blocks to auto (the default) and runs out of
// memory in a step gives up half its kept blocks and runs the step again, policy.auto
// off. (On the CPU device auto keeps none: the test below fails the step.)
TEST(PlanTrainer, OutOfMemoryHalvesKeptBlocksLeftToAutoOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  TrainConfig c = Tiny();
  c.device = DeviceKind::kCuda;
  c.compute_dtype = ComputeDtype::kBf16;
  {
    auto t = Trainer::Create(c);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ((*t)->Plan().knobs.policy.kept_blocks, 2) << "the tiny preset's two blocks fit";
  }
  InjectOutOfMemory(/*grad_buffers=*/3);
  PlanReport plan;
  Train(c, 4, &plan);
  EXPECT_EQ(plan.oom_retries, 1);
  EXPECT_EQ(plan.knobs.policy.kept_blocks, 1);
  EXPECT_EQ(plan.knobs.micro_batch_size, 4);
  EXPECT_NE(plan.last_change.find("out of memory in step 1"), std::string::npos) << plan.last_change;
}

TEST(PlanTrainer, OutOfMemoryWithoutAutoFailsTheStep) {
  auto t = Trainer::Create(Tiny());
  ASSERT_TRUE(t.ok());
  InjectOutOfMemory(0);
  absl::StatusOr<StepStats> st = (*t)->Step();
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(st.status())) << st.status();
  // LibTorch's message, without the C++ backtrace its what() carries: a job's error
  // (GetJob, the daemon's log) is a line, not kilobytes of stack frames.
  const std::string message(st.status().message());
  EXPECT_NE(message.find("CUDA out of memory. Tried to allocate 2.00 GiB"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find("frame #"), std::string::npos) << message;
  EXPECT_LT(message.size(), 800u) << message;
}

// Runs `body` on a thread; a body still running after `seconds` is a hang, which fails
// the test and ends the process (a hung worker thread cannot be joined).
void WithinSeconds(double seconds, const std::function<void()>& body) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([body, done] {
    body();
    done->set_value();
  }).detach();
  if (finished.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "hung for " << seconds << " s";
    std::fflush(stdout);
    std::abort();
  }
}

// Two workers, one of which runs out of memory in the middle of step 1 while the other
// waits for it in a collective (its landing barrier under gather_host, its all-gather
// under scatter_allgather): the failing worker aborts the collectives, so the other one
// returns instead of waiting forever, and the step fails with the out-of-memory (not
// with the other worker's "aborted"), or with policy.auto shrinks and retries.
class TwoWorkerOutOfMemory : public ::testing::TestWithParam<std::tuple<std::string, std::string, bool>> {};

TEST_P(TwoWorkerOutOfMemory, AbortsTheCollectivesInsteadOfHanging) {
  const auto [param_route, grad_route, auto_plan] = GetParam();
  TrainConfig c = Tiny();
  c.workers = 2;
  c.micro_batch_size = 2;
  c.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  c.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  c.policy.auto_plan = auto_plan;
  WithinSeconds(120, [&] {
    auto t = Trainer::Create(c);
    ASSERT_TRUE(t.ok()) << t.status();
    InjectOutOfMemory(/*grad_buffers=*/3);
    absl::StatusOr<StepStats> st = (*t)->Step();
    if (auto_plan) {
      ASSERT_TRUE(st.ok()) << st.status();
      const PlanReport plan = (*t)->Plan();
      EXPECT_EQ(plan.oom_retries, 1);
      for (int s = 1; s < 4; ++s) ASSERT_TRUE((*t)->Step().ok());  // the rebuilt workers' collectives work
      // Exactly as if the shrunk plan had run from the start: the aborted step's partial
      // landings left nothing behind.
      TrainConfig fixed = WithKnobs(c, plan.knobs);
      fixed.policy.auto_plan = false;
      EXPECT_EQ((*t)->WeightsDigest(), Train(fixed, 4));
    } else {
      ASSERT_FALSE(st.ok());
      EXPECT_TRUE(absl::IsResourceExhausted(st.status())) << st.status();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Routes, TwoWorkerOutOfMemory,
                         ::testing::Values(std::make_tuple("replicate", "gather_host", false),
                                           std::make_tuple("replicate", "gather_host", true),
                                           std::make_tuple("scatter_allgather", "reduce_scatter", false),
                                           std::make_tuple("scatter_allgather", "reduce_scatter", true),
                                           std::make_tuple("replicate", "reduce_one", true)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) +
                                  (std::get<2>(info.param) ? "_auto" : "");
                         });

TEST(PlanTrainer, UsePlanSwitchesTheKnobsOverOneHostState) {
  auto t = Trainer::Create(Tiny());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Step().ok());
  PlanKnobs k = KnobsOf(Tiny());
  k.micro_batch_size = 1;
  k.grad_accum = 4;
  k.policy.prefetch_depth = 3;
  ASSERT_TRUE((*t)->UsePlan(k).ok());
  EXPECT_EQ((*t)->Plan().knobs.micro_batch_size, 1);
  EXPECT_EQ((*t)->Plan().knobs.policy.prefetch_depth, 3);
  absl::StatusOr<StepStats> st = (*t)->Step();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->step, 2);
  k.grad_accum = 2;  // another global batch
  EXPECT_TRUE(absl::IsInvalidArgument((*t)->UsePlan(k)));
}

TEST(PlanTrainer, RefineMovesTheRatesTowardTheMeasuredStep) {
  const ModelShape shape = ShapeOf(*PresetConfig("tiny"));
  Rates r = DefaultRates(shape, JobShapeOf(Tiny()));
  StepPrediction predicted;
  predicted.step_seconds = 1.0;
  predicted.bottleneck = kResGpu;
  StepMeasurement s;
  s.step_seconds = 1.5;
  s.update_busy_seconds = static_cast<double>(shape.total_params()) / 1e6;  // 1e6 params/s
  const double forward = r.forward_s, adamw = r.adamw_params_per_s;
  RefineRates(s, predicted, shape, 0.5, r);
  EXPECT_DOUBLE_EQ(r.forward_s, forward * 1.25);
  EXPECT_DOUBLE_EQ(r.adamw_params_per_s, 0.5 * adamw + 0.5 * 1e6);
  // Not the GPU's fault: the GPU times stay.
  predicted.bottleneck = kResCpuUpdate;
  RefineRates(s, predicted, shape, 0.5, r);
  EXPECT_DOUBLE_EQ(r.forward_s, forward * 1.25);
}

TEST(PlanTrainer, SustainedDriftReplans) {
  TrainConfig c = Tiny();
  c.policy.auto_plan = true;
  c.policy.replan_threshold = 0.15;
  absl::StatusOr<PlanManager> m = StartPlan(*PresetConfig("tiny"), c);
  ASSERT_TRUE(m.ok()) << m.status();
  bool replanned = false;
  for (int step = 1; step <= 8 && m->report().last_change.find("re-planned") == std::string::npos; ++step) {
    StepStats s;
    s.step = step;
    s.step_seconds = 3 * m->prediction().step_seconds;  // far slower than predicted
    replanned |= ReportStep(*m, s, /*first_of_plan=*/step == 1).has_value();
    EXPECT_GT(s.predicted_step_seconds, 0);
    EXPECT_FALSE(s.bottleneck.empty());
  }
  EXPECT_NE(m->report().last_change.find("re-planned after step 4"), std::string::npos) << m->report().last_change;
  EXPECT_EQ(m->report().replans, replanned ? 1 : 0);
}

}  // namespace
}  // namespace slidedp
