// What the JobManager tests share: a manager over a job store in a temporary folder
// with a scripted FakeTrainer (tests/server/fake_trainer.h), helpers to submit, wait,
// crash and write raw rows, and an event collector. Header-only; the test's thread
// (Collector: the job thread, under the manager's mutex).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/state/checkpoint.h"
#include "server/job_manager.h"
#include "server/spec_translation.h"
#include "tests/server/fake_trainer.h"
#include "tests/server/raw_job_row.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {

using namespace std::chrono_literals;

inline v1::JobSpec Spec(int64_t steps) {
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
    InsertRawJobRow(dir_.Join("jobs.db"), id, state, blob);
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

}  // namespace slidedp::server::testing
