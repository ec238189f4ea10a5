// JobManager's job thread: takes the next queued job, creates its Trainer, runs
// Step() until the job's steps are done, honoring pause, resume, cancel and shutdown
// at step boundaries, then drains, records the weights digest and exports. Jobs with a
// checkpoint_dir write a checkpoint on pause, cancel and shutdown (and every
// checkpoint_interval steps, in Trainer::Step), and continue from it after a restart.
// Cancel and shutdown also set the running job's StopToken, so that a long creation,
// evaluation or step returns CANCELLED and is handled here as a boundary. Whatever the
// engine throws ends the job FAILED, never the daemon.
// Runs on the job thread only; takes mu_ between engine calls, never across them.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/io/user_text.h"
#include "runtime/engine/exception_status.h"
#include "runtime/state/checkpoint.h"
#include "server/job_manager.h"
#include "server/log.h"
#include "server/spec_translation.h"

namespace slidedp::server {
namespace {

constexpr double kDefaultCudaPeakFlops = 989.4e12;

v1::StepEvent ToStepEvent(const StepStats& s) {
  v1::StepEvent e;
  e.set_step(s.step);
  e.set_loss(s.loss);
  e.set_grad_norm(s.grad_norm);
  e.set_lr(s.lr);
  e.set_tokens(s.tokens);
  e.set_step_seconds(s.step_seconds);
  e.set_tokens_per_second(s.tokens_per_second);
  e.set_skipped(s.skipped);
  e.set_forward_seconds(s.forward_seconds);
  e.set_backward_seconds(s.backward_seconds);
  e.set_update_wait_seconds(s.update_wait_seconds);
  e.set_update_busy_seconds(s.update_busy_seconds);
  e.set_h2d_bytes(s.h2d_bytes);
  e.set_d2h_bytes(s.d2h_bytes);
  if (s.eval_loss.has_value()) e.set_eval_loss(*s.eval_loss);
  e.set_eval_tokens(s.eval_tokens);
  return e;
}

// Where a restored job continues from, for its event and the log: "step 0 (...)", or the
// checkpoint, with the newer ones that failed verification and why.
std::string ResumeNote(const ResumeReport& r) {
  if (r.path.empty()) return "step 0 (no checkpoint was written yet)";
  if (r.passed_over.empty()) return r.path;
  constexpr size_t kNamed = 3;  // keep_checkpoints may be large: name a few
  const size_t n = r.passed_over.size();
  std::vector<std::string> named(r.passed_over.begin(), r.passed_over.begin() + std::min(n, kNamed));
  if (n > kNamed) named.push_back(absl::StrCat("and ", n - kNamed, " more"));
  return absl::StrCat(r.path, ", not from the newer ", n == 1 ? "checkpoint" : absl::StrCat(n, " checkpoints"),
                      " that failed verification (", absl::StrJoin(named, "; "), ")");
}

}  // namespace

void JobManager::JobThread() {
  for (;;) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      while (!shutdown_ && queue_.empty()) changed_.Wait(&mu_);
      if (shutdown_) return;
      id = queue_.front();
      queue_.pop_front();
    }
    try {
      RunJob(id);
    } catch (...) {
      // The last resort: the trainer's entry points return statuses, but nothing that
      // escapes a job may end the daemon.
      const absl::Status s = CurrentExceptionStatus("the job's thread");
      Log(absl::StrCat("job ", id, ": ", s.ToString()));
      Finish(id, v1::JOB_STATE_FAILED, std::string(s.message()));
    }
    absl::MutexLock lock(&mu_);
    running_stop_.reset();
    running_hosts_ = 1;
  }
}

