// JobManager: public API and bookkeeping (queue, states, events, persistence). The
// job thread's loop is in job_runner.cc. Every function here runs under mu_ or takes it.
#include "server/job_manager.h"

#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/io/user_text.h"
#include "runtime/state/checkpoint.h"
#include "server/log.h"
#include "server/spec_translation.h"

namespace slidedp::server {
namespace {

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

absl::Status WrongState(const v1::Job& job, absl::string_view action, absl::string_view allowed) {
  return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is ", StateName(job.state()),
                                                    "; only ", allowed, " jobs can be ", action));
}

// A job to continue after a restart shows, from the moment the manager starts, the step
// and tokens of the checkpoint it will continue from (the newest of its own whose header
// reads; step 0 if it has none), not the last step persisted before the daemon stopped,
// so that its step never goes back once clients can see it. Only a checkpoint that then
// fails verification makes it continue from an older one, and its event says so
// (job_runner.cc). Returns true if the job changed.
bool ShowResumePoint(const SpecTranslator& translator, v1::Job* job) {
  absl::StatusOr<TrainConfig> config = translator(job->spec());
  if (!config.ok()) return false;  // the job fails when it starts, saying why
  BindConfigToJob(job->id(), &*config);
  CheckpointMeta meta;
  absl::StatusOr<std::string> path = NewestReadableCheckpoint(config->checkpoint_dir, &meta);
  if (!path.ok() && !absl::IsNotFound(path.status())) return false;
  if (meta.step == job->step() && meta.tokens_seen == job->tokens_seen()) return false;
  Log(absl::StrCat("job ", job->id(), " was at step ", job->step(), " when the daemon stopped; it continues from ",
                   path.ok() ? absl::StrCat("its checkpoint at step ", meta.step, " (", *path, ")")
                             : "step 0 (it has no checkpoint)"));
  job->set_step(meta.step);
  job->set_tokens_seen(meta.tokens_seen);
  return true;
}

}  // namespace

