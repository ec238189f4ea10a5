// JobManager with the real engine (the tiny model on the cpu device, a few steps) and a
// daemon "killed" mid-job: checkpoints belong to one job (two jobs naming the same
// checkpoint_dir never continue from or prune each other's), a restored job continues
// from its newest checkpoint that verifies (a corrupt newer one is passed over and the
// job's event says so; none verifying fails the job), always to the weights of an
// uninterrupted run. Issue 18, cases 7 and 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/state/checkpoint.h"
#include "server/job_manager.h"
#include "server/spec_translation.h"
#include "tests/server/fake_trainer.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

namespace fs = std::filesystem;
using testing::ManagerOnStore;
using testing::OpenManagerOnStore;
using testing::TempDir;
using testing::WaitFor;
using namespace std::chrono_literals;

// Stops the job that was created while `block_after` was set once it has completed
// that many steps: its next Step() waits until released, then fails without running.
// The test reads the job's record in between: what a daemon killed then leaves behind.
struct KillSwitch {
  absl::Mutex mu;
  int64_t block_after ABSL_GUARDED_BY(mu) = -1;  // < 0: never
  bool blocked ABSL_GUARDED_BY(mu) = false;
  bool released ABSL_GUARDED_BY(mu) = false;
};

// The real trainer, with a KillSwitch in front of Step().
class KillableTrainer final : public Trainer {
 public:
  KillableTrainer(std::unique_ptr<Trainer> inner, std::shared_ptr<KillSwitch> kill, int64_t block_after)
      : inner_(std::move(inner)), kill_(std::move(kill)), block_after_(block_after) {}

  absl::StatusOr<StepStats> Step() override {
    if (block_after_ >= 0 && inner_->completed_steps() >= block_after_) {
      absl::MutexLock lock(&kill_->mu);
      kill_->blocked = true;
      kill_->mu.Await(absl::Condition(&kill_->released));
      return absl::AbortedError("killed");
    }
    return inner_->Step();
  }
  absl::Status Drain() override { return inner_->Drain(); }
  int64_t completed_steps() const override { return inner_->completed_steps(); }
  const TrainConfig& config() const override { return inner_->config(); }
  const ModelConfig& model_config() const override { return inner_->model_config(); }
  int64_t num_parameters() const override { return inner_->num_parameters(); }
  std::string WeightsDigest() override { return inner_->WeightsDigest(); }
  absl::Status ExportHf(const std::string& dir) override { return inner_->ExportHf(dir); }
  absl::StatusOr<std::string> SaveCheckpoint() override { return inner_->SaveCheckpoint(); }
  ResumeReport resumed() const override { return inner_->resumed(); }
  int64_t tokens_seen() const override { return inner_->tokens_seen(); }
  PlanReport Plan() const override { return inner_->Plan(); }

 private:
  std::unique_ptr<Trainer> inner_;
  std::shared_ptr<KillSwitch> kill_;
  int64_t block_after_;
};

// Collects a job's event messages (replayed and new).
class Messages final : public JobEventSink {
 public:
  void OnJobEvent(const v1::JobEvent& event, bool) override {
    absl::MutexLock lock(&mu_);
    all_ += event.message() + "\n";
  }
  std::string all() {
    absl::MutexLock lock(&mu_);
    return all_;
  }

 private:
  absl::Mutex mu_;
  std::string all_;
};

constexpr int64_t kSteps = 8;

class JobCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    Release();
    manager_.reset();
  }

  void Open() {
    manager_.reset();
    store_.reset();
    TrainerFactory factory = [kill = kill_](const TrainConfig& config, std::shared_ptr<const StopToken> stop)
        -> absl::StatusOr<std::unique_ptr<Trainer>> {
      TrainerInputs inputs;
      inputs.stop = std::move(stop);
      absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, std::move(inputs));
      if (!t.ok()) return t.status();
      absl::MutexLock lock(&kill->mu);
      return std::unique_ptr<Trainer>(new KillableTrainer(*std::move(t), kill, kill->block_after));
    };
    absl::StatusOr<ManagerOnStore> opened = OpenManagerOnStore(dir_.Join("jobs.db"), std::move(factory));
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(opened->store);
    manager_ = std::move(opened->manager);
  }

  // The tiny job, 8 steps, a checkpoint every 2 steps in `checkpoint_dir`.
  v1::JobSpec Spec(const std::string& checkpoint_dir, int keep) {
    TrainConfig c;
    c.model = "tiny";
    c.seq_len = 16;
    c.micro_batch_size = 2;
    c.steps = kSteps;
    c.optimizer.lr = 3e-3;
    c.optimizer.warmup_steps = 2;
    c.seed = 7;
    c.policy.update_threads = 1;
    c.checkpoint_dir = checkpoint_dir;
    c.checkpoint_interval = 2;
    c.keep_checkpoints = keep;
    return TrainConfigToJobSpec(c);
  }

  v1::Job Get(const std::string& id) { return *manager_->Get(id); }
  // True once the job is in `state`; false as soon as it is in another final state.
  bool WaitState(const std::string& id, v1::JobState state) {
    WaitFor([&] { return Get(id).state() == state || IsTerminal(Get(id).state()); }, 120s);
    return Get(id).state() == state;
  }
  std::string Run(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = manager_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(WaitState(job->id(), v1::JOB_STATE_SUCCEEDED)) << Get(job->id()).error();
    return job->id();
  }
  void Release() {
    absl::MutexLock lock(&kill_->mu);
    kill_->released = true;
  }

  // Runs a job for `spec` until it has completed `steps` steps, then "kills the daemon":
  // the job's record goes back into the store as it was at that moment (RUNNING at that
  // step), and its checkpoints are those it wrote until then, as after a SIGKILL; then
  // `before_restart(id)` may damage its files; then a new manager starts on the store.
  // Returns the job's id.
  std::string RunUntilKilled(const v1::JobSpec& spec, int64_t steps,
                             const std::function<void(const std::string&)>& before_restart = nullptr) {
    {
      absl::MutexLock lock(&kill_->mu);
      kill_->block_after = steps;
    }
    absl::StatusOr<v1::Job> job = manager_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(WaitFor([&] {
      absl::MutexLock lock(&kill_->mu);
      return kill_->blocked;
    }, 120s)) << Get(job->id()).error();
    const v1::Job at_kill = Get(job->id());
    EXPECT_EQ(at_kill.state(), v1::JOB_STATE_RUNNING);
    EXPECT_EQ(at_kill.step(), steps);
    Release();
    EXPECT_TRUE(WaitState(job->id(), v1::JOB_STATE_FAILED));  // "killed": writes nothing more
    manager_.reset();
    EXPECT_TRUE(store_->Put(at_kill).ok());
    kill_ = std::make_shared<KillSwitch>();
    if (before_restart) before_restart(job->id());
    Open();
    return job->id();
  }

  std::string Events(const std::string& id) {
    Messages sink;
    absl::StatusOr<int64_t> sub = manager_->Subscribe(id, /*replay=*/true, &sink);
    EXPECT_TRUE(sub.ok()) << sub.status();
    if (sub.ok()) manager_->Unsubscribe(*sub);
    return sink.all();
  }

  static std::vector<std::string> Files(const std::string& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  TempDir dir_;
  std::shared_ptr<KillSwitch> kill_ = std::make_shared<KillSwitch>();
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
};

