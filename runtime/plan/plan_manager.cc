// PlanManager: see plan_manager.h.
#include "runtime/plan/plan_manager.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/plan/job_knobs.h"

namespace slidedp {
namespace {

// Weight of one step in the rates' moving average.
constexpr double kRefineWeight = 0.3;
// Steps in a row over the threshold before a re-plan.
constexpr int kReplanPatience = 3;

bool SameKnobs(const PlanKnobs& a, const PlanKnobs& b) {
  return DescribeKnobs(a) == DescribeKnobs(b) && a.policy.loss_chunk_tokens == b.policy.loss_chunk_tokens;
}

}  // namespace

PlanManager::PlanManager(const ModelConfig& model, const TrainConfig& config)
    : shape_(ShapeOf(model)),
      job_(JobShapeOf(config)),
      threshold_(config.policy.replan_threshold),
      requested_kept_(config.policy.kept_blocks),
      requested_resident_(config.policy.resident_units),
      drift_(config.policy.replan_threshold, kReplanPatience) {
  report_.available = true;
  report_.auto_plan = config.policy.auto_plan;
  report_.blocks = shape_.layers;
  report_.units = shape_.num_units();
  report_.rates = DefaultRates(shape_, job_);
  report_.budget_bytes = MemoryBudget(config.policy.gpu_memory_budget_bytes, 0);
}

absl::StatusOr<PlanManager> PlanManager::Start(const ModelConfig& model, const TrainConfig& config,
                                               const std::function<absl::StatusOr<Calibration>()>& calibrate) {
  PlanManager m(model, config);
  if (!config.policy.auto_plan) {
    m.Use(KnobsOf(config));
    m.report_.last_change = "the job's knobs (policy.auto off)";
    return m;
  }
  absl::StatusOr<Calibration> cal = calibrate();
  if (!cal.ok()) return cal.status();
  m.report_.rates = cal->rates;
  m.report_.calibration_seconds = cal->seconds;
  m.report_.calibration_notes = cal->notes;
  m.report_.device_free_bytes = cal->device_free_bytes;
  m.report_.budget_bytes = MemoryBudget(config.policy.gpu_memory_budget_bytes, cal->device_free_bytes);
  absl::StatusOr<PlanChoice> choice =
      ChoosePlan(m.shape_, m.job_, KnobsOf(config), m.report_.rates, m.report_.budget_bytes);
  if (!choice.ok()) return choice.status();
  m.report_.candidates = std::move(choice->candidates);
  m.Use(choice->knobs);
  m.report_.last_change = absl::StrFormat("chosen at start from %d candidates (calibration %.2f s)",
                                          m.report_.candidates.size(), cal->seconds);
  return m;
}

void PlanManager::Use(const PlanKnobs& knobs) {
  report_.knobs = knobs;
  report_.prediction = PredictStep(shape_, job_, knobs, report_.rates);
}

void PlanManager::Force(const PlanKnobs& knobs) {
  PlanKnobs k = knobs;
  k.policy.grad_landing = report_.knobs.policy.grad_landing;
  Use(k);
  report_.last_change = absl::StrCat("set by the caller: ", DescribeKnobs(k));
}

void PlanManager::SetCrossHostRate(double gbps, double latency_seconds) {
  if (gbps > 0) report_.rates.cross_host_gbps = gbps;
  if (latency_seconds > 0) report_.rates.cross_host_latency_s = latency_seconds;
  report_.calibration_notes.push_back(absl::StrFormat(
      "between the hosts: %.2f GB/s a host sends in an all-gather, %.0f us an exchange",
      report_.rates.cross_host_gbps, report_.rates.cross_host_latency_s * 1e6));
  Use(report_.knobs);
}

void PlanManager::SetKeptBlocks(int64_t kept) {
  if (report_.knobs.policy.kept_blocks == kept) return;
  PlanKnobs k = report_.knobs;
  k.policy.kept_blocks = kept;
  Use(k);
}

void PlanManager::SetResidentUnits(int64_t units) {
  if (report_.knobs.policy.resident_units == units) return;
  PlanKnobs k = report_.knobs;
  k.policy.resident_units = units;
  Use(k);
}

void PlanManager::FixLanding(bool bf16) {
  report_.knobs.policy.grad_landing = bf16 ? GradLanding::kBf16 : GradLanding::kFp32;
}

std::optional<PlanKnobs> PlanManager::AfterStep(const StepMeasurement& measured, bool first_of_plan) {
  report_.measured_step_seconds = measured.step_seconds;
  report_.steps = measured.step;
  if (first_of_plan) return std::nullopt;
  const bool replan = report_.auto_plan && drift_.Observe(report_.prediction.step_seconds, measured.step_seconds);
  RefineRates(measured, report_.prediction, shape_, kRefineWeight, report_.rates);
  Use(report_.knobs);
  if (!replan) return std::nullopt;
  drift_.Reset();
  PlanKnobs base = report_.knobs;
  base.policy.kept_blocks = requested_kept_;  // auto stays auto for the new candidates
  base.policy.resident_units = requested_resident_;
  absl::StatusOr<PlanChoice> choice = ChoosePlan(shape_, job_, base, report_.rates, report_.budget_bytes);
  if (!choice.ok()) return std::nullopt;  // keep the plan that runs
  report_.candidates = std::move(choice->candidates);
  if (SameKnobs(choice->knobs, report_.knobs)) {
    report_.last_change = absl::StrFormat("re-planned after step %d (drift over %.0f%%): same plan", measured.step,
                                          100 * threshold_);
    return std::nullopt;
  }
  ++report_.replans;
  report_.last_change = absl::StrFormat("re-planned after step %d (drift over %.0f%%): %s", measured.step,
                                        100 * threshold_, DescribeKnobs(choice->knobs));
  Use(choice->knobs);
  return choice->knobs;
}

absl::StatusOr<PlanKnobs> PlanManager::AfterOutOfMemory(const absl::Status& error, int64_t step) {
  std::optional<PlanKnobs> smaller;
  if (report_.auto_plan) {
    smaller = Shrink(report_.knobs);
  } else if (requested_kept_ < 0 && report_.knobs.policy.kept_blocks > 0) {
    // The job set its knobs but left the kept blocks to the engine: only those give way,
    // then the resident units it left to the engine.
    smaller = report_.knobs;
    smaller->policy.kept_blocks /= 2;
  } else if (requested_resident_ < 0 && report_.knobs.policy.resident_units > 0) {
    smaller = report_.knobs;
    smaller->policy.resident_units /= 2;
  }
  if (!smaller.has_value()) {
    return absl::Status(error.code(), absl::StrCat(error.message(), " (the plan cannot shrink further: ",
                                                   DescribeKnobs(report_.knobs), ")"));
  }
  ++report_.oom_retries;
  report_.last_change = absl::StrCat("GPU out of memory in step ", step, "; shrunk to ", DescribeKnobs(*smaller),
                                     " and retried");
  Use(*smaller);
  return *smaller;
}

}  // namespace slidedp
