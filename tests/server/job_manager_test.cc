// JobManager with a scripted FakeTrainer: lifecycle, FIFO, failure paths, pause/resume
// at step boundaries, cancel, restart from the store, listing, events.
#include "server/job_manager.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <thread>

#include "runtime/state/checkpoint.h"
#include "server/spec_translation.h"
#include "tests/server/fake_trainer.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

using testing::FakeControl;
using testing::FakeFactory;
using testing::ManagerOnStore;
using testing::OpenManagerOnStore;
using testing::TempDir;
using testing::WaitFor;
using namespace std::chrono_literals;

v1::JobSpec Spec(int64_t steps) {
  TrainConfig config;
  config.steps = steps;
  config.seq_len = 8;
  config.micro_batch_size = 2;
  return TrainConfigToJobSpec(config);
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    control_->Allow(INT64_MAX);
    HoldCreate(false);
    manager_.reset();
  }

  void Open() {
    manager_.reset();
    store_.reset();
    absl::StatusOr<ManagerOnStore> opened =
        OpenManagerOnStore(dir_.Join("jobs.db"), FakeFactory(control_), &metrics_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(opened->store);
    manager_ = std::move(opened->manager);
  }

  v1::Job Submit(int64_t steps) {
    absl::StatusOr<v1::Job> job = manager_->Submit(Spec(steps));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }
  v1::Job Get(const std::string& id) { return *manager_->Get(id); }
  bool WaitState(const std::string& id, v1::JobState state) {
    return WaitFor([&] { return Get(id).state() == state; }, 10s);
  }
  bool WaitStep(const std::string& id, int64_t step) {
    return WaitFor([&] { return Get(id).step() == step; }, 10s);
  }
  // True once `n` trainers have been asked for (FakeControl::creates).
  bool WaitCreates(int n) {
    return WaitFor([&] {
      absl::MutexLock lock(&control_->mu);
      return control_->creates == n;
    }, 10s);
  }
  void HoldCreate(bool hold) {
    absl::MutexLock lock(&control_->mu);
    control_->hold_create = hold;
  }
  // Leaves the store as a crash of the daemon (kill -9) would leave it at this moment:
  // the records as they are now, without what a clean shutdown writes. (The manager is
  // stopped here by failing its held trainer creation, then its writes are undone.)
  void Crash() {
    auto records = store_->LoadAll();
    ASSERT_TRUE(records.ok()) << records.status();
    {
      absl::MutexLock lock(&control_->mu);
      control_->fail_create = true;
      control_->hold_create = false;
      control_->allowed_steps = INT64_MAX;
    }
    manager_.reset();
    for (const v1::Job& job : *records) ASSERT_TRUE(store_->Put(job).ok());
    absl::MutexLock lock(&control_->mu);
    control_->fail_create = false;
    control_->hold_create = true;
  }
  // Writes a row as it is, bypassing JobStore::Put (as a daemon before issue 18 could).
  void InsertRaw(const std::string& id, int state, const std::string& blob) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.Join("jobs.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO jobs(id, state, job) VALUES(?1, ?2, ?3)", -1,
                                 &stmt, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 2, state);
    sqlite3_bind_blob(stmt, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
  }
  v1::JobSpec Durable(int64_t steps) {
    v1::JobSpec spec = Spec(steps);
    spec.set_checkpoint_dir(dir_.Join("ckpt"));
    return spec;
  }

  // True once the running job's next Step() is blocked on FakeControl::allowed_steps.
  bool WaitBlockedInStep() {
    return WaitFor([&] {
      absl::MutexLock lock(&control_->mu);
      return control_->blocked == 1;
    }, 10s);
  }

  TempDir dir_;
  std::shared_ptr<FakeControl> control_ = std::make_shared<FakeControl>();
  Metrics metrics_{"test"};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
};

// Collects events; OnJobEvent runs under the manager's mutex on the job thread.
class Collector : public JobEventSink {
 public:
  void OnJobEvent(const v1::JobEvent& event, bool last) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(event);
    if (last) ++lasts_;
  }
  std::vector<v1::JobEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  int lasts() {
    absl::MutexLock lock(&mu_);
    return lasts_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::JobEvent> events_;
  int lasts_ = 0;
};

