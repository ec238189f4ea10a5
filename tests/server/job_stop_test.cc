// The daemon against hostile or unlucky jobs (issue 18): cancel and shutdown reach a
// job inside a long evaluation (the real engine, case 5); whatever the engine throws
// (an allocation that fails) ends the job FAILED and the daemon serves on; a job that
// cannot fit in the host's memory is refused at SubmitJob with RESOURCE_EXHAUSTED
// naming the numbers (case 3).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/engine/trainer.h"
#include "server/daemon.h"
#include "server/job_manager.h"
#include "server/spec_translation.h"
#include "slidedp/v1/service.grpc.pb.h"
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
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The engine's trainer, observing the job's stop token, as slidedpd makes it.
absl::StatusOr<std::unique_ptr<Trainer>> RealTrainer(const TrainConfig& config, std::shared_ptr<const StopToken> stop) {
  TrainerInputs inputs;
  inputs.stop = std::move(stop);
  return Trainer::Create(config, std::move(inputs));
}

// A trainer whose step throws what a failed allocation throws.
class ThrowingTrainer final : public Trainer {
 public:
  explicit ThrowingTrainer(TrainConfig config) : config_(std::move(config)) {}
  absl::StatusOr<StepStats> Step() override { throw std::bad_alloc(); }
  absl::Status Drain() override { return absl::OkStatus(); }
  int64_t completed_steps() const override { return 0; }
  const TrainConfig& config() const override { return config_; }
  const ModelConfig& model_config() const override { return model_; }
  int64_t num_parameters() const override { return 1; }
  std::string WeightsDigest() override { return ""; }
  absl::Status ExportHf(const std::string&) override { return absl::OkStatus(); }

 private:
  TrainConfig config_;
  ModelConfig model_;
};

class JobStopTest : public ::testing::Test {
 protected:
  void Open(TrainerFactory factory) {
    manager_.reset();
    store_.reset();
    absl::StatusOr<ManagerOnStore> opened =
        OpenManagerOnStore(dir_.Join("jobs.db"), std::move(factory));
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(opened->store);
    manager_ = std::move(opened->manager);
  }

  // tiny on a token file, one step, then an evaluation of 2^30 batches (within the
  // bound, and far longer than any test).
  TrainConfig LongEvaluation() {
    const std::string path = dir_.Join("tokens.bin");
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 20000; ++i) {
      const uint16_t t = static_cast<uint16_t>((i * 7 + 3) % 509);
      f.write(reinterpret_cast<const char*>(&t), 2);
    }
    TrainConfig c;
    c.model = "tiny";
    c.data.format = DataFormat::kTokens;
    c.data.path = path;
    c.data.eval_path = path;
    c.eval_batches = int64_t{1} << 30;
    c.seq_len = 32;
    c.micro_batch_size = 2;
    c.steps = 1;
    return c;
  }

  v1::Job Submit(const TrainConfig& c) {
    absl::StatusOr<v1::Job> job = manager_->Submit(TrainConfigToJobSpec(c));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }
  v1::Job Get(const std::string& id) { return *manager_->Get(id); }
  bool WaitState(const std::string& id, v1::JobState state, std::chrono::milliseconds timeout = 30s) {
    return WaitFor([&] { return Get(id).state() == state; }, timeout);
  }

  TempDir dir_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobStopTest, CancelDuringALongEvaluationEndsTheJobPromptly) {
  Open(RealTrainer);
  const v1::Job job = Submit(LongEvaluation());
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_RUNNING));
  std::this_thread::sleep_for(2s);  // created, stepped once, evaluating
  ASSERT_EQ(Get(job.id()).state(), v1::JOB_STATE_RUNNING);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(manager_->Cancel(job.id()).ok());
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_CANCELLED, 20s)) << "still " << StateName(Get(job.id()).state());
  EXPECT_LT(Since(t0), 10.0);
  // The job thread is free for the next job.
  TrainConfig quick = LongEvaluation();
  quick.data.eval_path.clear();
  quick.eval_batches = 1;
  const v1::Job next = Submit(quick);
  EXPECT_TRUE(WaitState(next.id(), v1::JOB_STATE_SUCCEEDED)) << Get(next.id()).error();
}

TEST_F(JobStopTest, ShutdownDuringALongEvaluationKeepsTheJobToContinue) {
  Open(RealTrainer);
  TrainConfig c = LongEvaluation();
  c.checkpoint_dir = dir_.Join("ckpt");
  const v1::Job job = Submit(c);
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_RUNNING));
  std::this_thread::sleep_for(2s);
  const Clock::time_point t0 = Clock::now();
  manager_->Shutdown();
  EXPECT_LT(Since(t0), 10.0);
  // Stays RUNNING in the store for the next start, with the checkpoint of its step.
  auto stored = store_->LoadAll();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(fs::exists(dir_.Join("ckpt")) && !fs::is_empty(dir_.Join("ckpt")));
}