bool JobManager::StartRestored(Entry& e) {
  e.restored = false;
  running_id_ = e.job.id();
  running_stop_ = std::make_shared<StopToken>();
  if (e.job.state() == v1::JOB_STATE_PAUSED) {
    Log(absl::StrCat("job ", e.job.id(), " stays PAUSED at step ", e.job.step(),
                     " (holding the GPUs); resume continues it from its checkpoint"));
    while (!shutdown_ && e.job.state() == v1::JOB_STATE_PAUSED) changed_.Wait(&mu_);
    if (e.job.state() != v1::JOB_STATE_RUNNING) {  // cancelled, or shut down while paused
      running_id_.clear();
      return false;
    }
    return true;
  }
  SetState(e, v1::JOB_STATE_RUNNING, "continuing after a daemon restart");
  return true;
}

void JobManager::RunJob(const std::string& id) {
  v1::JobSpec spec;
  bool restored = false;
  {
    absl::MutexLock lock(&mu_);
    Entry* e = Find(id);
    if (e == nullptr) return;
    if (e->restored) {
      restored = true;
      if (!StartRestored(*e)) return;
    } else {
      if (e->job.state() != v1::JOB_STATE_QUEUED) return;
      running_id_ = id;
      running_stop_ = std::make_shared<StopToken>();
      SetState(*e, v1::JOB_STATE_RUNNING, "started");
    }
    CountRun(*e);  // undone by a clean shutdown, reset by a completed step
    spec = e->job.spec();
  }
  absl::StatusOr<TrainConfig> config = options_.translator(spec);
  if (!config.ok()) {
    Finish(id, v1::JOB_STATE_FAILED, absl::StrCat("spec: ", config.status().message()));
    return;
  }
  BindConfigToJob(id, &*config);  // its own run id and checkpoint directory
  {
    absl::MutexLock lock(&mu_);
    running_hosts_ = config->hosts.count;
  }
  if (restored) {
    // The trainer takes the job's newest checkpoint that verifies (Trainer::resumed()).
    absl::StatusOr<std::vector<std::string>> found = ListCheckpoints(config->checkpoint_dir);
    if (!found.ok()) {
      Finish(id, v1::JOB_STATE_FAILED, absl::StrCat("finding its checkpoint: ", found.status().message()));
      return;
    }
    if (!found->empty()) config->resume_from = config->checkpoint_dir;
  }
  std::shared_ptr<const StopToken> stop;
  {
    absl::MutexLock lock(&mu_);
    stop = running_stop_;
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = options_.trainer_factory(*config, stop);
  if (!trainer.ok() && absl::IsCancelled(trainer.status()) && StopRequested(stop.get())) {
    StoppedBeforeStart(id, *config);
    return;
  }
  if (!trainer.ok()) {
    Finish(id, v1::JOB_STATE_FAILED, absl::StrCat("creating the trainer: ", trainer.status().message()));
    return;
  }
  if (restored) {
    std::string from = ResumeNote((*trainer)->resumed());
    if ((*trainer)->resumed().path.empty()) {
      // Checkpoints directly in the spec's checkpoint_dir have no owner we can trust
      // (a daemon before per-job folders wrote them there, or another job did): say so
      // rather than start over silently.
      absl::StatusOr<std::vector<std::string>> loose = ListCheckpoints(spec.checkpoint_dir());
      if (loose.ok() && !loose->empty()) {
        from = absl::StrCat(from, "; the ", loose->size(), " checkpoints directly in ", spec.checkpoint_dir(),
                            " are not taken: a job's checkpoints are kept in ", config->checkpoint_dir,
                            " (resume one with slidedp-train's resume_from if it is this job's)");
      }
    }
    absl::MutexLock lock(&mu_);
    Entry& e = *Find(id);
    e.job.set_step((*trainer)->completed_steps());
    e.job.set_tokens_seen((*trainer)->tokens_seen());
    Persist(e);
    Emit(e, v1::JobEvent::TYPE_STATE_CHANGE, absl::StrCat("continuing from ", from), nullptr);
    Log(absl::StrCat("job ", id, " continues at step ", e.job.step(), " from ", from));
  }
  RunSteps(id, *config, *std::move(trainer));
}

std::string JobManager::CheckpointNote(const TrainConfig& config, Trainer& trainer) {
  if (config.checkpoint_dir.empty()) return "";
  absl::StatusOr<std::string> path = trainer.SaveCheckpoint();
  if (!path.ok()) {
    Log(absl::StrCat("checkpoint failed: ", path.status().ToString()));
    return absl::StrCat(" (checkpoint failed: ", path.status().message(), ")");
  }
  return absl::StrCat(" (checkpoint ", *path, ")");
}

void JobManager::StoppedBeforeStart(const std::string& id, const TrainConfig& config) {
  bool cancelled = false, kept = false;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = *Find(id);
    cancelled = e.job.cancel_requested() || !shutdown_;
    kept = !cancelled && !config.checkpoint_dir.empty();
    if (kept) {
      // As a shutdown between steps: stays RUNNING in the store, the next start
      // continues it (from its checkpoint, if it has one).
      running_id_.clear();
      Persist(e);
    }
  }
  if (cancelled) {
    Finish(id, v1::JOB_STATE_CANCELLED, "cancelled while starting");
  } else if (kept) {
    Log(absl::StrCat("job ", id, " stopped by daemon shutdown while starting; the next start continues it"));
  } else {
    Finish(id, v1::JOB_STATE_FAILED, "interrupted by daemon shutdown while starting; its host state was lost");
  }
}