std::string StateName(v1::JobState state) {
  const std::string& name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Start(JobManagerOptions options) {
  if (options.store == nullptr || !options.trainer_factory || !options.translator) {
    return absl::InvalidArgumentError("JobManager: store, trainer_factory and translator are required");
  }
  std::unique_ptr<JobManager> manager(new JobManager(std::move(options)));
  if (absl::Status s = manager->LoadFromStore(); !s.ok()) return s;
  manager->thread_ = std::thread([m = manager.get()] { m->JobThread(); });
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    if (running_stop_ != nullptr && running_hosts_ == 1) running_stop_->RequestStop();
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status JobManager::LoadFromStore() {
  absl::StatusOr<std::vector<v1::Job>> jobs = options_.store->LoadAll();
  if (!jobs.ok()) return jobs.status();
  absl::MutexLock lock(&mu_);
  std::vector<std::string> restored;  // go before the queued jobs
  for (v1::Job& job : *jobs) {
    auto entry = std::make_unique<Entry>();
    entry->job = std::move(job);
    Entry& e = *entry;
    const std::string id = e.job.id();
    order_.push_back(id);
    jobs_[id] = std::move(entry);
    // The final states given here follow from the stored record alone: if the store
    // cannot record them now, they are shown anyway and given again at the next start.
    auto finish = [&](v1::JobState state, const std::string& message, const std::string& error) {
      if (absl::Status s = SetFinalState(e, state, message, error); !s.ok()) {
        Log(absl::StrCat("job ", id, ": cannot record ", StateName(state), ": ", s.message()));
        Announce(e, WithState(e, state, state == v1::JOB_STATE_FAILED ? &error : nullptr), message);
      }
    };
    if (e.job.state() == v1::JOB_STATE_QUEUED) {
      queue_.push_back(id);
    } else if (!IsTerminal(e.job.state()) && e.job.cancel_requested()) {
      finish(v1::JOB_STATE_CANCELLED, "cancelled (the daemon stopped before it could)", "");
    } else if (!IsTerminal(e.job.state()) &&
               e.job.runs_without_progress() >= kMaxRunsWithoutProgress) {
      const std::string error = absl::StrCat(
          "the daemon stopped ", e.job.runs_without_progress(),
          " times while running this job (crashed or was killed) without it completing a step, "
          "at step ", e.job.step(), " of ", e.job.total_steps(), "; it is not resumed again");
      finish(v1::JOB_STATE_FAILED, error, error);
    } else if (!IsTerminal(e.job.state()) && !e.job.spec().checkpoint_dir().empty()) {
      e.restored = true;
      restored.push_back(id);
      if (ShowResumePoint(options_.translator, &e.job)) Persist(e);
    } else if (!IsTerminal(e.job.state())) {
      const std::string error = absl::StrCat(
          "interrupted: the daemon stopped while the job was ", StateName(e.job.state()),
          " at step ", e.job.step(), " of ", e.job.total_steps(),
          "; it has no checkpoint_dir, so its host state was lost");
      finish(v1::JOB_STATE_FAILED, error, error);
    }
  }
  queue_.insert(queue_.begin(), restored.begin(), restored.end());
  PublishJobCounts();
  Log(absl::StrCat("loaded ", order_.size(), " jobs from ", options_.store->path(), ", ",
                   queue_.size() - restored.size(), " queued, ", restored.size(),
                   " to continue from checkpoints"));
  return absl::OkStatus();
}

JobManager::Entry* JobManager::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const JobManager::Entry* JobManager::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<JobManager::Entry*> JobManager::FindOrNotFound(const std::string& id) {
  Entry* e = Find(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  return e;
}

std::string JobManager::NewId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  for (;;) {
    std::string id = absl::StrFormat("job-%012x", rng() & 0xffffffffffffULL);
    if (jobs_.count(id) == 0) return id;
  }
}

void JobManager::Emit(Entry& e, v1::JobEvent::Type type, const std::string& message,
                      const v1::StepEvent* step) {
  v1::JobEvent event;
  event.set_type(type);
  event.set_sequence(e.next_sequence++);
  SetTimestamp(absl::Now(), event.mutable_time());
  *event.mutable_job() = e.job;
  event.mutable_job()->clear_spec();  // in the snapshot only: keeps the history small
  if (step != nullptr) *event.mutable_step() = *step;
  event.set_message(ValidUtf8(message));
  const bool last = type == v1::JobEvent::TYPE_STATE_CHANGE && IsTerminal(e.job.state());
  for (auto& [handle, sub] : subscriptions_) {
    if (sub.job_id == e.job.id()) sub.sink->OnJobEvent(event, last);
  }
  e.history.push_back(std::move(event));
  while (e.history.size() > options_.max_events_per_job) e.history.pop_front();
}

void JobManager::Persist(Entry& e) {
  if (absl::Status s = options_.store->Put(e.job); !s.ok()) {
    Log(absl::StrCat("job ", e.job.id(), ": cannot persist: ", s.ToString()));
  }
  last_persist_ = absl::Now();
}

void JobManager::ForgetOldHistories(const std::string& finished_id) {
  finished_order_.push_back(finished_id);
  while (finished_order_.size() > kFinishedHistories) {
    if (Entry* old = Find(finished_order_.front())) std::deque<v1::JobEvent>().swap(old->history);
    finished_order_.pop_front();
  }
}

void JobManager::PublishJobCounts() {
  if (options_.metrics == nullptr) return;
  JobStateCounts counts{};
  for (const auto& [id, entry] : jobs_) {
    const int state = static_cast<int>(entry->job.state());
    if (state > 0 && state < static_cast<int>(counts.size())) ++counts[state];
  }
  options_.metrics->SetJobCounts(counts);
}

v1::Job JobManager::WithState(const Entry& e, v1::JobState state, const std::string* error) const {
  const absl::Time now = absl::Now();
  v1::Job job = e.job;
  job.set_state(state);
  SetTimestamp(now, job.mutable_update_time());
  if (state == v1::JOB_STATE_RUNNING && !job.has_start_time()) {
    SetTimestamp(now, job.mutable_start_time());
  }
  if (IsTerminal(state)) {
    SetTimestamp(now, job.mutable_end_time());
    job.set_pause_requested(false);
    job.set_cancel_requested(false);
  }
  if (error != nullptr) job.set_error(ValidUtf8(*error));
  return job;
}

void JobManager::Announce(Entry& e, v1::Job job, const std::string& message) {
  e.job = std::move(job);
  const v1::JobState state = e.job.state();
  Emit(e, v1::JobEvent::TYPE_STATE_CHANGE, message, nullptr);
  if (IsTerminal(state)) ForgetOldHistories(e.job.id());
  PublishJobCounts();
  Log(absl::StrCat("job ", e.job.id(), " ", StateName(state), message.empty() ? "" : ": ",
                   ValidUtf8(message)));
}

void JobManager::SetState(Entry& e, v1::JobState state, const std::string& message) {
  e.job = WithState(e, state, nullptr);
  Persist(e);
  Announce(e, e.job, message);
}

absl::Status JobManager::SetFinalState(Entry& e, v1::JobState state, const std::string& message,
                                       const std::string& error) {
  v1::Job job = WithState(e, state, state == v1::JOB_STATE_FAILED ? &error : nullptr);
  if (absl::Status s = options_.store->Put(job); !s.ok()) return s;
  last_persist_ = absl::Now();
  Announce(e, std::move(job), message);
  return absl::OkStatus();
}

void JobManager::CountRun(Entry& e) {
  e.job.set_runs_without_progress(e.job.runs_without_progress() + 1);
  e.run_counted = true;
  Persist(e);
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("the daemon is shutting down");
  auto entry = std::make_unique<Entry>();
  Entry& e = *entry;
  e.job.set_id(NewId());
  *e.job.mutable_spec() = spec;
  e.job.set_state(v1::JOB_STATE_QUEUED);
  e.job.set_total_steps(spec.steps());
  SetTimestamp(absl::Now(), e.job.mutable_create_time());
  *e.job.mutable_update_time() = e.job.create_time();
  if (absl::Status s = options_.store->Put(e.job); !s.ok()) {
    // A full disk is not a passing outage: clients must not retry as for UNAVAILABLE.
    return absl::Status(absl::IsResourceExhausted(s) ? s.code() : absl::StatusCode::kUnavailable,
                        absl::StrCat("cannot record the job: ", s.message()));
  }
  const std::string id = e.job.id();
  jobs_[id] = std::move(entry);
  order_.push_back(id);
  queue_.push_back(id);
  Emit(e, v1::JobEvent::TYPE_STATE_CHANGE, "submitted", nullptr);
  PublishJobCounts();
  changed_.SignalAll();
  Log(absl::StrCat("job ", id, " QUEUED (", spec.model(), ", ", spec.steps(), " steps)"));
  return e.job;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  const Entry* e = Find(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  return e->job;
}

absl::StatusOr<JobManager::ListResult> JobManager::List(const std::vector<v1::JobState>& states,
                                                        int page_size,
                                                        const std::string& page_token) const {
  if (page_size < 0 || page_size > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: ", page_size, " is not in 0..1000"));
  }
  if (page_size == 0) page_size = 100;
  size_t start = 0;
  if (!page_token.empty() && !absl::SimpleAtoi(page_token, &start)) {
    return absl::InvalidArgumentError("page_token: not a token returned by ListJobs");
  }
  absl::MutexLock lock(&mu_);
  if (start > order_.size()) {
    return absl::InvalidArgumentError("page_token: not a token returned by ListJobs");
  }
  ListResult result;
  size_t i = start;
  for (; i < order_.size() && static_cast<int>(result.jobs.size()) < page_size; ++i) {
    const v1::Job& job = Find(order_[i])->job;
    bool match = states.empty();
    for (v1::JobState s : states) match = match || job.state() == s;
    if (match) result.jobs.push_back(job);
  }
  if (i < order_.size()) result.next_page_token = std::to_string(i);
  return result;
}

absl::StatusOr<v1::Job> JobManager::Pause(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Entry*> found = FindOrNotFound(id);
  if (!found.ok()) return found.status();
  Entry& e = **found;
  if (e.job.state() == v1::JOB_STATE_PAUSED) return e.job;
  if (e.job.state() != v1::JOB_STATE_RUNNING) return WrongState(e.job, "paused", "RUNNING or PAUSED");
  if (!e.job.pause_requested()) {
    e.job.set_pause_requested(true);
    Persist(e);
    changed_.SignalAll();
  }
  return e.job;
}

absl::StatusOr<v1::Job> JobManager::Resume(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Entry*> found = FindOrNotFound(id);
  if (!found.ok()) return found.status();
  Entry& e = **found;
  if (e.job.state() == v1::JOB_STATE_RUNNING) {
    if (e.job.pause_requested()) {
      e.job.set_pause_requested(false);
      Persist(e);
    }
    return e.job;
  }
  if (e.job.state() != v1::JOB_STATE_PAUSED) return WrongState(e.job, "resumed", "PAUSED or RUNNING");
  SetState(e, v1::JOB_STATE_RUNNING, absl::StrCat("resumed at step ", e.job.step()));
  changed_.SignalAll();
  return e.job;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Entry*> found = FindOrNotFound(id);
  if (!found.ok()) return found.status();
  Entry& e = **found;
  switch (e.job.state()) {
    case v1::JOB_STATE_QUEUED:
      if (absl::Status s = SetFinalState(e, v1::JOB_STATE_CANCELLED, "cancelled while queued");
          !s.ok()) {
        return s;
      }
      queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
      break;
    case v1::JOB_STATE_PAUSED:
      // The job thread wakes, sees CANCELLED and destroys the trainer.
      if (absl::Status s = SetFinalState(e, v1::JOB_STATE_CANCELLED,
                                         absl::StrCat("cancelled while paused at step ", e.job.step()));
          !s.ok()) {
        return s;
      }
      break;
    case v1::JOB_STATE_RUNNING:
      if (!e.job.cancel_requested()) {
        e.job.set_cancel_requested(true);
        Persist(e);
      }
      // A long evaluation, tokenization or load stops now, not at the next step boundary.
      if (running_id_ == id && running_stop_ != nullptr && running_hosts_ == 1) running_stop_->RequestStop();
      break;
    default:
      return WrongState(e.job, "cancelled", "QUEUED, RUNNING or PAUSED");
  }
  changed_.SignalAll();
  return e.job;
}

absl::StatusOr<int64_t> JobManager::Subscribe(const std::string& id, bool replay,
                                              JobEventSink* sink) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Entry*> found = FindOrNotFound(id);
  if (!found.ok()) return found.status();
  Entry& e = **found;
  if (replay) {
    for (const v1::JobEvent& event : e.history) sink->OnJobEvent(event, false);
  }
  v1::JobEvent snapshot;
  snapshot.set_type(v1::JobEvent::TYPE_SNAPSHOT);
  snapshot.set_sequence(e.next_sequence - 1);
  SetTimestamp(absl::Now(), snapshot.mutable_time());
  *snapshot.mutable_job() = e.job;
  const bool finished = IsTerminal(e.job.state());
  sink->OnJobEvent(snapshot, finished);
  const int64_t handle = next_subscription_++;
  if (!finished) subscriptions_[handle] = Subscription{id, sink};
  return handle;
}

void JobManager::Unsubscribe(int64_t subscription) {
  absl::MutexLock lock(&mu_);
  subscriptions_.erase(subscription);
}

NodeSnapshot JobManager::node_snapshot() const {
  absl::MutexLock lock(&mu_);
  NodeSnapshot node = node_;
  node.running_job_id = running_id_;
  node.queued_jobs = static_cast<int>(queue_.size());
  return node;
}

absl::StatusOr<PlanReport> JobManager::GetPlan(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  const Entry* e = Find(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  if (!e->plan.available) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " has no plan yet (state ",
                                                      StateName(e->job.state()), "): it is made when the job starts"));
  }
  return e->plan;
}

}  // namespace slidedp::server
