// PlanManager: the policy manager of one job (DESIGN.md, "Step-time model and
// policy"). At job start it chooses the plan from the engine's calibration
// (policy.auto), or takes the job's knobs as given with default rates; after every step
// it refines the rates from the step's measurement, and with policy.auto decides to
// re-plan when the drift stays over policy.replan_threshold; after a GPU out-of-memory
// it gives the smaller plan to retry with. The engine measures and applies the knobs
// (runtime/engine/calibration.h, trainer_plan.cc); this class only decides and reports.
// Threads: the job's thread only (the trainer's Step and Create).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/measurements.h"
#include "runtime/plan/plan_report.h"
#include "runtime/plan/policy.h"
#include "runtime/train_config.h"

namespace slidedp {

class PlanManager {
 public:
  // With policy.auto: takes the rates from `calibrate` (called once, here; its error is
  // Start's) and chooses the plan within the memory budget (RESOURCE_EXHAUSTED when
  // nothing fits). Without: the config's knobs with default rates (`calibrate` is not
  // called).
  static absl::StatusOr<PlanManager> Start(const ModelConfig& model, const TrainConfig& config,
                                           const std::function<absl::StatusOr<Calibration>()>& calibrate);

  // The knobs to run with now.
  const PlanKnobs& knobs() const { return report_.knobs; }
  const StepPrediction& prediction() const { return report_.prediction; }

  // The number of kept blocks the engine runs with: policy.kept_blocks resolved against
  // the device's memory when the knobs left it to auto (-1), or at most the layers.
  void SetKeptBlocks(int64_t kept);

  // The number of units resident on a GPU the engine runs with: policy.resident_units
  // resolved against the device's memory (ResidentUnits) when the knobs left it to auto
  // (-1), or at most the units.
  void SetResidentUnits(int64_t units);

  // Several hosts: the network between them as the engine measured it at job start
  // (bytes a host sends a second in an all-gather, and one exchange's latency); the
  // prediction follows. Also noted in the calibration notes.
  void SetCrossHostRate(double gbps, double latency_seconds);

  // The host state lands gradients in bf16 (true) or fp32: later plans keep to routes
  // that allow it.
  void FixLanding(bool bf16);

  // After a completed step, run with the knobs of prediction(): refines the rates (not
  // from a plan's first step, which warms up), and with policy.auto returns new knobs
  // when the drift calls for a re-plan and the search finds a different plan.
  std::optional<PlanKnobs> AfterStep(const StepMeasurement& measured, bool first_of_plan);

  // After a GPU out-of-memory `error` in step `step` (1-based) with the current knobs:
  // the smaller plan to retry with (with policy.auto off, only half the kept blocks when
  // the job left their count to auto, then half the resident units when it left theirs);
  // the error itself, with a note, when nothing is left to shrink.
  absl::StatusOr<PlanKnobs> AfterOutOfMemory(const absl::Status& error, int64_t step);

  // Knobs chosen by someone else (Trainer::UsePlan), from now on; the landing stays.
  void Force(const PlanKnobs& knobs);

  const PlanReport& report() const { return report_; }

 private:
  PlanManager(const ModelConfig& model, const TrainConfig& config);
  // Uses `knobs` from now on and predicts them.
  void Use(const PlanKnobs& knobs);

  ModelShape shape_;
  JobShape job_;
  double threshold_;
  int64_t requested_kept_;  // the job's policy.kept_blocks (-1: auto)
  int64_t requested_resident_;  // the job's policy.resident_units (-1: auto)
  DriftMonitor drift_;
  PlanReport report_;
};

}  // namespace slidedp
