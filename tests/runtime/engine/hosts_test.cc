// Issue 24 in CI, on one machine: a job over H "hosts" (each a Trainer on a thread of
// its own here, or a slidedp-train process below, over loopback with Gloo, the CPU
// device): 5 steps equal one host with the same job batch within 1e-5 (and plain
// autograd), for H = 2 and 3 and every local route pair; each host holds 1/H of the
// master, m and v (bytes checked); a checkpoint and resume over all hosts is bit-exact;
// kill -9 of one process fails the others within the timeout.
#include <gtest/gtest.h>

#include "tests/free_port.h"
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/engine/trainer.h"
#include "tests/runtime/engine/reference_training.h"
#include "tests/test_support.h"

extern char** environ;

namespace slidedp {
namespace {

using namespace slidedp::testing;  // reference_training.h

using slidedp::testing::FreePort;

// `c` as host `rank` of `hosts` meeting at 127.0.0.1:port.
TrainConfig AsHost(TrainConfig c, int hosts, int rank, int port) {
  c.hosts.count = hosts;
  c.hosts.rank = rank;
  c.hosts.address = "127.0.0.1";
  c.hosts.port = port;
  c.hosts.timeout_seconds = 60;
  return c;
}

// Runs body(rank) on `hosts` threads and waits for all.
void OnHosts(int hosts, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < hosts; ++r) threads.emplace_back([&, r] { body(r); });
  for (std::thread& t : threads) t.join();
}

bool HaveGloo() {
#ifdef SLIDEDP_WITH_GLOO
  return true;
#else
  return false;
#endif
}

class HostsExactness : public ::testing::TestWithParam<std::tuple<int, int, std::string, std::string, bool>> {};

TEST_P(HostsExactness, FiveStepsEqualOneHostAndPlainAutograd) {
  if (!HaveGloo()) GTEST_SKIP() << "a build without Gloo";
  const auto [H, W, param_route, grad_route, clip] = GetParam();
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/hosts_" + std::to_string(H) + "_" + std::to_string(W) + "_" +
                          param_route + "_" + grad_route + (clip ? "_clip" : "_noclip");
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 43);
  // Each host: W workers x 2 micro-batches of 1 sequence; the job: H * W * 2 sequences.
  TrainConfig host = BaseConfig(dir + "/init");
  if (!clip) host.optimizer.max_grad_norm = 0;
  host.workers = W;
  host.micro_batch_size = 1;
  host.grad_accum = 2;
  host.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  host.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  host.policy.grad_landing = GradLanding::kFp32;
  TrainConfig one = host;
  one.workers = 1;
  one.grad_accum = 2 * H * W;
  one.policy.param_route = ParamRoute::kReplicate;
  one.policy.grad_route = GradRoute::kGatherHost;