void JobManager::RunSteps(const std::string& id, const TrainConfig& config,
                          std::unique_ptr<Trainer> trainer) {
  const int64_t num_parameters = trainer->num_parameters();
  const StopToken* stop = nullptr;  // the job thread keeps it until the job ends
  {
    absl::MutexLock lock(&mu_);
    stop = running_stop_.get();
    Find(id)->job.set_num_parameters(num_parameters);
  }
  RecordPlan(id, *trainer);
  for (;;) {
    absl::Status error;
    const Boundary boundary = AtStepBoundary(id, *trainer, &error);
    const int64_t step = trainer->completed_steps();
    if (boundary != Boundary::kContinue) {
      // Cancel and shutdown keep a checkpoint when the job has a checkpoint_dir.
      std::string note;
      if (boundary == Boundary::kCancel || boundary == Boundary::kShutdown || boundary == Boundary::kPeerShutdown) {
        note = CheckpointNote(config, *trainer);
      }
      trainer.reset();  // frees the host state before the state change is announced
      if (boundary == Boundary::kCancel) {
        Finish(id, v1::JOB_STATE_CANCELLED, absl::StrCat("cancelled at step ", step, note));
      } else if (boundary == Boundary::kShutdown && !config.checkpoint_dir.empty()) {
        // Stays RUNNING (or PAUSED) in the store: the next start continues it.
        absl::MutexLock lock(&mu_);
        running_id_.clear();
        Entry& e = *Find(id);
        if (e.run_counted) {  // a clean stop: this run does not count against the job
          e.run_counted = false;
          e.job.set_runs_without_progress(std::max(0, e.job.runs_without_progress() - 1));
        }
        Persist(e);
        Log(absl::StrCat("job ", id, " stopped by daemon shutdown at step ", step, note,
                         "; the next start continues it"));
      } else if (boundary == Boundary::kShutdown) {
        Finish(id, v1::JOB_STATE_FAILED,
               absl::StrCat("interrupted by daemon shutdown at step ", step, " of ", config.steps,
                            "; its host state was lost"));
      } else if (boundary == Boundary::kPeerShutdown) {
        Finish(id, v1::JOB_STATE_FAILED,
               absl::StrCat("stopped at step ", step, ": another host of the job shut down", note,
                            "; submit it again with resume_from to continue"));
      } else if (boundary == Boundary::kFail) {
        Finish(id, v1::JOB_STATE_FAILED, absl::StrCat("step ", step, ": ", error.message()));
      } else {
        Finish(id, v1::JOB_STATE_CANCELLED, "");  // already CANCELLED by Cancel()
      }
      return;
    }
    if (step >= config.steps) break;
    absl::StatusOr<StepStats> stats = trainer->Step();
    // Stopped by Cancel() or Shutdown() inside the step (a long evaluation, say): the
    // boundary above sees which and ends the job as it would have between steps.
    if (!stats.ok() && absl::IsCancelled(stats.status()) && StopRequested(stop)) continue;
    if (!stats.ok()) {
      trainer.reset();
      Finish(id, v1::JOB_STATE_FAILED, absl::StrCat("step ", step + 1, ": ", stats.status().message()));
      return;
    }
    RecordStep(id, *stats, config, num_parameters);
    RecordPlan(id, *trainer);
  }
  absl::Status done = FinishTraining(id, config, *trainer);
  trainer.reset();
  if (!done.ok()) {
    Finish(id, v1::JOB_STATE_FAILED, std::string(done.message()));
  } else {
    Finish(id, v1::JOB_STATE_SUCCEEDED, absl::StrCat(config.steps, " steps"));
  }
}

