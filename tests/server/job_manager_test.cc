// JobManager with a scripted FakeTrainer: lifecycle, FIFO, failure paths, pause/resume
// at step boundaries, cancel, listing, events. Restarts from the store:
// job_manager_restart_test.cc.
#include "tests/server/job_manager_fixture.h"

namespace slidedp::server {
namespace {

using namespace testing;  // job_manager_fixture.h, test_util.h, fake_trainer.h; chrono literals

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