TEST_F(JobManagerTest, RunsToSucceededAndRecordsEverything) {
  const v1::Job submitted = Submit(5);
  EXPECT_EQ(submitted.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(submitted.total_steps(), 5);
  ASSERT_TRUE(WaitState(submitted.id(), v1::JOB_STATE_SUCCEEDED));
  const v1::Job job = Get(submitted.id());
  EXPECT_EQ(job.step(), 5);
  EXPECT_EQ(job.tokens_seen(), 5 * 2 * 8);
  EXPECT_EQ(job.num_parameters(), 1000);
  EXPECT_FALSE(job.weights_digest().empty());
  EXPECT_GT(job.end_time().seconds(), 0);
  EXPECT_DOUBLE_EQ(job.last_loss(), 2.0);
  auto stored = store_->LoadAll();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ((*stored)[0].weights_digest(), job.weights_digest());
  const std::string text = metrics_.Scrape();
  EXPECT_NE(text.find("slidedp_steps_total 5"), std::string::npos) << text;
  EXPECT_NE(text.find("slidedp_jobs{state=\"SUCCEEDED\"} 1"), std::string::npos) << text;
  absl::MutexLock lock(&control_->mu);
  EXPECT_EQ(control_->destroyed, 1);
}

TEST_F(JobManagerTest, RunsOneJobAtATimeInSubmissionOrder) {
  control_->Allow(0);
  const v1::Job a = Submit(3);
  const v1::Job b = Submit(3);
  ASSERT_TRUE(WaitState(a.id(), v1::JOB_STATE_RUNNING));
  EXPECT_EQ(Get(b.id()).state(), v1::JOB_STATE_QUEUED);
  const NodeSnapshot node = manager_->node_snapshot();
  EXPECT_EQ(node.running_job_id, a.id());
  EXPECT_EQ(node.queued_jobs, 1);
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(WaitState(b.id(), v1::JOB_STATE_SUCCEEDED));
  const v1::Job done_a = Get(a.id());
  const v1::Job done_b = Get(b.id());
  EXPECT_EQ(done_a.state(), v1::JOB_STATE_SUCCEEDED);
  const auto nanos = [](const google::protobuf::Timestamp& t) { return t.seconds() * 1000000000 + t.nanos(); };
  EXPECT_GE(nanos(done_b.start_time()), nanos(done_a.end_time()));
}

TEST_F(JobManagerTest, CreateFailureFailsTheJobWithTheReason) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_create = true;
  }
  const v1::Job job = Submit(3);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_FAILED));
  EXPECT_NE(Get(job.id()).error().find("fake: cannot create"), std::string::npos) << Get(job.id()).error();
  // The daemon keeps going: the next job runs.
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_create = false;
  }
  const v1::Job next = Submit(2);
  EXPECT_TRUE(WaitState(next.id(), v1::JOB_STATE_SUCCEEDED));
}

TEST_F(JobManagerTest, StepFailureFailsNamingTheStepAndFreesTheTrainer) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_at_step = 3;
  }
  const v1::Job job = Submit(5);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_FAILED));
  const v1::Job failed = Get(job.id());
  EXPECT_NE(failed.error().find("step 3"), std::string::npos) << failed.error();
  EXPECT_NE(failed.error().find("fake step failure"), std::string::npos) << failed.error();
  EXPECT_EQ(failed.step(), 2);
  absl::MutexLock lock(&control_->mu);
  EXPECT_EQ(control_->destroyed, 1);
}

TEST_F(JobManagerTest, ExportsToOutputDirAndFailsWhenExportFails) {
  v1::JobSpec spec = Spec(2);
  spec.set_output_dir("/somewhere/out");
  const v1::Job ok = *manager_->Submit(spec);
  ASSERT_TRUE(WaitState(ok.id(), v1::JOB_STATE_SUCCEEDED));
  {
    absl::MutexLock lock(&control_->mu);
    ASSERT_EQ(control_->exports.size(), 1u);
    EXPECT_EQ(control_->exports[0], "/somewhere/out");
    control_->fail_export = true;
  }
  const v1::Job bad = *manager_->Submit(spec);
  ASSERT_TRUE(WaitState(bad.id(), v1::JOB_STATE_FAILED));
  EXPECT_NE(Get(bad.id()).error().find("exporting to /somewhere/out"), std::string::npos);
}

