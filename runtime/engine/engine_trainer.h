// EngineTrainer: the Trainer on the engine (trainer.h), declared here so that its
// methods can live in two files: trainer.cc (creation, the step, evaluation,
// checkpoints) and trainer_plan.cc (plan changes and out-of-memory retries). Internal
// to runtime/engine/: everything else creates and uses it through Trainer. Called from
// the job's thread, one call at a time, as Trainer says.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/data/dataset.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/host_group.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/staged_updates.h"
#include "runtime/engine/routes.h"
#include "runtime/engine/step_trace.h"
#include "runtime/io/stop_token.h"
#include "runtime/engine/trainer.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/engine/worker.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/plan/plan_report.h"
#include "runtime/state/checkpoint.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace trainer_internal {

class EngineTrainer final : public Trainer {
 public:
  // `config` as the job asked, `effective` with the plan's knobs applied.
  // `stop` may be null (TrainerInputs::stop).
  EngineTrainer(const TrainConfig& config, const TrainConfig& effective, const ModelConfig& model,
                std::unique_ptr<HostState> state, std::unique_ptr<Dataset> data, EvalOptions eval,
                PlanManager plan, std::shared_ptr<const StopToken> stop)
      : requested_(config), config_(effective), model_(model), state_(std::move(state)), data_(std::move(data)),
        eval_(std::move(eval)), plan_(std::move(plan)), stop_(std::move(stop)), probe_(config.policy.auto_plan || config.policy.kept_blocks < 0 ||
                                                       config.policy.resident_units < 0) {
    if (eval_.dataset != nullptr) eval_start_ = eval_.dataset->Cursor();
  }

  // Several hosts (issue 24): the groups this trainer talks to the other hosts through
  // (host_group.h), one per thread: the trainer's (losses, the digest, export,
  // checkpoints), the landings' reduction and the updates' gather. Before Init.
  struct HostLinks {
    std::unique_ptr<HostGroup> trainer, link, update;
  };
  void SetHosts(HostLinks hosts) {
    hosts_ = std::move(hosts);
    ForgetHostBytes();
  }
  // Several hosts: what was sent so far (the rendezvous' measurement, placing the
  // resident units, a restore's gathers) is no step's. Before the first step.
  void ForgetHostBytes() {
    if (hosts_.trainer != nullptr) host_bytes_before_ = hosts_.trainer->bytes_sent() + hosts_.link->bytes_sent();
  }

  // Allocates the update pipeline and the workers.
  absl::Status Init();

  // Allocates the shared route state and the workers (device buffers included) for
  // config_'s knobs: errors such as a GPU out of memory come back here.
  absl::Status BuildWorkers();
  ~EngineTrainer() override {
    workers_.clear();
    pipeline_.reset();  // its last updates may still use resident_, staged_ and the host groups
    staged_.reset();
    resident_.reset();
  }

