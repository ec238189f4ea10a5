// JobManager: the daemon's jobs. A FIFO queue; one job at a time owns the GPUs and runs
// on the engine (slidedp::Trainer) in the manager's job thread; the lifecycle is
//   QUEUED -> RUNNING <-> PAUSED -> SUCCEEDED | FAILED | CANCELLED.
// Pause stops at the next step boundary after Trainer::Drain() and keeps the Trainer
// (host state) alive, so resume continues exactly; a paused job keeps the GPUs, the
// queue waits. Cancel destroys the Trainer. Every change is written to the JobStore (a
// final state is shown only once written; the job thread retries while the disk is full);
// text that reaches the job or its events is made valid UTF-8 (runtime/io/user_text.h);
// step events are kept in memory for WatchJob's replay (at most max_events_per_job per
// job, and only for unfinished jobs and the 16 latest finished ones).
// Threads: the public methods are called from gRPC handler threads and take mu_; the
// job thread takes mu_ only between engine calls (never across Step/Drain/Create).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/io/stop_token.h"
#include "runtime/engine/trainer.h"
#include "runtime/train_config.h"
#include "server/job_store.h"
#include "server/metrics.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::server {

// Creates the job's trainer; `stop` is the running job's StopToken, which Cancel() and
// Shutdown() set (TrainerInputs::stop: a trainer that observes it returns CANCELLED
// from Create or Step within about a second).
using TrainerFactory = std::function<absl::StatusOr<std::unique_ptr<Trainer>>(
    const TrainConfig&, std::shared_ptr<const StopToken> stop)>;
// The stored spec -> TrainConfig translation with path checks (StoredSpecToTrainConfig
// bound to the daemon's PathPolicy; the values were validated at submit); run when a
// job starts, so a path changed into a symlink after submission is still caught.
using SpecTranslator = std::function<absl::StatusOr<TrainConfig>(const v1::JobSpec&)>;

// Receives the events of one watched job.
class JobEventSink {
 public:
  virtual ~JobEventSink() = default;
  // Called with the manager's mutex held, from any thread: must not block and must
  // not call the JobManager. `last`: no event follows (the job finished).
  virtual void OnJobEvent(const v1::JobEvent& event, bool last) = 0;
};

struct JobManagerOptions {
  JobStore* store = nullptr;  // required; outlives the manager
  TrainerFactory trainer_factory;
  SpecTranslator translator;
  Metrics* metrics = nullptr;          // optional; outlives the manager
  // For slidedp_mfu_ratio; <= 0: 989.4e12 (H100/H200 dense BF16) on cuda, and not
  // reported on cpu.
  double peak_flops_per_worker = 0.0;
  size_t max_events_per_job = 10000;   // kept for WatchJob replay
  absl::Duration persist_interval = absl::Seconds(1);  // step updates written at most this often
};

struct NodeSnapshot {
  std::string running_job_id;
  int queued_jobs = 0;
  bool has_step = false;  // last_step is from a real step
  StepStats last_step;
  int64_t last_num_parameters = 0;
};

class JobManager {
 public:
  // Runs ended by the daemon dying, without a completed step, before a job is failed.
  static constexpr int kMaxRunsWithoutProgress = 3;
  // How often the job thread retries recording a job's final state the store refused
  // (a full disk): the state is not shown until it is recorded.
  static constexpr absl::Duration kFinalStateRetry = absl::Seconds(1);