TEST_F(JobManagerTest, PauseStopsAtTheNextStepBoundaryAndResumeContinuesExactly) {
  const v1::Job reference = Submit(10);
  ASSERT_TRUE(WaitState(reference.id(), v1::JOB_STATE_SUCCEEDED));

  control_->Allow(3);
  const v1::Job job = Submit(10);
  ASSERT_TRUE(WaitStep(job.id(), 3));
  ASSERT_TRUE(WaitBlockedInStep());  // step 4 is in flight
  absl::StatusOr<v1::Job> pausing = manager_->Pause(job.id());
  ASSERT_TRUE(pausing.ok()) << pausing.status();
  EXPECT_EQ(pausing->state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(pausing->pause_requested());
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_PAUSED));
  const int64_t paused_at = Get(job.id()).step();
  EXPECT_EQ(paused_at, 4);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Get(job.id()).step(), paused_at) << "a paused job must not step";
  EXPECT_TRUE(manager_->Pause(job.id()).ok()) << "pausing a paused job is a no-op";
  {
    absl::MutexLock lock(&control_->mu);
    EXPECT_GE(control_->drains, 2);  // the reference's final drain + the pause's
    EXPECT_EQ(control_->destroyed, 1) << "the paused trainer stays alive";
  }
  absl::StatusOr<v1::Job> resumed = manager_->Resume(job.id());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(Get(job.id()).step(), 10);
  EXPECT_EQ(Get(job.id()).weights_digest(), Get(reference.id()).weights_digest());
  absl::MutexLock lock(&control_->mu);
  EXPECT_EQ(control_->creates, 2) << "resume must reuse the trainer";
}

