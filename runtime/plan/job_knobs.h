// JobKnobs: a job's TrainConfig as the plan sees it: the job's shape for the step-time
// model (runtime/plan/step_model.h), the knobs the config sets, and the config with
// other knobs applied (what the engine runs after a plan changes). Pure functions; any
// thread.
#pragma once

#include "runtime/plan/step_model.h"
#include "runtime/train_config.h"

namespace slidedp {

// The job's shape for the model, from its config (this host's batch, the device, the
// hosts).
JobShape JobShapeOf(const TrainConfig& config);
// The knobs `config` sets now.
PlanKnobs KnobsOf(const TrainConfig& config);
// `config` with `knobs` applied.
TrainConfig WithKnobs(const TrainConfig& config, const PlanKnobs& knobs);

}  // namespace slidedp