TEST_F(JobStopTest, ShutdownDuringALongEvaluationWithoutCheckpointsFailsTheJob) {
  Open(RealTrainer);
  const v1::Job job = Submit(LongEvaluation());
  ASSERT_TRUE(WaitState(job.id(), v1::JOB_STATE_RUNNING));
  std::this_thread::sleep_for(2s);
  const Clock::time_point t0 = Clock::now();
  manager_->Shutdown();
  EXPECT_LT(Since(t0), 10.0);
  const v1::Job done = Get(job.id());
  EXPECT_EQ(done.state(), v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(done.error(), "interrupted by daemon shutdown")) << done.error();
}

TEST_F(JobStopTest, WhatTheEngineThrowsFailsTheJobNotTheDaemon) {
  int creates = 0;
  Open([&creates](const TrainConfig& config, std::shared_ptr<const StopToken>)
           -> absl::StatusOr<std::unique_ptr<Trainer>> {
    if (++creates == 1) throw std::bad_alloc();  // the first job's creation
    return std::unique_ptr<Trainer>(new ThrowingTrainer(config));
  });
  TrainConfig c;
  c.steps = 3;
  const v1::Job a = Submit(c);
  const v1::Job b = Submit(c);
  ASSERT_TRUE(WaitState(a.id(), v1::JOB_STATE_FAILED));
  EXPECT_TRUE(absl::StrContains(Get(a.id()).error(), "out of host memory")) << Get(a.id()).error();
  ASSERT_TRUE(WaitState(b.id(), v1::JOB_STATE_FAILED));
  EXPECT_TRUE(absl::StrContains(Get(b.id()).error(), "out of host memory")) << Get(b.id()).error();
  EXPECT_TRUE(manager_->node_snapshot().running_job_id.empty());
}

TEST_F(JobStopTest, AnInjectedAllocationFailureInTheEngineFailsTheJob) {
  Open(RealTrainer);
  InjectHostAllocationFailure();
  TrainConfig c;
  c.steps = 2;
  c.seq_len = 16;
  const v1::Job a = Submit(c);
  ASSERT_TRUE(WaitState(a.id(), v1::JOB_STATE_FAILED));
  EXPECT_TRUE(absl::StrContains(Get(a.id()).error(), "out of host memory")) << Get(a.id()).error();
  const v1::Job b = Submit(c);
  EXPECT_TRUE(WaitState(b.id(), v1::JOB_STATE_SUCCEEDED)) << Get(b.id()).error();
}

// SubmitJob refuses what cannot fit in this host's memory at all, reading config.json
// only.
TEST(SubmitAdmission, AJobLargerThanTheHostIsRefusedAtSubmit) {
  TempDir dir;
  fs::create_directories(dir.Join("models/absurd"));
  testing::WriteFile(dir.Join("models/absurd/config.json"),
                     R"({"model_type": "llama", "vocab_size": 16777216, "hidden_size": 1048576,
                         "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1,
                         "num_key_value_heads": 1, "max_position_embeddings": 1})");
  DaemonOptions options;
  options.listen = "unix:" + dir.Join("d.sock");
  options.metrics_listen = "";
  options.state_dir = dir.Join("state");
  options.roots.model = {dir.Join("models")};
  int creates = 0;
  options.trainer_factory = [&creates](const TrainConfig&, std::shared_ptr<const StopToken>)
      -> absl::StatusOr<std::unique_ptr<Trainer>> {
    ++creates;
    return absl::InternalError("not in this test");
  };
  options.version = "test";
  auto daemon = Daemon::Start(std::move(options));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::TrainingService::NewStub(
      grpc::CreateChannel((*daemon)->listen_address(), grpc::InsecureChannelCredentials()));
  auto submit = [&](const v1::JobSpec& spec, v1::Job* job) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    return stub->SubmitJob(&context, request, job);
  };
  v1::JobSpec absurd;
  absurd.set_model(dir.Join("models/absurd"));
  absurd.set_seq_len(1);
  absurd.set_micro_batch_size(1);
  v1::Job job;
  grpc::Status s = submit(absurd, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "host state")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "this host has")) << s.error_message();
  // Within the documented limits, and still far beyond any host.
  v1::JobSpec long_rows;
  long_rows.set_model("tiny");
  long_rows.set_seq_len(1048576);
  long_rows.set_micro_batch_size(4);
  s = submit(long_rows, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "attention scores")) << s.error_message();
  // An ordinary job is admitted.
  v1::JobSpec tiny;
  tiny.set_model("tiny");
  tiny.set_steps(1);
  s = submit(tiny, &job);
  EXPECT_TRUE(s.ok()) << s.error_message();
  (*daemon)->Shutdown();
}

}  // namespace
}  // namespace slidedp::server