TEST_F(JobManagerTest, ActionsOutsideTheirStatesAreFailedPreconditions) {
  control_->Allow(0);
  const v1::Job running = Submit(2);
  const v1::Job queued = Submit(2);
  ASSERT_TRUE(WaitState(running.id(), v1::JOB_STATE_RUNNING));
  EXPECT_EQ(manager_->Pause(queued.id()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->Resume(queued.id()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(manager_->Resume(running.id()).ok()) << "resuming a running job is a no-op";
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(WaitState(queued.id(), v1::JOB_STATE_SUCCEEDED));
  absl::Status pause = manager_->Pause(running.id()).status();
  EXPECT_EQ(pause.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(pause.message().find("SUCCEEDED"), absl::string_view::npos) << pause;
  EXPECT_EQ(manager_->Cancel(running.id()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->Get("job-nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Pause("job-nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Cancel("job-nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, CancelsQueuedRunningAndPausedJobs) {
  control_->Allow(0);
  const v1::Job running = Submit(5);
  const v1::Job queued = Submit(5);
  ASSERT_TRUE(WaitState(running.id(), v1::JOB_STATE_RUNNING));
  ASSERT_TRUE(WaitBlockedInStep());  // step 1 is in flight: cancel takes effect after it
  absl::StatusOr<v1::Job> c1 = manager_->Cancel(queued.id());
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->state(), v1::JOB_STATE_CANCELLED);
  absl::StatusOr<v1::Job> c2 = manager_->Cancel(running.id());
  ASSERT_TRUE(c2.ok());
  EXPECT_TRUE(c2->cancel_requested());
  control_->Allow(1);
  ASSERT_TRUE(WaitState(running.id(), v1::JOB_STATE_CANCELLED));
  EXPECT_EQ(Get(running.id()).step(), 1);

  control_->Allow(INT64_MAX);
  const v1::Job paused = Submit(1000000);
  ASSERT_TRUE(WaitFor([&] { return Get(paused.id()).step() > 0; }, 10s));
  ASSERT_TRUE(manager_->Pause(paused.id()).ok());
  ASSERT_TRUE(WaitState(paused.id(), v1::JOB_STATE_PAUSED));
  absl::StatusOr<v1::Job> c3 = manager_->Cancel(paused.id());
  ASSERT_TRUE(c3.ok());
  EXPECT_EQ(c3->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&control_->mu);
    return control_->destroyed == 2;
  }, 10s)) << "cancel frees the trainer";
  EXPECT_EQ(Get(queued.id()).step(), 0);
}

TEST_F(JobManagerTest, RestartFindsEveryJobAsItWas) {
  const v1::Job done = Submit(3);
  ASSERT_TRUE(WaitState(done.id(), v1::JOB_STATE_SUCCEEDED));
  const std::string digest = Get(done.id()).weights_digest();
  control_->Allow(5);
  const v1::Job interrupted = Submit(50);
  const v1::Job queued = Submit(2);
  ASSERT_TRUE(WaitStep(interrupted.id(), 5));
  ASSERT_TRUE(WaitBlockedInStep());  // step 6 is in flight
  std::thread stopper([&] { manager_->Shutdown(); });
  std::this_thread::sleep_for(50ms);
  control_->Allow(INT64_MAX);
  stopper.join();
  const v1::Job stopped = Get(interrupted.id());
  EXPECT_EQ(stopped.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(stopped.error().find("interrupted by daemon shutdown"), std::string::npos) << stopped.error();
  EXPECT_EQ(Get(queued.id()).state(), v1::JOB_STATE_QUEUED);

  Open();  // a new manager on the same database
  EXPECT_EQ(Get(done.id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Get(done.id()).weights_digest(), digest);
  EXPECT_EQ(Get(interrupted.id()).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Get(interrupted.id()).step(), stopped.step());
  EXPECT_TRUE(WaitState(queued.id(), v1::JOB_STATE_SUCCEEDED)) << "queued jobs run after a restart";
  auto listed = manager_->List({}, 0, "");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->jobs.size(), 3u);
  EXPECT_EQ(listed->jobs[0].id(), done.id());
  EXPECT_EQ(listed->jobs[2].id(), queued.id());
}

TEST_F(JobManagerTest, JobsFoundRunningInTheStoreBecomeFailed) {
  manager_.reset();
  v1::Job job;
  job.set_id("job-000000000001");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_step(7);
  job.set_total_steps(9);
  *job.mutable_spec() = Spec(9);
  ASSERT_TRUE(store_->Put(job).ok());
  Open();
  const v1::Job found = Get(job.id());
  EXPECT_EQ(found.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(found.error().find("daemon stopped while the job was RUNNING at step 7 of 9"),
            std::string::npos) << found.error();
}

// Issue 18, case 1: a job failing with raw bytes of a data file in its message; then one
// record that does not parse and one an old daemon wrote with non-UTF-8 text. The
// manager serves them all, escaped, across a restart, and runs new jobs.
TEST_F(JobManagerTest, NonUtf8ErrorsAndUnreadableRecordsDoNotStopTheDaemon) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_at_step = 1;
    control_->fail_message = "data.jsonl:1: not JSON: \xff\xfe[1,2,3]";
  }
  const v1::Job failed = Submit(3);
  ASSERT_TRUE(WaitState(failed.id(), v1::JOB_STATE_FAILED));
  const std::string escaped = "data.jsonl:1: not JSON: \\xFF\\xFE[1,2,3]";
  EXPECT_NE(Get(failed.id()).error().find(escaped), std::string::npos) << Get(failed.id()).error();
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_at_step = -1;
  }
  manager_.reset();
  InsertRaw("job-0000000000bb", v1::JOB_STATE_RUNNING, "\x0a\xff\xff\xff");
  v1::Job old;
  old.set_id("job-0000000000cc");
  old.set_state(v1::JOB_STATE_FAILED);
  old.set_error("tokenizer.json: \xc3\x28");
  std::string blob;
  ASSERT_TRUE(old.SerializeToString(&blob));
  InsertRaw(old.id(), old.state(), blob);

  Open();  // the daemon starts
  EXPECT_EQ(Get(failed.id()).state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(Get(failed.id()).error().find(escaped), std::string::npos);
  const v1::Job broken = Get("job-0000000000bb");
  EXPECT_EQ(broken.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(broken.error().find("could not read this job's record"), std::string::npos) << broken.error();
  EXPECT_EQ(Get("job-0000000000cc").error(), "tokenizer.json: \\xC3(");
  auto listed = manager_->List({}, 0, "");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs.size(), 3u);
  const v1::Job next = Submit(2);
  EXPECT_TRUE(WaitState(next.id(), v1::JOB_STATE_SUCCEEDED));
  {
    absl::MutexLock lock(&control_->mu);
    EXPECT_EQ(control_->creates, 2) << "the unreadable RUNNING record is never resumed";
  }
}

// Issue 18, case 2: a job that took the daemon down (kill -9 while it ran, before it
// completed a step) is resumed at the next starts, but not forever: after its third
// such run it is FAILED, saying why, and not started again.
TEST_F(JobManagerTest, JobThatKeepsTakingTheDaemonDownIsNotResumedForever) {
  manager_.reset();
  HoldCreate(true);
  Open();
  const v1::Job job = *manager_->Submit(Durable(4));
  ASSERT_TRUE(WaitCreates(1));
  for (int crash = 1; crash <= 2; ++crash) {
    Crash();
    Open();
    ASSERT_TRUE(WaitCreates(crash + 1)) << "resumed after crash " << crash;
    EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_RUNNING);
  }
  Crash();
  Open();
  const v1::Job failed = Get(job.id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed.error().find("the daemon stopped 3 times while running this job"), std::string::npos)
      << failed.error();
  EXPECT_NE(failed.error().find("at step 0 of 4; it is not resumed again"), std::string::npos)
      << failed.error();
  std::this_thread::sleep_for(100ms);
  absl::MutexLock lock(&control_->mu);
  EXPECT_EQ(control_->creates, 3) << "not started a fourth time";
}

// Only runs ended by the daemon dying count, and a completed step starts the count anew:
// a job that progresses between crashes, or whose daemon is stopped cleanly, goes on.
TEST_F(JobManagerTest, ProgressAndCleanShutdownsDoNotCountAgainstAJob) {
  manager_.reset();
  HoldCreate(true);
  Open();
  const v1::Job job = *manager_->Submit(Durable(1000));
  ASSERT_TRUE(WaitCreates(1));
  Crash();
  Open();
  ASSERT_TRUE(WaitCreates(2));
  control_->Allow(1);
  HoldCreate(false);
  ASSERT_TRUE(WaitStep(job.id(), 1));  // progress
  ASSERT_TRUE(WaitBlockedInStep());
  for (int crash = 1; crash <= 2; ++crash) {  // the first lands in the run that progressed
    Crash();
    Open();
    ASSERT_TRUE(WaitCreates(2 + crash));
  }
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_RUNNING);
  // A clean shutdown while it is paused, before a step: not a crash.
  ASSERT_TRUE(manager_->Pause(job.id()).ok());
  control_->Allow(0);
  HoldCreate(false);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_PAUSED));
  HoldCreate(true);
  Open();
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_PAUSED) << Get(job.id()).error();
  ASSERT_TRUE(manager_->Resume(job.id()).ok());
  ASSERT_TRUE(WaitCreates(5));
  Crash();  // the second crash since its last step: the clean stop did not count
  Open();
  ASSERT_TRUE(WaitCreates(6));
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_RUNNING);
  Crash();  // the third
  Open();
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(Get(job.id()).error().find("stopped 3 times"), std::string::npos) << Get(job.id()).error();
}