  // Loads the store's jobs and starts the job thread. QUEUED ones are queued again in
  // submission order. RUNNING or PAUSED ones, whose daemon stopped under them, go first:
  // with a checkpoint_dir a RUNNING job resumes from its newest checkpoint (from step 0
  // if none was written yet) and a PAUSED one stays PAUSED, holding the GPUs, until
  // Resume() recreates its state from the checkpoint written when it paused; without a
  // checkpoint_dir their host state is lost and they become FAILED saying so.
  // A job whose last kMaxRunsWithoutProgress runs ended with the daemon dying under it
  // before a step completed (Job.runs_without_progress) becomes FAILED instead: it is
  // not resumed again. A record the store cannot read is shown FAILED (JobStore::LoadAll)
  // and does not stop the start.
  static absl::StatusOr<std::unique_ptr<JobManager>> Start(JobManagerOptions options);
  ~JobManager();  // Shutdown()
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Stops the job thread at the next step boundary, or sooner: the running job's
  // StopToken is set, so that its trainer's creation or step returns CANCELLED within
  // about a second. The running (or paused) job with a checkpoint_dir writes a
  // checkpoint (when its state is whole) and keeps its state in the store, so the next
  // start continues it; one without becomes FAILED ("interrupted by daemon shutdown").
  // Queued jobs stay QUEUED in the store for the next start. Idempotent.
  void Shutdown();

  // Queues a job for `spec` (already translated, validated and resolved by the
  // caller). Returns it (QUEUED). RESOURCE_EXHAUSTED when the store's disk is full,
  // UNAVAILABLE when the store cannot record it for another reason.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);

  absl::StatusOr<v1::Job> Get(const std::string& id) const;  // NOT_FOUND

  struct ListResult {
    std::vector<v1::Job> jobs;
    std::string next_page_token;  // empty on the last page
  };
  // Jobs in submission order whose state is in `states` (empty: all). page_size
  // 1..1000 (0: 100); page_token from a previous result (INVALID_ARGUMENT if bad).
  absl::StatusOr<ListResult> List(const std::vector<v1::JobState>& states, int page_size,
                                  const std::string& page_token) const;

  // Per the TrainingService contract (service.proto): NOT_FOUND for unknown ids,
  // FAILED_PRECONDITION for states that do not allow the action. Cancel of a QUEUED or
  // PAUSED job returns the store's error (RESOURCE_EXHAUSTED on a full disk) when it
  // cannot record the cancellation, and leaves the job as it was. Cancel() of a
  // RUNNING job also sets its StopToken: a long creation, evaluation or step stops
  // within about a second.
  absl::StatusOr<v1::Job> Pause(const std::string& id);
  absl::StatusOr<v1::Job> Resume(const std::string& id);
  absl::StatusOr<v1::Job> Cancel(const std::string& id);

  // Registers `sink` for job `id`'s events. It first receives the recorded events
  // (when `replay`) and a TYPE_SNAPSHOT, synchronously; then every new event until the
  // job finishes (the event with last=true). Returns a handle for Unsubscribe.
  absl::StatusOr<int64_t> Subscribe(const std::string& id, bool replay, JobEventSink* sink);
  // After it returns, the subscription's sink is never called again.
  void Unsubscribe(int64_t subscription);

  NodeSnapshot node_snapshot() const;

  // The job's plan as its trainer last reported it (after start and after every step).
  // NOT_FOUND for unknown ids, FAILED_PRECONDITION before the job has a trainer.
  absl::StatusOr<PlanReport> GetPlan(const std::string& id) const;

 private:
  struct Entry {
    v1::Job job;
    std::deque<v1::JobEvent> history;
    int64_t next_sequence = 1;
    // Loaded RUNNING or PAUSED from the store: the job thread continues it from its
    // checkpoint instead of starting it.
    bool restored = false;
    PlanReport plan;  // the trainer's, copied on the job thread
    // This run is counted in job.runs_without_progress (until a step completes).
    bool run_counted = false;
  };
  struct Subscription {
    std::string job_id;
    JobEventSink* sink;
  };
  // What the job thread should do at a step boundary.
  // kPeerShutdown: a job over several hosts whose other host's daemon shuts down.
  enum class Boundary { kContinue, kCancel, kCancelled, kShutdown, kPeerShutdown, kFail };

  explicit JobManager(JobManagerOptions options) : options_(std::move(options)) {}

