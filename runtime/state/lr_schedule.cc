// Learning-rate schedule; see lr_schedule.h.
#include "runtime/state/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace slidedp {

double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps) {
  step = std::max<int64_t>(step, 0);
  if (step < opt.warmup_steps) {
    return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - opt.warmup_steps));
  const double t = std::clamp(static_cast<double>(step - opt.warmup_steps) / span, 0.0, 1.0);
  const double r = opt.min_lr_ratio;
  switch (opt.schedule) {
    case LrScheduleKind::kLinear:
      return opt.lr * (r + (1.0 - r) * (1.0 - t));
    case LrScheduleKind::kCosine:
      return opt.lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(M_PI * t)));
    case LrScheduleKind::kConstant:
      break;
  }
  return opt.lr;
}

}  // namespace slidedp