// Issue 18, case 6: a full state directory.
TEST_F(JobManagerTest, SubmitOnAFullStoreIsResourceExhausted) {
  ASSERT_TRUE(store_->SetMaxPages(1).ok());
  v1::JobSpec spec = Spec(2);
  spec.set_output_dir("/out/" + std::string(20000, 'o'));  // a record that needs pages
  absl::StatusOr<v1::Job> job = manager_->Submit(spec);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted) << job.status();
  EXPECT_NE(job.status().message().find("jobs.db"), absl::string_view::npos) << job.status();
  EXPECT_TRUE(manager_->List({}, 0, "")->jobs.empty());
  ASSERT_TRUE(store_->SetMaxPages(1 << 30).ok());
  EXPECT_TRUE(manager_->Submit(spec).ok());
}

TEST_F(JobManagerTest, FinalStateIsShownOnlyOnceRecorded) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->digest_bytes = 20000;  // the SUCCEEDED record needs pages the store lacks
  }
  control_->Allow(1);
  const v1::Job job = Submit(2);
  ASSERT_TRUE(WaitStep(job.id(), 1));
  ASSERT_TRUE(WaitBlockedInStep());
  ASSERT_TRUE(store_->SetMaxPages(1).ok());
  Collector events;
  ASSERT_TRUE(manager_->Subscribe(job.id(), false, &events).ok());
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(WaitFor([&] { return Get(job.id()).error().find("cannot record") != std::string::npos; }, 10s));
  v1::Job pending = Get(job.id());
  EXPECT_EQ(pending.state(), v1::JOB_STATE_RUNNING);
  EXPECT_NE(pending.error().find("SUCCEEDED"), std::string::npos) << pending.error();
  EXPECT_NE(pending.error().find("full"), std::string::npos) << pending.error();
  std::this_thread::sleep_for(1500ms);  // retried, still not recorded
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(events.lasts(), 0);
  ASSERT_TRUE(store_->SetMaxPages(1 << 30).ok());  // space returns
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(Get(job.id()).error().empty()) << Get(job.id()).error();
  EXPECT_TRUE(WaitFor([&] { return events.lasts() == 1; }, 10s));
  Open();
  EXPECT_EQ(Get(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Get(job.id()).weights_digest().size(), 20000u);
}

