// UpdatePipeline: the CPU side of DESIGN.md's step 5. It learns when each unit's
// reduced gradient has landed in the host state, keeps the per-unit squared norms, and
// runs AdamW on its own thread: with clipping, once every unit has landed, in forward
// order (overlapping the next step's forward); without clipping, each unit as soon as
// it lands (overlapping backward); queued updates run earliest deadline first (the
// lowest unit, which the next forward needs soonest), except that the staged units'
// (policy.staged_updates) are issued to their GPU before any CPU update. It publishes a
// version per unit so that workers start a unit's next forward only after its update.
// Threads: GradLanded/WaitParamsReady from worker threads, BeginStep/Drain/Summary from
// the trainer's thread, the updates on the pipeline's own thread; over several hosts,
// the reduce-scatters on the link's thread and the all-gathers of updated copies on the
// gather's (the reductions in the backward's order, the gathers in the order the units
// landed from them: the same on every host).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/engine/serial_executor.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config.h"

namespace slidedp {

class HostGroup;
class ResidentState;
class StagedUpdates;
class StepTrace;

struct StepUpdateSummary {
  double grad_norm = 0.0;   // global L2 norm before clipping
  double clip_scale = 1.0;  // factor applied to the gradients
  double lr = 0.0;
  bool skipped = false;     // non-finite gradient: no update of this step
  int bad_unit = -1;        // first unit whose gradient was non-finite
};

class UpdatePipeline {
 public:
  UpdatePipeline(HostState* state, const TrainConfig& config);
  ~UpdatePipeline();  // drains, then joins the update thread

  // Trainer: step `step` (0-based) begins; `lr` is its learning rate. `hold`: without
  // clipping too, no update of this step starts before its last gradient has landed,
  // so that a step that fails before then (a GPU out of memory) can be run again from
  // the same host state (AbortStep). The updates are the same either way.
  void BeginStep(int64_t step, double lr, bool hold = false);

  // Trainer, after step `step` failed in its workers: forgets its landings. FAILED_PRECONDITION
  // if an update of `step` was already issued (the host state is no longer the step's
  // start). The previous step's updates may still run; Drain() waits for them.
  absl::Status AbortStep(int64_t step);

  // Worker: blocks until unit `u` holds the weights that step `step` must use (that is,
  // the updates of steps 0..step-1 are applied). Returns the seconds waited.
  double WaitParamsReady(int u, int64_t step);

  // Worker (one call per unit per step): unit `u`'s reduced gradient of `step` is in
  // state->unit(u).grad, with squared L2 norm `sumsq`. Several hosts reduce the units
  // over the hosts in the backward's order (the last unit first), whatever order they
  // land in here.
  void GradLanded(int u, int64_t step, double sumsq);

  // Trainer, once per step after every worker finished `step`: the gradient summary
  // (norm, clip scale, skipped). Updates may still be running.
  StepUpdateSummary Summary(int64_t step);

  // Blocks until every update issued so far is applied; returns the CPU seconds the
  // update thread spent on AdamW since the last Drain/TakeBusySeconds.
  void Drain();
  double TakeBusySeconds();
  // OK, or the first update that failed (a GPU update's launch error): the host state
  // and the resident units no longer belong to one step; the trainer fails the job.
  absl::Status status();
  // Several hosts: the bytes this host sent gathering the updated copies of step
  // `step`'s updates (complete once the next step's forward has fetched every unit);
  // forgets them and those of earlier steps.
  int64_t TakeGatheredBytes(int64_t step);

  // Checkpoints (trainer's thread, between steps, after Drain()): the AdamW steps
  // applied so far, and a restore that makes the pipeline continue after `steps`
  // completed steps of which `adam_steps` applied an update.
  int64_t adam_steps();
  void RestoreProgress(int64_t steps, int64_t adam_steps);
  // Adds a span per unit update to `trace` (may be null). Before the first step.
  void set_trace(StepTrace* trace) { trace_ = trace; }
  // The units resident on a GPU (may be null): their updates are issued there
  // (ResidentState::Update) instead of run here. Trainer's thread, after Drain().
  void set_resident(ResidentState* resident) { resident_ = resident; }
  // The streamed units whose AdamW a GPU runs (may be null): issued there
  // (StagedUpdates::Issue) before any CPU update, so that the GPU's copies and the CPU's
  // updates overlap; each is done when the host state holds it. Trainer's thread, after
  // Drain().
  void set_staged(StagedUpdates* staged) { staged_ = staged; }
  // Several hosts (null: one): `link` reduces each landed unit's gradient over the hosts
  // into this host's shard (a resident unit's: the whole sum on every host) and sums
  // the norm (on a thread of its own, in the backward's order), before the unit counts
  // as landed; `gather` brings the other hosts' shards of each updated streamed unit's
  // copy (on the update thread, updates then in the order the link landed them). Each a group of its own
  // (HostGroup::Channel). Before the first step.
  void set_hosts(HostGroup* link, HostGroup* gather);

 private:
  struct Task {
    int unit;
    int64_t step;
    double scale;
    bool skip;
    double lr;
    int64_t adam_step;  // 1-based AdamW step for bias correction
  };
  void Loop();
  // The step's landings so far, their norms and the reductions waiting over the hosts,
  // as at BeginStep (its lr kept).
  void ForgetLandings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The unit's gradient of every worker is in the host state (GradLanded's part after
  // any reduction over the hosts), with squared norm `sumsq`.
  void Landed(int u, int64_t step, double sumsq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The link's task for unit `u`: reduce-scatter over the hosts, the norm summed.
  absl::Status ReduceOverHosts(int u, int64_t step);
  // Update `t` is done (applied or skipped and, over several hosts, gathered), with
  // status `s`: the unit is ready for the next forward.
  void Done(const Task& t, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(const Task& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(const Task& t);
  // AdamW's hyperparameters for `t`, and each parameter's weight decay of unit `u`.
  AdamWHyper Hyper(const Task& t) const;
  std::vector<float> Decays(int u) const;
  // Issues `t` on its GPU (StagedUpdates); Done once the host state holds it.
  void IssueStaged(const Task& t);

  HostState* const state_;
  const TrainConfig config_;
  const int units_;
  const bool clip_;

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> version_ ABSL_GUARDED_BY(mu_);  // updates applied or skipped, per unit
  std::vector<double> sumsq_ ABSL_GUARDED_BY(mu_);
  // Several hosts: the units landed here whose reduction waits for a later unit's
  // (GradLanded), and the next unit to reduce (the last first).
  std::vector<bool> link_waiting_ ABSL_GUARDED_BY(mu_);
  int link_next_ ABSL_GUARDED_BY(mu_) = -1;
  int landed_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int issued_this_step_ ABSL_GUARDED_BY(mu_) = 0;  // updates enqueued for step_
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;
  double lr_ ABSL_GUARDED_BY(mu_) = 0.0;
  int64_t adam_steps_ ABSL_GUARDED_BY(mu_) = 0;  // steps whose updates were applied
  StepUpdateSummary summary_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  double busy_seconds_ ABSL_GUARDED_BY(mu_) = 0.0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> gathered_bytes_ ABSL_GUARDED_BY(mu_);  // per step of the updates
  StepTrace* trace_ = nullptr;
  ResidentState* resident_ = nullptr;
  StagedUpdates* staged_ = nullptr;
  HostGroup* link_ = nullptr;
  HostGroup* gather_ = nullptr;
  std::unique_ptr<SerialExecutor> link_executor_;
  std::unique_ptr<SerialExecutor> gather_executor_;  // several hosts: the updated copies' all-gathers
  std::thread thread_;
};

}  // namespace slidedp