JobManager::Boundary JobManager::AtStepBoundary(const std::string& id, Trainer& trainer,
                                                absl::Status* error) {
  if (trainer.config().hosts.count > 1) return AtHostsBoundary(id, trainer, error);
  {
    absl::MutexLock lock(&mu_);
    const v1::Job& job = Find(id)->job;
    if (job.cancel_requested()) return Boundary::kCancel;
    if (shutdown_) return Boundary::kShutdown;
    if (!job.pause_requested()) return Boundary::kContinue;
  }
  // Pausing: let the updates of the last step land in the host state first.
  if (absl::Status s = trainer.Drain(); !s.ok()) {
    *error = s;
    return Boundary::kFail;
  }
  const std::string note = CheckpointNote(trainer.config(), trainer);
  absl::MutexLock lock(&mu_);
  Entry& e = *Find(id);
  if (e.job.cancel_requested()) return Boundary::kCancel;
  if (shutdown_) return Boundary::kShutdown;
  if (!e.job.pause_requested()) return Boundary::kContinue;  // resumed while draining
  e.job.set_pause_requested(false);
  SetState(e, v1::JOB_STATE_PAUSED, absl::StrCat("paused at step ", trainer.completed_steps(), note));
  if (options_.metrics != nullptr) options_.metrics->ClearRates();
  // Resume() sets RUNNING, Cancel() sets CANCELLED; both signal changed_.
  while (!shutdown_ && e.job.state() == v1::JOB_STATE_PAUSED) changed_.Wait(&mu_);
  if (e.job.state() == v1::JOB_STATE_CANCELLED) return Boundary::kCancelled;
  if (e.job.state() != v1::JOB_STATE_RUNNING) return Boundary::kShutdown;
  return Boundary::kContinue;
}