// With a checkpoint_dir, a job found RUNNING continues ahead of the queue, one found
// PAUSED stays PAUSED (across another restart too) and holds the queue until resumed
// or cancelled, and one whose cancel was requested is CANCELLED. (The fake trainer
// continues at the step of the checkpoint header Put() writes and reads no weights;
// the real resume is checked in tests/server/job_checkpoint_test.cc and
// tests/server/durability_integration_test.cc.)
class DurableRestartTest : public JobManagerTest {
 protected:
  // A job record as the daemon leaves it when it stops at `step`, with checkpoints of
  // the job (headers only) at `checkpoints` in its own directory.
  void Put(const std::string& id, v1::JobState state, bool cancel = false, int64_t step = 2,
           int64_t steps = 4, std::vector<int64_t> checkpoints = {2}) {
    v1::JobSpec durable = Spec(steps);
    durable.set_checkpoint_dir(dir_.Join("ckpt"));
    v1::Job job;
    job.set_id(id);
    job.set_state(state);
    job.set_step(step);
    job.set_tokens_seen(step * kTokensPerStep);
    job.set_total_steps(steps);
    job.set_cancel_requested(cancel);
    *job.mutable_spec() = durable;
    ASSERT_TRUE(store_->Put(job).ok());
    for (int64_t at : checkpoints) {
      CheckpointMeta meta;
      meta.step = at;
      meta.tokens_seen = at * kTokensPerStep;
      meta.run_id = id;
      ASSERT_TRUE(WriteCheckpoint(JobCheckpointDir(dir_.Join("ckpt"), id), meta, {}, 10).ok());
    }
  }
  static constexpr int64_t kTokensPerStep = 2 * 8;  // Spec(): micro_batch_size x seq_len
};

TEST_F(DurableRestartTest, RunningJobContinuesFirst) {
  manager_.reset();
  Put("job-00000000000a", v1::JOB_STATE_QUEUED);
  Put("job-00000000000d", v1::JOB_STATE_RUNNING);
  Open();
  ASSERT_TRUE(WaitState("job-00000000000d", v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(Get("job-00000000000d").step(), 4);
  const v1::Job d = Get("job-00000000000d");
  ASSERT_TRUE(WaitState("job-00000000000a", v1::JOB_STATE_SUCCEEDED));
  const v1::Job a = Get("job-00000000000a");
  EXPECT_GE(a.start_time().seconds(), d.end_time().seconds() - 1) << "the restored job ran first";
}

// The class "after a restart, a job's step must not show a value and then go back": the
// daemon stopped at step 7, the job's newest checkpoint is at step 5. From the moment
// the manager starts, Get() shows step 5 (and its tokens), the step it continues from,
// and the step only goes up from there. The job runs in its own checkpoint directory
// under the spec's, with its id as the run id.
TEST_F(DurableRestartTest, RestoredStepIsItsCheckpointsAndNeverGoesBack) {
  manager_.reset();
  const std::string id = "job-0000000000c7";
  Put(id, v1::JOB_STATE_RUNNING, false, /*step=*/7, /*steps=*/12, /*checkpoints=*/{3, 5});
  control_->Allow(5);  // resumed at step 5, its next step waits
  Open();
  const v1::Job first = Get(id);
  EXPECT_EQ(first.step(), 5) << "shows the checkpoint's step, not the 7 it had reached";
  EXPECT_EQ(first.tokens_seen(), 5 * kTokensPerStep);
  auto stored = store_->LoadAll();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].step(), 5) << "and the store says the same";
  ASSERT_TRUE(WaitBlockedInStep());
  EXPECT_EQ(Get(id).step(), 5);
  {
    absl::MutexLock lock(&control_->mu);
    ASSERT_EQ(control_->created_configs.size(), 1u);
    const TrainConfig& config = control_->created_configs[0];
    EXPECT_EQ(config.run_id, id);
    EXPECT_EQ(config.checkpoint_dir, JobCheckpointDir(dir_.Join("ckpt"), id));
    EXPECT_EQ(config.resume_from, config.checkpoint_dir);
  }
  EXPECT_EQ(Get(id).spec().checkpoint_dir(), dir_.Join("ckpt")) << "the API shows the directory as given";
  int64_t last = first.step();
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done) {
      const int64_t step = Get(id).step();
      EXPECT_GE(step, last) << "the step went back";
      last = std::max(last, step);
    }
  });
  control_->Allow(INT64_MAX);
  EXPECT_TRUE(WaitState(id, v1::JOB_STATE_SUCCEEDED));
  done = true;
  poller.join();
  EXPECT_EQ(Get(id).step(), 12);
  EXPECT_EQ(Get(id).tokens_seen(), 12 * kTokensPerStep);
}