  const int port = FreePort();
  std::vector<std::vector<double>> losses(H);
  std::vector<std::vector<int64_t>> sent(H);
  std::vector<int64_t> state_bytes(H);
  OnHosts(H, [&](int r) {
    auto t = Trainer::Create(AsHost(host, H, r, port));
    ASSERT_TRUE(t.ok()) << t.status();
    for (int s = 0; s < 5; ++s) {
      absl::StatusOr<StepStats> st = (*t)->Step();
      ASSERT_TRUE(st.ok()) << st.status();
      losses[r].push_back(st->loss);
      sent[r].push_back(st->host_bytes_sent);
    }
    state_bytes[r] = (*t)->host_state_bytes();
    // The network between the hosts was measured at the start and noted in the plan.
    const PlanReport plan = (*t)->Plan();
    EXPECT_GT(plan.rates.cross_host_gbps, 0.0);
    bool noted = false;
    for (const std::string& n : plan.calibration_notes) noted = noted || n.find("between the hosts") != std::string::npos;
    EXPECT_TRUE(noted);
    ASSERT_TRUE((*t)->ExportHf(dir + "/hosts").ok());
  });
  std::vector<StepStats> one_stats;
  const Weights w1 = RunEngine(one, c, dir + "/one", {}, &one_stats);
  const Weights wh = ReadModelDir(c, dir + "/hosts");
  ExpectClose(wh, w1, 1e-5);
  ExpectClose(wh, ReferenceTrain(c, init, one), 1e-5);
  EXPECT_GT((wh.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  // Every host reports the job's loss, that of one host.
  for (int r = 0; r < H; ++r) {
    ASSERT_EQ(losses[r].size(), 5u);
    for (int s = 0; s < 5; ++s) EXPECT_NEAR(losses[r][s], one_stats[s].loss, 1e-5 * one_stats[s].loss) << r << " " << s;
  }
  // Each host holds its shard of the master, m and v (4 + 8 bytes, fp32), and the whole
  // streamed copy and fp32 gradient (4 + 4 on the CPU device).
  int64_t total = 0, shards = 0;
  for (const UnitLayout& u : BuildLayout(c).units) total += u.numel;
  for (int r = 0; r < H; ++r) {
    int64_t mine = 0;
    for (const UnitLayout& u : BuildLayout(c).units) {
      const int64_t slice = (u.numel + H - 1) / H;
      mine += std::max<int64_t>(0, std::min(u.numel, (r + 1) * slice) - std::min(u.numel, r * slice));
    }
    shards += mine;
    EXPECT_EQ(state_bytes[r], 12 * mine + 8 * total) << "host " << r;
  }
  EXPECT_EQ(shards, total);
  // What each host sends a step (the steps after the first, which has no previous
  // updates to gather): every other host's slice of every unit's fp32 gradient to that
  // host, its own slice of every updated copy (fp32 on the CPU device) to the H - 1
  // others, each unit's squared norm and the step's loss (8 bytes each).
  for (int r = 0; r < H; ++r) {
    int64_t want = 8;
    for (const UnitLayout& u : BuildLayout(c).units) {
      const int64_t slice = (u.numel + H - 1) / H;
      const int64_t mine = std::max<int64_t>(0, std::min(u.numel, (r + 1) * slice) - std::min(u.numel, r * slice));
      want += 4 * (u.numel - mine) + 4 * mine * (H - 1) + 8;
    }
    for (int s = 1; s < 5; ++s) EXPECT_EQ(sent[r][s], want) << "host " << r << " step " << s + 1;
    EXPECT_LT(sent[r][0], want) << "the first step gathers no previous update";
  }
}

INSTANTIATE_TEST_SUITE_P(
    HostsAndRoutes, HostsExactness,
    ::testing::Values(std::make_tuple(2, 1, "replicate", "gather_host", true),
                      std::make_tuple(3, 1, "replicate", "gather_host", false),
                      std::make_tuple(2, 2, "replicate", "gather_host", true),
                      std::make_tuple(2, 2, "replicate", "reduce_scatter", false),
                      std::make_tuple(2, 2, "replicate", "reduce_one", true),
                      std::make_tuple(2, 2, "scatter_allgather", "gather_host", false),
                      std::make_tuple(3, 2, "scatter_allgather", "reduce_scatter", true),
                      std::make_tuple(2, 2, "scatter_allgather", "reduce_one", true)),
    [](const auto& info) {
      return "H" + std::to_string(std::get<0>(info.param)) + "_W" + std::to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param) + "_" + std::get<3>(info.param) + (std::get<4>(info.param) ? "_clip" : "_noclip");
    });

// A checkpoint over two hosts (each its shard, in its own folder) and a resume of both
// continue bit for bit: the same losses and the same digest as the run without a stop.
TEST(Hosts, CheckpointAndResumeOverTwoHostsAreBitExact) {
  if (!HaveGloo()) GTEST_SKIP() << "a build without Gloo";
  TrainConfig c = TinyTrainConfig(6);
  c.workers = 1;
  c.optimizer.weight_decay = 0.01;
  const std::string dir = ::testing::TempDir() + "/hosts_resume";
  std::filesystem::remove_all(dir);
  std::vector<std::string> digest(2), resumed(2);
  std::vector<std::vector<double>> all(2), rest(2);
  int port = FreePort();
  OnHosts(2, [&](int r) {
    auto t = Trainer::Create(AsHost(c, 2, r, port));
    ASSERT_TRUE(t.ok()) << t.status();
    for (int s = 0; s < 6; ++s) all[r].push_back((*t)->Step()->loss);
    digest[r] = (*t)->WeightsDigest();
  });
  TrainConfig first = c;
  first.checkpoint_dir = dir;
  first.checkpoint_interval = 3;
  port = FreePort();
  OnHosts(2, [&](int r) {
    auto t = Trainer::Create(AsHost(first, 2, r, port));
    ASSERT_TRUE(t.ok()) << t.status();
    for (int s = 0; s < 4; ++s) ASSERT_TRUE((*t)->Step().ok());  // step 4 is lost
  });
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/host-0-of-2"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/host-1-of-2"));
  // Host 0's manifest names the shards of the last checkpoint, each of which exists.
  std::ifstream mf(dir + "/manifest.json");
  ASSERT_TRUE(mf.good());
  const nlohmann::json manifest = nlohmann::json::parse(mf, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  EXPECT_EQ(manifest.value("step", -1), 3);
  EXPECT_EQ(manifest.value("hosts", -1), 2);
  ASSERT_EQ(manifest["shards"].size(), 2u);
  for (const auto& shard : manifest["shards"]) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + shard.get<std::string>())) << shard;
  }
  TrainConfig second = first;
  second.resume_from = dir;
  port = FreePort();
  OnHosts(2, [&](int r) {
    auto t = Trainer::Create(AsHost(second, 2, r, port));
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ((*t)->completed_steps(), 3);
    for (int s = 0; s < 3; ++s) rest[r].push_back((*t)->Step()->loss);
    resumed[r] = (*t)->WeightsDigest();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(digest[r], digest[0]);
    EXPECT_EQ(resumed[r], digest[0]) << "host " << r;
    ASSERT_EQ(rest[r].size(), 3u);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(rest[r][s], all[r][3 + s]) << "host " << r << " step " << 4 + s;
  }
}

