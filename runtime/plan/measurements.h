// Measurements: what the engine measured for the step-time model (step_model.h), as
// plain data that the plan owns: the rates measured at job start (Calibration) and the
// times and bytes of one finished step (StepMeasurement). The engine fills both
// (runtime/engine/calibration.h); the plan never sees the engine's trainer, streams or
// communicator. RefineRates folds a step into the rates: the AdamW rate from the update
// thread's busy time (over the streamed units' parameters), the copy rates where the streams were timed, and the GPU times
// scaled by measured / predicted when the model says the GPU is the bottleneck, each as
// an exponentially weighted average. No LibTorch; the job's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plan/step_model.h"

namespace slidedp {

// The rates measured at job start, with what the measuring found out on the way.
struct Calibration {
  Rates rates;
  double seconds = 0.0;              // how long calibrating took
  int64_t device_free_bytes = 0;     // 0: unknown (the CPU device)
  int64_t device_total_bytes = 0;
  std::vector<std::string> notes;    // what was measured and what kept its default
};

// One worker's copies in a step.
struct LinkMeasurement {
  int64_t h2d_bytes = 0;          // parameter bytes host -> this device
  int64_t d2h_bytes = 0;          // gradient bytes this device -> host
  double h2d_busy_seconds = 0.0;  // time its H2D stream was copying (0 if unmeasured)
  double d2h_busy_seconds = 0.0;  // time its D2H stream was copying (0 if unmeasured)
};

// A finished step.
struct StepMeasurement {
  int64_t step = 0;                  // completed steps, this one included (1-based)
  double step_seconds = 0.0;         // wall time of the step
  bool skipped = false;              // no update was applied
  double update_busy_seconds = 0.0;  // CPU AdamW time of this step's updates
  std::vector<LinkMeasurement> workers;  // per worker, in rank order
};

// Folds the finished `step` into `rates` with weight `alpha` (0..1). `predicted` is the
// model's prediction for that step with the rates before.
void RefineRates(const StepMeasurement& step, const StepPrediction& predicted, const ModelShape& shape,
                 double alpha, Rates& rates);

}  // namespace slidedp