// A restored job with a checkpoint_dir but no checkpoint yet shows step 0 from the start.
TEST_F(DurableRestartTest, RestoredJobWithoutACheckpointShowsStepZero) {
  manager_.reset();
  Put("job-0000000000c8", v1::JOB_STATE_RUNNING, false, /*step=*/3, /*steps=*/6, /*checkpoints=*/{});
  control_->Allow(0);
  Open();
  EXPECT_EQ(Get("job-0000000000c8").step(), 0);
  EXPECT_EQ(Get("job-0000000000c8").tokens_seen(), 0);
}

TEST_F(DurableRestartTest, CancelRequestedJobIsCancelled) {
  manager_.reset();
  Put("job-00000000000c", v1::JOB_STATE_RUNNING, /*cancel=*/true);
  Open();
  EXPECT_EQ(Get("job-00000000000c").state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(DurableRestartTest, PausedJobStaysPausedHoldsTheQueueAndResumes) {
  manager_.reset();
  Put("job-00000000000b", v1::JOB_STATE_PAUSED);
  Put("job-00000000000e", v1::JOB_STATE_QUEUED);
  Open();
  Open();  // shut down while it waits paused: still PAUSED in the store
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(Get("job-00000000000b").state(), v1::JOB_STATE_PAUSED);
  EXPECT_EQ(Get("job-00000000000b").step(), 2);
  EXPECT_EQ(Get("job-00000000000e").state(), v1::JOB_STATE_QUEUED) << "a paused job holds the queue";
  EXPECT_EQ(manager_->node_snapshot().running_job_id, "job-00000000000b");
  ASSERT_TRUE(manager_->Resume("job-00000000000b").ok());
  ASSERT_TRUE(WaitState("job-00000000000b", v1::JOB_STATE_SUCCEEDED));
  ASSERT_TRUE(WaitState("job-00000000000e", v1::JOB_STATE_SUCCEEDED));
}

TEST_F(DurableRestartTest, RestoredPausedJobCanBeCancelled) {
  manager_.reset();
  Put("job-0000000000aa", v1::JOB_STATE_PAUSED);
  Open();
  ASSERT_TRUE(WaitFor([&] { return manager_->node_snapshot().running_job_id == "job-0000000000aa"; }, 10s));
  ASSERT_TRUE(manager_->Cancel("job-0000000000aa").ok());
  EXPECT_EQ(Get("job-0000000000aa").state(), v1::JOB_STATE_CANCELLED);
  const v1::Job next = Submit(2);
  EXPECT_TRUE(WaitState(next.id(), v1::JOB_STATE_SUCCEEDED)) << "the cancelled job frees the GPUs";
}

TEST_F(JobManagerTest, ListFiltersByStateAndPages) {
  control_->Allow(0);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(1).id());
  ASSERT_TRUE(WaitState(ids[0], v1::JOB_STATE_RUNNING));
  auto queued = manager_->List({v1::JOB_STATE_QUEUED}, 0, "");
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->jobs.size(), 4u);
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = manager_->List({}, 2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const v1::Job& j : page->jobs) seen.push_back(j.id());
    token = page->next_page_token;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(manager_->List({}, 0, "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->List({}, 0, "99").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->List({}, 5000, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->List({}, -1, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, SubscribersGetSnapshotStepsAndTheLastEvent) {
  control_->Allow(0);
  const v1::Job job = Submit(4);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_RUNNING));
  Collector live;
  absl::StatusOr<int64_t> handle = manager_->Subscribe(job.id(), false, &live);
  ASSERT_TRUE(handle.ok());
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(WaitFor([&] { return live.lasts() == 1; }, 10s));
  const std::vector<v1::JobEvent> events = live.events();
  ASSERT_EQ(events.size(), 1u + 4u + 1u);
  EXPECT_EQ(events[0].type(), v1::JobEvent::TYPE_SNAPSHOT);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(events[i].type(), v1::JobEvent::TYPE_STEP);
    EXPECT_EQ(events[i].step().step(), i);
    EXPECT_EQ(events[i].sequence(), events[i - 1].sequence() + 1);
  }
  EXPECT_EQ(events[5].type(), v1::JobEvent::TYPE_STATE_CHANGE);
  EXPECT_EQ(events[5].job().state(), v1::JOB_STATE_SUCCEEDED);
  manager_->Unsubscribe(*handle);

  Collector late;
  ASSERT_TRUE(manager_->Subscribe(job.id(), /*replay=*/true, &late).ok());
  const std::vector<v1::JobEvent> replayed = late.events();
  // QUEUED, RUNNING, 4 steps, SUCCEEDED, then the snapshot (the only `last`).
  ASSERT_EQ(replayed.size(), 8u);
  EXPECT_EQ(replayed.back().type(), v1::JobEvent::TYPE_SNAPSHOT);
  EXPECT_EQ(late.lasts(), 1);
  EXPECT_EQ(manager_->Subscribe("job-nope", false, &late).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, StepEventsTheJobAndTheMetricsCarryTheEvalLoss) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->eval_interval = 2;
  }
  const v1::Job job = Submit(5);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_SUCCEEDED));
  Collector replay;
  ASSERT_TRUE(manager_->Subscribe(job.id(), /*replay=*/true, &replay).ok());
  int steps = 0;
  for (const v1::JobEvent& e : replay.events()) {
    if (e.type() != v1::JobEvent::TYPE_STEP) continue;
    ++steps;
    const int64_t step = e.step().step();
    if (step % 2 == 0) {
      ASSERT_TRUE(e.step().has_eval_loss()) << "step " << step;
      EXPECT_DOUBLE_EQ(e.step().eval_loss(), 20.0 / step);
      EXPECT_EQ(e.step().eval_tokens(), 64);
      EXPECT_DOUBLE_EQ(e.job().last_eval_loss(), 20.0 / step);
    } else {
      EXPECT_FALSE(e.step().has_eval_loss()) << "step " << step;
      EXPECT_EQ(e.job().has_last_eval_loss(), step > 2) << "step " << step;
    }
  }
  EXPECT_EQ(steps, 5);
  const v1::Job done = Get(job.id());
  ASSERT_TRUE(done.has_last_eval_loss());
  EXPECT_DOUBLE_EQ(done.last_eval_loss(), 5.0);  // step 4's, kept through step 5
  auto stored = store_->LoadAll();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_DOUBLE_EQ((*stored)[0].last_eval_loss(), 5.0);
  EXPECT_NE(metrics_.Scrape().find("\nslidedp_eval_loss 5\n"), std::string::npos) << metrics_.Scrape();
}

