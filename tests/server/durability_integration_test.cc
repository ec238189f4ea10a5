// Durability with the real daemon and engine: slidedpd killed with SIGKILL mid-job
// comes back and the job continues from its last checkpoint to the same final weights
// as an uninterrupted run, while a queued job stays queued; a paused job stays paused
// across a restart (holding the GPUs) and resumes exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::chrono::seconds kWatchLimit{240};

class DurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_.Join("out")); }

  void StartDaemon() {
    daemon_ = std::make_unique<DaemonProcess>(SLIDEDPD_PATH, dir_.Join("state"),
                                              std::vector<std::string>{"--output_roots=" + dir_.Join("out")});
    ASSERT_TRUE(daemon_->started()) << daemon_->log();
  }

  CommandResult Cli(std::vector<std::string> args, std::chrono::seconds limit = 60s) {
    args.insert(args.begin(), {SLIDEDP_CLI_PATH, "--server=" + daemon_->address()});
    return RunCommand(args, limit);
  }

  nlohmann::json GetJson(const std::string& id) {
    CommandResult r = Cli({"--output=json", "get", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  std::string State(const std::string& id) { return GetJson(id).value("state", ""); }
  static int64_t Step(const nlohmann::json& job) {
    return job.is_object() ? std::stoll(job.value("step", std::string("0"))) : -1;
  }

  std::string Submit(const std::string& name, const std::string& yaml) {
    const std::string path = dir_.Join(name);
    WriteFile(path, yaml);
    CommandResult r = Cli({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  // The tiny job; `durable` adds a checkpoint directory and a checkpoint every 4 steps.
  std::string Yaml(int steps, bool durable) {
    std::string y = "model: tiny\nseq_len: 32\nmicro_batch_size: 2\nsteps: " + std::to_string(steps) +
                    "\noptimizer:\n  lr: 1.0e-3\n  warmup_steps: 2\nseed: 11\npolicy:\n  update_threads: 1\n";
    if (durable) y += "checkpoint_dir: " + dir_.Join("out/ckpt") + "\ncheckpoint_interval: 4\nkeep_checkpoints: 2\n";
    return y;
  }

  std::string WatchDigest(const std::string& id) {
    CommandResult w = Cli({"watch", id}, kWatchLimit);
    EXPECT_EQ(w.exit_code, 0) << w.out << w.err << daemon_->log();
    return GetJson(id).value("weights_digest", "");
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(DurabilityTest, KillNineMidJobContinuesFromTheCheckpointToTheSameWeights) {
  const int kSteps = 40;
  StartDaemon();
  const std::string durable = Submit("a.yaml", Yaml(kSteps, true));
  const std::string reference = Submit("b.yaml", Yaml(kSteps, false));  // queued behind it
  ASSERT_TRUE(WaitFor([&] { return Step(GetJson(durable)) >= 9; }, 180s)) << daemon_->log();
  daemon_->Kill();

  StartDaemon();
  EXPECT_EQ(State(reference), "JOB_STATE_QUEUED") << "a queued job stays queued";
  nlohmann::json job = GetJson(durable);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_RUNNING") << job.dump();
  EXPECT_LT(Step(job), kSteps) << "the kill must land mid-run for this test to mean anything";
  const std::string digest = WatchDigest(durable);
  ASSERT_FALSE(digest.empty());
  const std::string log = daemon_->log();
  EXPECT_NE(log.find("continues at step "), std::string::npos) << log;
  EXPECT_EQ(log.find("continues at step 0 "), std::string::npos) << "it had checkpoints: " << log;
  EXPECT_EQ(WatchDigest(reference), digest) << "resumed after kill -9 must equal the uninterrupted run";
}

TEST_F(DurabilityTest, PausedJobStaysPausedAcrossARestartAndResumesExactly) {
  const int kSteps = 30;
  StartDaemon();
  const std::string expected = WatchDigest(Submit("ref.yaml", Yaml(kSteps, false)));
  const std::string id = Submit("a.yaml", Yaml(kSteps, true));
  const std::string queued = Submit("c.yaml", Yaml(2, false));
  ASSERT_TRUE(WaitFor([&] { return Step(GetJson(id)) >= 3; }, 120s));
  ASSERT_EQ(Cli({"pause", id}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State(id) == "JOB_STATE_PAUSED"; }, 60s));
  const int64_t paused_at = Step(GetJson(id));
  ASSERT_LT(paused_at, kSteps);
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->log();

  StartDaemon();
  EXPECT_EQ(State(id), "JOB_STATE_PAUSED");
  EXPECT_EQ(Step(GetJson(id)), paused_at);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(State(id), "JOB_STATE_PAUSED");
  EXPECT_EQ(State(queued), "JOB_STATE_QUEUED") << "the paused job still holds the GPUs";
  ASSERT_EQ(Cli({"resume", id}).exit_code, 0);
  EXPECT_EQ(WatchDigest(id), expected) << "paused at step " << paused_at << ", restarted, resumed";
  EXPECT_FALSE(WatchDigest(queued).empty());
  // keep_checkpoints: 2 — older ones were pruned, in the job's own directory.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_.Join("out/ckpt/" + id))) files += entry.is_regular_file();
  EXPECT_GE(files, 1);
  EXPECT_LE(files, 2);
}

}  // namespace
}  // namespace slidedp::server::testing