// Case 7: job A finishes; job B with the identical spec and checkpoint_dir is killed
// after step 5 (its checkpoints at 2 and 4; A's go to 8). B continues from its own
// checkpoint at step 4 (not from A's at 8), its step shown from the restart on is 4,
// it ends with the weights of an uninterrupted run, and A's checkpoints are untouched.
TEST_F(JobCheckpointTest, JobsSharingACheckpointDirNeverMixTheirCheckpoints) {
  const std::string dir = dir_.Join("ckpt");
  const std::string a = Run(Spec(dir, 2));
  const std::string reference = Get(a).weights_digest();
  ASSERT_FALSE(reference.empty());
  const std::vector<std::string> a_files = Files(JobCheckpointDir(dir, a));
  EXPECT_EQ(a_files, (std::vector<std::string>{"ckpt-000000006.slidedp", "ckpt-000000008.slidedp"}));

  const std::string b = RunUntilKilled(Spec(dir, 2), 5);
  EXPECT_EQ(Files(JobCheckpointDir(dir, b)),
            (std::vector<std::string>{"ckpt-000000002.slidedp", "ckpt-000000004.slidedp"}))
      << "B's checkpoints are its own, not pruned for A's newer ones";
  EXPECT_EQ(Get(b).step(), 4) << "from the restart on, B shows the step it continues from";
  ASSERT_TRUE(WaitState(b, v1::JOB_STATE_SUCCEEDED)) << Get(b).error();
  const std::string events = Events(b);
  EXPECT_NE(events.find("continuing from " + CheckpointPath(JobCheckpointDir(dir, b), 4)), std::string::npos)
      << events;
  EXPECT_EQ(Get(b).step(), kSteps);
  EXPECT_EQ(Get(b).weights_digest(), reference) << "B killed and continued equals an uninterrupted run";
  EXPECT_EQ(Files(JobCheckpointDir(dir, a)), a_files) << "B never touches A's checkpoints";
  EXPECT_EQ(Get(b).spec().checkpoint_dir(), dir) << "the API keeps the directory as given";
}

// Case 8: the killed job's newest checkpoint is corrupt (bytes of its payload flipped);
// it continues from the previous one, its event names the corrupt file and why, and it
// ends with the weights of an uninterrupted run.
TEST_F(JobCheckpointTest, ACorruptNewestCheckpointIsPassedOverAndTheEventSaysSo) {
  const std::string dir = dir_.Join("ckpt");
  const std::string reference = Get(Run(Spec(dir_.Join("ref"), 3))).weights_digest();
  std::string corrupt;
  const std::string id = RunUntilKilled(Spec(dir, 3), 7, [&](const std::string& job) {  // checkpoints at 2, 4, 6
    corrupt = CheckpointPath(JobCheckpointDir(dir, job), 6);
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(corrupt) / 2));
    f.write("\xde\xad\xbe\xef", 4);
  });
  ASSERT_TRUE(WaitState(id, v1::JOB_STATE_SUCCEEDED)) << Get(id).error();
  const std::string events = Events(id);
  EXPECT_NE(events.find("continuing from " + CheckpointPath(JobCheckpointDir(dir, id), 4)), std::string::npos)
      << events;
  EXPECT_NE(events.find(corrupt + ": checksum mismatch"), std::string::npos) << events;
  EXPECT_EQ(Get(id).weights_digest(), reference);
}

// Case 8: when no checkpoint of the job verifies, the job fails saying so (it does not
// start again from step 0).
TEST_F(JobCheckpointTest, NoCheckpointThatVerifiesFailsTheJob) {
  const std::string dir = dir_.Join("ckpt");
  const std::string id = RunUntilKilled(Spec(dir, 3), 5, [&](const std::string& job) {  // checkpoints at 2, 4
    for (int64_t step : {2, 4}) {
      const std::string path = CheckpointPath(JobCheckpointDir(dir, job), step);
      fs::resize_file(path, fs::file_size(path) - 100);
    }
  });
  ASSERT_TRUE(WaitState(id, v1::JOB_STATE_FAILED));
  const std::string error = Get(id).error();
  EXPECT_NE(error.find("none of the 2 checkpoints in " + JobCheckpointDir(dir, id) + " verifies"), std::string::npos)
      << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_LT(Get(id).step(), kSteps);
}

}  // namespace
}  // namespace slidedp::server