  // The public entry points return exceptions as statuses (exception_status.h).
  absl::StatusOr<StepStats> Step() override {
    return GuardExceptions("the engine", [&] { return RunStep(); });
  }
  absl::Status Drain() override {
    return GuardExceptions("draining the updates", [&] {
      pipeline_->Drain();
      return absl::OkStatus();
    });
  }
  int64_t completed_steps() const override { return step_; }
  const TrainConfig& config() const override { return requested_; }
  PlanReport Plan() const override { return plan_.report(); }
  absl::Status UsePlan(const PlanKnobs& knobs) override {  // trainer_plan.cc
    return GuardExceptions("changing the plan", [&] { return ChangePlan(knobs); });
  }
  const ModelConfig& model_config() const override { return model_; }
  int64_t num_parameters() const override { return state_->layout().total_numel; }
  std::string WeightsDigest() override {
    SyncHost().IgnoreError();  // a failed update leaves the host as it was: its digest
    if (hosts_.trainer == nullptr) return state_->MasterDigest();
    absl::StatusOr<std::vector<at::Tensor>> whole = WholeMasters();
    return whole.ok() ? MasterDigestOf(*whole) : std::string(whole.status().message());
  }
  absl::StatusOr<std::string> SaveCheckpoint() override {
    if (absl::Status s = CheckWholeState("checkpoint"); !s.ok()) return s;
    return GuardExceptions("writing a checkpoint", [&] { return WriteCheckpointNow(); });
  }
  int64_t tokens_seen() const override { return tokens_seen_; }
  int64_t host_state_bytes() const override { return state_->bytes(); }
  absl::StatusOr<std::vector<double>> AgreeOverHosts(std::vector<double> mine) override {
    if (hosts_.trainer == nullptr) return mine;
    if (absl::Status s = hosts_.trainer->AllReduceSum(mine); !s.ok()) return s;
    return mine;
  }
  ResumeReport resumed() const override { return resumed_; }
  // Continues from resume_from `from`, a checkpoint file or a directory whose newest
  // checkpoint that verifies is taken (right after construction, before any step).
  absl::Status Restore(const std::string& from);
  // Restore from `from`, a checkpoint file or a folder of this host's checkpoints.
  absl::Status RestoreHere(const std::string& from);
  absl::Status ExportHf(const std::string& dir) override {
    if (absl::Status s = CheckWholeState("export"); !s.ok()) return s;
    return GuardExceptions("exporting the weights", [&] { return WriteHf(dir); });
  }

 private:
  absl::StatusOr<StepStats> RunStep();
  // config_'s resident units and kept blocks left to auto (-1): resolved together as the
  // plan does (activation_policy.h) against the GPUs' memory now; none on the CPU device.
  void ResolveAutoCounts(const std::vector<at::Device>& devices);
  // The units resident on a GPU for config_'s knobs (none: resident_ stays null);
  // before the workers, which read and land through them (RouteShared::resident).
  // Several hosts place them once, at the job's start, all hosts together (an empty
  // ResidentState when none), and keep them through plan changes.
  absl::Status BuildResident(const std::vector<at::Device>& devices);
  // The streamed units whose update a GPU runs (policy.staged_updates; none: staged_
  // stays null), after the resident units (they are the last units left streamed).
  absl::Status BuildStaged(const std::vector<at::Device>& devices);
  // Before the workers are rebuilt: the resident units' state back to the host state,
  // which then holds every unit (updates drained), and the staged updates' buffers
  // freed. Several hosts: only the drain.
  void DropResident();
  // Drains the updates and brings the resident units' state to the host state, for
  // checkpoints, export and the digest; the error of a failed update.
  absl::Status SyncHost();
  // Several hosts: every unit's whole fp32 master, each host's shard gathered (the
  // trainer's group; every host calls it).
  absl::StatusOr<std::vector<at::Tensor>> WholeMasters();
  // Several hosts: every unit's streamed copy whole again after each host rewrote its
  // shard from the master (a restore).
  absl::Status GatherParams();
  // Several hosts: the sum of `value` over them (the trainer's group); itself on one.
  absl::StatusOr<double> SumOverHosts(double value);
  // This host's checkpoints: the job's checkpoint folder, or its host-R-of-H folder.
  std::string HostCheckpointDir(const std::string& dir) const;
  absl::StatusOr<std::string> WriteCheckpointNow();
  absl::Status WriteHf(const std::string& dir);
  absl::Status ChangePlan(const PlanKnobs& knobs);  // trainer_plan.cc
  // FAILED_PRECONDITION when a stopped step left the host state part-way (`what`:
  // "checkpoint" or "export").
  absl::Status CheckWholeState(const char* what) const;
  // After a step stopped (cancel or shutdown) in its workers: forgets its landings so
  // that the host state is that of the last completed step, when its updates were held
  // back; else marks the state part-way. Returns `stopped`.
  absl::Status AfterStoppedStep(absl::Status stopped);
  // Splits a batch of rows into per-worker micro-batches of int64 tensors.
  absl::StatusOr<std::vector<WorkerBatch>> Split(const TokenBatch& b, int64_t* target_tokens) const;
  // Runs `run(w)` for every worker w on a thread of its own; the first error names
  // `what` and the worker.
  absl::StatusOr<std::vector<WorkerStepResult>> OnEveryWorker(
      const std::string& what, const std::function<absl::StatusOr<WorkerStepResult>(int)>& run);
  // The held-out evaluation after completed_steps() steps, into s.eval_*.
  absl::Status Evaluate(StepStats& s);
  // Continues from checkpoint file `path`; `*corrupt` tells a file that fails
  // verification (DATA_LOSS: a directory's resume then tries the next older one).
  absl::Status RestoreFile(const std::string& path, bool* corrupt);
  // The host state's buffers, unit by unit, for checkpoint files.
  std::vector<CheckpointUnit> CheckpointUnits();
  // After a step: counts non-finite steps (failing after max_bad_steps in a row) and
  // writes the interval's checkpoint.
  absl::Status AfterStep(const StepUpdateSummary& u, StepStats& s);
  // Runs every worker's part of the step on `batch`; the first error, naming the worker.
  absl::StatusOr<std::vector<WorkerStepResult>> RunWorkers(const TokenBatch& batch, double lr, int64_t* tokens);

