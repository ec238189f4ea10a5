// Calibration: the engine measures what the plan (runtime/plan/) decides from. At job
// start, Calibrate measures the rates of the step-time model (runtime/plan/step_model.h):
// host memory bandwidth (a multi-threaded copy), the CPU AdamW rate (runtime/state/adamw.h,
// the kernel the update pipeline runs), GPU time per token of one decoder block forward,
// recompute + backward, and of the loss head (on the job's device and dtype), and on
// CUDA the pinned copy rates each way alone and at once and the free GPU memory; with
// several workers the collective's bus bandwidth (all-gathers among the job's GPUs over
// NCCL, or its CPU workers over the host communicator, one thread each). After every
// step, ReportStep hands the step's times and bytes to the plan manager, which refines
// the rates from them (runtime/plan/measurements.h). Calibrate and StartPlan run on the
// job's thread before the workers exist; ReportStep on the job's thread between steps.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/measurements.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/train_config.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

// Measures the rates for `config` on `model`. Errors are LibTorch or CUDA failures, and
// CANCELLED between measurements (and their repeats) once `stop` (may be null) is set.
absl::StatusOr<Calibration> Calibrate(const ModelConfig& model, const TrainConfig& config,
                                      const StopToken* stop = nullptr);

// The plan manager of a job (PlanManager::Start), calibrated by Calibrate when the plan
// asks for rates (policy.auto); Calibrate's errors are its.
absl::StatusOr<PlanManager> StartPlan(const ModelConfig& model, const TrainConfig& config,
                                      const StopToken* stop = nullptr);

// After a completed step: fills `stats`' predicted time and bottleneck (the prediction
// for the knobs it ran with) and hands its measurement to `plan` (PlanManager::AfterStep,
// whose new knobs it returns).
std::optional<PlanKnobs> ReportStep(PlanManager& plan, StepStats& stats, bool first_of_plan);

}  // namespace slidedp
