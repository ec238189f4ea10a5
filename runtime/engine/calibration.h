// Calibration: the rates of the step-time model (runtime/plan/step_model.h), measured at
// job start in seconds, then refined from the running steps. At start: host memory
// bandwidth (a multi-threaded copy), the CPU AdamW rate (runtime/state/adamw.h, the
// kernel the update pipeline runs), GPU time per token of one decoder block forward,
// recompute + backward, and of the loss head (on the job's device and dtype), and on
// CUDA the pinned copy rates each way alone and at once and the free GPU memory; with
// several workers the collective's bus bandwidth (all-gathers among the job's GPUs over
// NCCL, or its CPU workers over the host communicator, one thread each). From
// steps: the AdamW rate from the update thread's busy time, the copy rates where the
// streams were timed, and the GPU times scaled by measured / predicted when the model
// says the GPU is the bottleneck, each as an exponentially weighted average.
// Calibrate runs on the job's thread before the workers exist; RefineRates on the
// job's thread between steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/step_model.h"
#include "runtime/train_config.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

// The job's shape for the model, from its config (the batch and the device).
JobShape JobShapeOf(const TrainConfig& config);
// The knobs `config` sets now.
PlanKnobs KnobsOf(const TrainConfig& config);
// `config` with `knobs` applied.
TrainConfig WithKnobs(const TrainConfig& config, const PlanKnobs& knobs);

struct Calibration {
  Rates rates;
  double seconds = 0.0;              // how long calibrating took
  int64_t device_free_bytes = 0;     // 0: unknown (the CPU device)
  int64_t device_total_bytes = 0;
  std::vector<std::string> notes;    // what was measured and what kept its default
};

// Measures the rates for `config` on `model`. Errors are LibTorch or CUDA failures, and
// CANCELLED between measurements (and their repeats) once `stop` (may be null) is set.
absl::StatusOr<Calibration> Calibrate(const ModelConfig& model, const TrainConfig& config,
                                      const StopToken* stop = nullptr);

// Folds a finished step into `rates` with weight `alpha` (0..1). `predicted` is the
// model's prediction for that step with the rates before.
void RefineRates(const StepStats& step, const StepPrediction& predicted, const ModelShape& shape,
                 double alpha, Rates& rates);

}  // namespace slidedp
