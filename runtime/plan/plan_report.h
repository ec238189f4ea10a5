// PlanReport: what a job's policy manager shows (GetPlan, `slidedp plan`,
// slidedp-train): the knobs in use, the prediction for them beside the last measured
// step, the rates it came from, the memory estimate against the budget, the
// candidates of the last search and what happened to the plan. Plain data; copied out
// of the trainer on the job's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"

namespace slidedp {

struct PlanReport {
  bool available = false;   // false: no trainer (yet), or one without a model
  bool auto_plan = false;   // policy.auto: the knobs were chosen by the policy
  PlanKnobs knobs;
  int64_t blocks = 0;       // the model's decoder blocks (knobs.policy.kept_blocks of them keep their graph)
  int64_t units = 0;        // the model's units (the first knobs.policy.resident_units of them are resident;
                            // prediction.memory.resident their bytes on the GPU holding most)
  StepPrediction prediction;
  Rates rates;
  double measured_step_seconds = 0.0;  // the last step's, 0 before the first
  int64_t steps = 0;                   // completed steps
  int64_t budget_bytes = 0;            // GPU memory budget per worker; 0: unlimited
  int64_t device_free_bytes = 0;       // at calibration; 0: unknown
  double calibration_seconds = 0.0;    // 0: not calibrated (the default rates, refined by steps)
  std::vector<std::string> calibration_notes;
  int replans = 0;                     // plans chosen after the first (drift)
  int oom_retries = 0;                 // steps retried after a GPU out-of-memory
  std::string last_change;             // why the plan is what it is, for people
  std::vector<Candidate> candidates;   // the last search's, in enumeration order
};

}  // namespace slidedp