JobManager::Boundary JobManager::AtHostsBoundary(const std::string& id, Trainer& trainer,
                                                 absl::Status* error) {
  enum { kCancelFlag, kShutdownFlag, kPauseFlag, kResumeFlag };
  // This host's requests, as 0/1 flags; their sums over the hosts decide.
  auto agree = [&](std::vector<double> mine) -> absl::StatusOr<std::vector<double>> {
    absl::StatusOr<std::vector<double>> all = trainer.AgreeOverHosts(std::move(mine));
    if (!all.ok()) *error = all.status();
    return all;
  };
  std::vector<double> mine(4, 0.0);
  {
    absl::MutexLock lock(&mu_);
    const v1::Job& job = Find(id)->job;
    mine[kCancelFlag] = job.cancel_requested() ? 1 : 0;
    mine[kShutdownFlag] = shutdown_ ? 1 : 0;
    mine[kPauseFlag] = job.pause_requested() ? 1 : 0;
  }
  absl::StatusOr<std::vector<double>> all = agree(mine);
  if (!all.ok()) return Boundary::kFail;
  // A cancel or shutdown anywhere ends the job everywhere (each host keeps a checkpoint).
  auto ending = [&](const std::vector<double>& a, const std::vector<double>& m) -> std::optional<Boundary> {
    if (a[kCancelFlag] > 0) {
      absl::MutexLock lock(&mu_);
      Entry& e = *Find(id);
      if (m[kCancelFlag] == 0) Log(absl::StrCat("job ", id, ": cancelled on another host"));
      e.job.set_cancel_requested(true);
      return Boundary::kCancel;
    }
    if (a[kShutdownFlag] > 0) return m[kShutdownFlag] > 0 ? Boundary::kShutdown : Boundary::kPeerShutdown;
    return std::nullopt;
  };
  if (std::optional<Boundary> b = ending(*all, mine)) return *b;
  if ((*all)[kPauseFlag] == 0) return Boundary::kContinue;
  // A pause anywhere pauses every host here: drain, checkpoint (each its shard), wait.
  if (absl::Status s = trainer.Drain(); !s.ok()) {
    *error = s;
    return Boundary::kFail;
  }
  const std::string note = CheckpointNote(trainer.config(), trainer);
  {
    absl::MutexLock lock(&mu_);
    Entry& e = *Find(id);
    e.job.set_pause_requested(false);
    SetState(e, v1::JOB_STATE_PAUSED,
             absl::StrCat("paused at step ", trainer.completed_steps(), mine[kPauseFlag] > 0 ? "" : " (on another host)",
                          note));
    if (options_.metrics != nullptr) options_.metrics->ClearRates();
  }
  // Paused: every second (or on a change here) the hosts compare their requests again.
  for (;;) {
    std::vector<double> now(4, 0.0);
    {
      absl::MutexLock lock(&mu_);
      Entry& e = *Find(id);
      changed_.WaitWithTimeout(&mu_, absl::Seconds(1));
      now[kCancelFlag] = e.job.state() == v1::JOB_STATE_CANCELLED ? 1 : 0;
      now[kShutdownFlag] = shutdown_ ? 1 : 0;
      now[kResumeFlag] = e.job.state() == v1::JOB_STATE_RUNNING ? 1 : 0;
    }
    absl::StatusOr<std::vector<double>> a = agree(now);
    if (!a.ok()) return Boundary::kFail;
    absl::MutexLock lock(&mu_);
    Entry& e = *Find(id);
    if ((*a)[kCancelFlag] > 0) {
      // Cancelled while paused (here: Cancel() made it CANCELLED): no new checkpoint.
      if (e.job.state() != v1::JOB_STATE_CANCELLED) {
        SetFinalState(e, v1::JOB_STATE_CANCELLED,
                      absl::StrCat("cancelled on another host while paused at step ", e.job.step()))
            .IgnoreError();
      }
      return Boundary::kCancelled;
    }
    if ((*a)[kShutdownFlag] > 0) return now[kShutdownFlag] > 0 ? Boundary::kShutdown : Boundary::kPeerShutdown;
    if ((*a)[kResumeFlag] > 0) {
      if (e.job.state() == v1::JOB_STATE_PAUSED) {
        SetState(e, v1::JOB_STATE_RUNNING, absl::StrCat("resumed on another host at step ", e.job.step()));
      }
      return Boundary::kContinue;
    }
  }
}

void JobManager::RecordPlan(const std::string& id, const Trainer& trainer) {
  PlanReport plan = trainer.Plan();  // a copy, outside the lock
  if (options_.metrics != nullptr && plan.available) {
    options_.metrics->SetResidency(std::max<int64_t>(plan.knobs.policy.resident_units, 0),
                                   plan.prediction.memory.resident);
  }
  absl::MutexLock lock(&mu_);
  Find(id)->plan = std::move(plan);
}

