// Measurements: see measurements.h.
#include "runtime/plan/measurements.h"

#include <algorithm>
#include <cmath>

namespace slidedp {

void RefineRates(const StepMeasurement& step, const StepPrediction& predicted, const ModelShape& shape, double alpha,
                 Rates& r) {
  auto blend = [alpha](double& rate, double measured) {
    if (measured > 0 && std::isfinite(measured)) rate = (1 - alpha) * rate + alpha * measured;
  };
  // The CPU updates the streamed units only (resident ones update on their GPU, staged
  // ones too, and the update thread's busy time leaves them out).
  const int64_t cpu_params = shape.total_params() - predicted.resident_params - predicted.staged_params;
  if (!step.skipped && step.update_busy_seconds > 0 && cpu_params > 0) {
    blend(r.adamw_params_per_s, static_cast<double>(cpu_params) / step.update_busy_seconds);
  }
  for (const LinkMeasurement& w : step.workers) {
    if (w.h2d_busy_seconds > 0) blend(r.h2d_gbps, static_cast<double>(w.h2d_bytes) / w.h2d_busy_seconds / 1e9);
    if (w.d2h_busy_seconds > 0) blend(r.d2h_gbps, static_cast<double>(w.d2h_bytes) / w.d2h_busy_seconds / 1e9);
  }
  if (predicted.bottleneck == kResGpu && predicted.step_seconds > 0 && step.step_seconds > 0) {
    const double ratio = std::clamp(step.step_seconds / predicted.step_seconds, 0.5, 2.0);
    const double f = 1 + alpha * (ratio - 1);
    for (double* x : {&r.forward_s, &r.recompute_s, &r.backward_s, &r.head_s, &r.embed_s, &r.grad_s_per_param,
                      &r.launch_s}) {
      *x *= f;
    }
  }
}

}  // namespace slidedp