  // Plan changes and out-of-memory retries: trainer_plan.cc.
  // Rebuilds the workers for `knobs` (after the updates issued so far are applied); the
  // next step is the new plan's first.
  absl::Status ApplyKnobs(const PlanKnobs& knobs);
  // After a GPU out-of-memory in the workers: forgets the step's landings, shrinks the
  // plan until the workers fit, so that the same step can run again.
  absl::Status RecoverFromOutOfMemory(absl::Status error);
  // Whether a GPU out-of-memory in the step that just failed may shrink the plan and run
  // the step again: with policy.auto; or with kept blocks the job left to auto, while any
  // are kept and this step's updates waited for its last landing (clipping, or a plan's
  // first step), so that nothing of it was applied. Never over several hosts.
  bool CanShrinkAfterOutOfMemory() const;
  // Shrinks the plan and rebuilds the workers while `error` is an out-of-memory
  // (`step`: the 0-based step it happened in, or about to run).
  absl::Status ShrinkUntilBuilt(absl::Status error, int64_t step);

  const TrainConfig requested_;  // as the job asked: checkpoints and config()
  TrainConfig config_;           // with the plan's knobs: the workers hold a reference
  const ModelConfig model_;
  std::unique_ptr<HostState> state_;
  std::unique_ptr<Dataset> data_;
  EvalOptions eval_;
  std::string eval_start_;  // eval_.dataset's cursor when the trainer was created
  std::unique_ptr<RouteShared> shared_;
  std::unique_ptr<StepTrace> trace_;
  std::unique_ptr<UpdatePipeline> pipeline_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<ResidentState> resident_;  // null: every unit streams
  std::unique_ptr<StagedUpdates> staged_;    // null: the CPU updates every streamed unit
  HostLinks hosts_;                          // null groups: one host
  int64_t host_bytes_before_ = 0;  // the trainer's and link's bytes sent at the last step's end
  PlanManager plan_;
  const std::shared_ptr<const StopToken> stop_;  // may be null
  bool partial_state_ = false;  // a stopped step applied some of its updates: no checkpoint
  bool probe_ = false;  // the next step is a plan's first: its updates wait for its last landing
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t bad_in_row_ = 0;
  ResumeReport resumed_;
};

// A job over several hosts (trainer_hosts.cc): meets the others at config.hosts's
// rendezvous, opens a group per thread and gives `plan` the network it measured.
absl::StatusOr<EngineTrainer::HostLinks> ConnectHosts(const HostsConfig& hosts, PlanManager& plan);

}  // namespace trainer_internal
}  // namespace slidedp