void JobManager::RecordStep(const std::string& id, const StepStats& stats,
                            const TrainConfig& config, int64_t num_parameters) {
  if (options_.metrics != nullptr) {
    // Unset: the dense BF16 peak of an H100/H200 SXM on cuda, unknown (not reported) on cpu.
    double peak = options_.peak_flops_per_worker;
    if (peak <= 0 && config.device == DeviceKind::kCuda) peak = kDefaultCudaPeakFlops;
    options_.metrics->RecordStep(
        stats, StepContext{config.workers, num_parameters, peak, config.hosts.count, config.hosts.rank});
  }
  const v1::StepEvent event = ToStepEvent(stats);
  if (!stats.checkpoint_path.empty()) {
    Log(absl::StrCat("job ", id, ": checkpoint ", stats.checkpoint_path, " (",
                     absl::SixDigits(stats.checkpoint_seconds), " s)"));
  }
  if (stats.eval_loss.has_value()) {
    Log(absl::StrCat("job ", id, ": step ", stats.step, " eval loss ", absl::SixDigits(*stats.eval_loss),
                     " over ", stats.eval_tokens, " tokens (", absl::SixDigits(stats.eval_seconds), " s)"));
  }
  absl::MutexLock lock(&mu_);
  node_.has_step = true;
  node_.last_step = stats;
  node_.last_num_parameters = num_parameters;
  Entry& e = *Find(id);
  v1::Job& job = e.job;
  job.set_step(stats.step);
  job.set_tokens_seen(job.tokens_seen() + stats.tokens);
  job.set_last_loss(stats.loss);
  job.set_tokens_per_second(stats.tokens_per_second);
  job.set_last_step_seconds(stats.step_seconds);
  job.set_learning_rate(stats.lr);
  job.set_grad_norm(stats.grad_norm);
  if (stats.eval_loss.has_value()) job.set_last_eval_loss(*stats.eval_loss);
  const int64_t nanos = absl::ToUnixNanos(absl::Now());
  job.mutable_update_time()->set_seconds(nanos / 1000000000);
  job.mutable_update_time()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
  // A completed step: the job made progress, its runs start counting afresh (durably).
  const bool progressed = job.runs_without_progress() != 0;
  job.set_runs_without_progress(0);
  e.run_counted = false;
  if (progressed || absl::Now() - last_persist_ >= options_.persist_interval) Persist(e);
  Emit(e, v1::JobEvent::TYPE_STEP, "", &event);
}

absl::Status JobManager::FinishTraining(const std::string& id, const TrainConfig& config,
                                        Trainer& trainer) {
  if (absl::Status s = trainer.Drain(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("draining the last updates: ", s.message()));
  }
  const std::string digest = trainer.WeightsDigest();
  {
    absl::MutexLock lock(&mu_);
    Find(id)->job.set_weights_digest(ValidUtf8(digest));
  }
  if (!config.output_dir.empty()) {
    if (absl::Status s = trainer.ExportHf(config.output_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("exporting to ", config.output_dir, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void JobManager::Finish(const std::string& id, v1::JobState state, const std::string& message) {
  absl::MutexLock lock(&mu_);
  running_id_.clear();
  if (options_.metrics != nullptr) options_.metrics->ClearRates();
  Entry& e = *Find(id);
  const std::string error = e.job.error();  // the visible one is replaced while retrying
  for (int failures = 0;; ++failures) {
    if (IsTerminal(e.job.state())) return;  // Cancel() already finished it
    e.job.set_error(error);
    absl::Status s = SetFinalState(e, state, message, message);
    if (s.ok()) return;
    // Not shown as final until recorded: a restart would show the old record instead.
    const std::string note = ValidUtf8(absl::StrCat(
        "finished ", StateName(state), message.empty() ? "" : " (", message,
        message.empty() ? "" : ")", " but cannot record it: ", s.message(),
        "; retrying every ", absl::FormatDuration(kFinalStateRetry)));
    Log(absl::StrCat("job ", id, ": ", note, " (attempt ", failures + 1, ")"));
    e.job.set_error(note);
    if (failures == 0) Emit(e, v1::JobEvent::TYPE_STATE_CHANGE, note, nullptr);
    if (shutdown_) break;
    changed_.WaitWithTimeout(&mu_, kFinalStateRetry);
    if (shutdown_) break;
  }
  Log(absl::StrCat("job ", id, ": the daemon is shutting down before the job's final state ",
                   StateName(state), " could be recorded; the store keeps its last recorded state"));
}

}  // namespace slidedp::server