TEST_F(JobManagerTest, JobsWithoutEvalDataHaveNoEvalLoss) {
  const v1::Job job = Submit(3);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_SUCCEEDED));
  EXPECT_FALSE(Get(job.id()).has_last_eval_loss());
}

TEST_F(JobManagerTest, OnlyRecentFinishedJobsKeepTheirHistory) {
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(Submit(2).id());
  ASSERT_TRUE(WaitState(ids.back(), v1::JOB_STATE_SUCCEEDED));
  Collector oldest, newest;
  ASSERT_TRUE(manager_->Subscribe(ids.front(), /*replay=*/true, &oldest).ok());
  ASSERT_TRUE(manager_->Subscribe(ids.back(), /*replay=*/true, &newest).ok());
  ASSERT_EQ(oldest.events().size(), 1u) << "only the snapshot is left of an old job";
  EXPECT_TRUE(oldest.events()[0].job().has_spec()) << "the snapshot carries the spec";
  const std::vector<v1::JobEvent> recent = newest.events();
  ASSERT_EQ(recent.size(), 6u);  // QUEUED, RUNNING, 2 steps, SUCCEEDED, snapshot
  EXPECT_FALSE(recent[2].job().has_spec()) << "step events leave the spec out";
}

}  // namespace
}  // namespace slidedp::server