  // Bookkeeping (job_manager.cc), all under mu_.
  Entry* Find(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Entry* Find(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Entry*> FindOrNotFound(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the state and announces it; the store write is best effort (a failed one is
  // retried by the next Persist). For final states prefer SetFinalState.
  void SetState(Entry& e, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A final state (SUCCEEDED, FAILED, CANCELLED; with `error` for FAILED) is shown only
  // once the store has recorded it: on a write error the job is left as it was and the
  // error is returned.
  absl::Status SetFinalState(Entry& e, v1::JobState state, const std::string& message,
                             const std::string& error = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // e.job with `state` (and `error`) applied, as SetState would make it.
  v1::Job WithState(const Entry& e, v1::JobState state, const std::string* error) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `job` e's record and tells subscribers, the metrics and the log.
  void Announce(Entry& e, v1::Job job, const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the run that starts now in runs_without_progress, durably.
  void CountRun(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Entry& e, v1::JobEvent::Type type, const std::string& message,
            const v1::StepEvent* step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishJobCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the event histories of all but the kFinishedHistories latest finished jobs.
  void ForgetOldHistories(const std::string& finished_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadFromStore() ABSL_LOCKS_EXCLUDED(mu_);

  // The job thread (job_runner.cc).
  void JobThread() ABSL_LOCKS_EXCLUDED(mu_);
  void RunJob(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // For a restored job: takes the GPUs; a PAUSED one waits for Resume() or Cancel().
  // False if it should not run (cancelled, or shutdown while paused).
  bool StartRestored(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a checkpoint if the job has a checkpoint_dir; "" or a note for messages.
  std::string CheckpointNote(const TrainConfig& config, Trainer& trainer) ABSL_LOCKS_EXCLUDED(mu_);
  void RunSteps(const std::string& id, const TrainConfig& config, std::unique_ptr<Trainer> trainer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The trainer's creation returned CANCELLED after Cancel() or Shutdown(): ends the job
  // as a cancel or a shutdown between steps would.
  void StoppedBeforeStart(const std::string& id, const TrainConfig& config) ABSL_LOCKS_EXCLUDED(mu_);
  Boundary AtStepBoundary(const std::string& id, Trainer& trainer, absl::Status* error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // AtStepBoundary of a job over several hosts: every host's requests (cancel,
  // shutdown, pause; while paused, resume) summed over the hosts through the trainer,
  // so that all take the same decision at the same boundary.
  Boundary AtHostsBoundary(const std::string& id, Trainer& trainer, absl::Status* error);
  void RecordStep(const std::string& id, const StepStats& stats, const TrainConfig& config,
                  int64_t num_parameters) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordPlan(const std::string& id, const Trainer& trainer) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FinishTraining(const std::string& id, const TrainConfig& config, Trainer& trainer)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const std::string& id, v1::JobState state, const std::string& message)
      ABSL_LOCKS_EXCLUDED(mu_);

  const JobManagerOptions options_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // queue_, shutdown_ or a job's control fields changed
  std::map<std::string, std::unique_ptr<Entry>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // submission order
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kFinishedHistories = 16;
  std::deque<std::string> finished_order_ ABSL_GUARDED_BY(mu_);  // this run's finished jobs
  std::map<int64_t, Subscription> subscriptions_ ABSL_GUARDED_BY(mu_);
  int64_t next_subscription_ ABSL_GUARDED_BY(mu_) = 1;
  std::string running_id_ ABSL_GUARDED_BY(mu_);
  // The running job's; Cancel() and Shutdown() set it. Null between jobs.
  std::shared_ptr<StopToken> running_stop_ ABSL_GUARDED_BY(mu_);
  // Hosts of the running job (hosts.count): over several, a cancel or shutdown is not
  // asked of the trainer inside a step (the other hosts would wait in it); the step
  // boundary that every host agrees on (AtHostsBoundary) ends the job instead.
  int running_hosts_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_persist_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  NodeSnapshot node_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// "QUEUED", "RUNNING", ... (the enum name without JOB_STATE_).
std::string StateName(v1::JobState state);
bool IsTerminal(v1::JobState state);

}  // namespace slidedp::server