// A host that resumes from a step the other host has no checkpoint of: both refuse.
TEST(Hosts, ResumeRefusesHostsAtDifferentSteps) {
  if (!HaveGloo()) GTEST_SKIP() << "a build without Gloo";
  TrainConfig c = TinyTrainConfig(6);
  c.workers = 1;
  const std::string dir = ::testing::TempDir() + "/hosts_resume_mismatch";
  std::filesystem::remove_all(dir);
  c.checkpoint_dir = dir;
  c.checkpoint_interval = 2;
  int port = FreePort();
  OnHosts(2, [&](int r) {
    auto t = Trainer::Create(AsHost(c, 2, r, port));
    ASSERT_TRUE(t.ok()) << t.status();
    for (int s = 0; s < 4; ++s) ASSERT_TRUE((*t)->Step().ok());
  });
  // Host 1 loses its newest checkpoint (step 4).
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/host-1-of-2")) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 2u);
  std::filesystem::remove(files.back());
  c.resume_from = dir;
  port = FreePort();
  OnHosts(2, [&](int r) {
    auto t = Trainer::Create(AsHost(c, 2, r, port));
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(t.status())) << t.status();
  });
}

// kill -9 of one slidedp-train process: the other fails within its timeout (hosts.
// timeout_seconds 5), naming the exchange with the hosts, and never hangs.
TEST(Hosts, KillingOneProcessFailsTheOtherWithinTheTimeout) {
  if (!HaveGloo()) GTEST_SKIP() << "a build without Gloo";
  const std::string dir = ::testing::TempDir() + "/hosts_kill";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/job.yaml");
    f << "model: tiny\ndata:\n  format: synthetic\nseq_len: 32\nmicro_batch_size: 2\nsteps: 1000000\n"
         "hosts:\n  timeout_seconds: 5\n";
  }
  const std::string port = std::to_string(FreePort());
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    const std::string log = dir + "/host" + std::to_string(r) + ".log";
    std::vector<std::string> args = {SLIDEDP_TRAIN_PATH, "--nnodes=2", "--node_rank=" + std::to_string(r),
                                     "--master_addr=127.0.0.1", "--master_port=" + port, dir + "/job.yaml"};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pids[r], argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  // Both train (host 0 logs step 3), then host 1 dies.
  auto log0 = [&] {
    std::ifstream f(dir + "/host0.log");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const auto start = std::chrono::steady_clock::now();
  while (log0().find("step 3/") == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(log0().find("step 3/"), std::string::npos) << log0();
  kill(pids[1], SIGKILL);
  waitpid(pids[1], nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pids[0], &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) {
    kill(pids[0], SIGKILL);
    waitpid(pids[0], nullptr, 0);
    FAIL() << "host 0 still runs 60 s after host 1 was killed:\n" << log0();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log0();
  EXPECT_LT(waited, 30.0);
  EXPECT_NE(log0().find("hosts: "), std::string::npos) << log0();
}

}  // namespace
}  // namespace slidedp
