// JobManager restarts from its store (FakeTrainer): every job found as it was, jobs found
// running, unreadable and non-UTF-8 records, a job that keeps taking the daemon down, a
// full store, final states shown once recorded, and durable jobs (checkpoints) after a
// crash: the running one first, its checkpoint's step, paused and cancel-requested jobs.
#include "tests/server/job_manager_fixture.h"

namespace slidedp::server {
namespace {

using namespace testing;  // job_manager_fixture.h, test_util.h, fake_trainer.h; chrono literals

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

}  // namespace
}  // namespace slidedp::server
