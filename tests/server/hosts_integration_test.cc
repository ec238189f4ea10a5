// Issue 24 through the daemon: one job over two hosts as two slidedpd on loopback
// (--hosts_allow=127.0.0.1), the same spec submitted to each with its own hosts.rank. It runs to SUCCEEDED on both
// with the same weights digest (the job's, gathered from both shards), host 0 writes
// the export; a pause sent to one daemon pauses both at the same step, a resume sent
// to the other resumes both; a cancel sent to one ends the job on both.
#include <gtest/gtest.h>

#include "tests/free_port.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using slidedp::testing::FreePort;

class HostsDaemons : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SLIDEDP_WITH_GLOO
    GTEST_SKIP() << "a build without Gloo";
#endif
    for (int r = 0; r < 2; ++r) {
      fs::create_directories(dir_.Join("out" + std::to_string(r)));
      daemons_[r] = std::make_unique<DaemonProcess>(
          SLIDEDPD_PATH, dir_.Join("state" + std::to_string(r)),
          std::vector<std::string>{"--output_roots=" + dir_.Join("out" + std::to_string(r)),
                                   "--hosts_allow=127.0.0.1"});
      ASSERT_TRUE(daemons_[r]->started()) << daemons_[r]->log();
    }
    port_ = FreePort();
  }

  CommandResult Cli(int r, std::vector<std::string> args, std::chrono::seconds limit = 60s) {
    args.insert(args.begin(), {SLIDEDP_CLI_PATH, "--server=" + daemons_[r]->address()});
    return RunCommand(args, limit);
  }

  nlohmann::json Get(int r, const std::string& id) {
    return nlohmann::json::parse(Cli(r, {"--output=json", "get", id}).out, nullptr, false);
  }
  std::string State(int r, const std::string& id) {
    const nlohmann::json j = Get(r, id);
    return j.is_object() ? j.value("state", "") : "";
  }
  int64_t Step(int r, const std::string& id) {
    const nlohmann::json j = Get(r, id);
    return j.is_object() ? std::stoll(j.value("step", std::string("0"))) : -1;
  }

  // Submits the job to daemon r as host r of 2; returns its id there.
  std::string Submit(int r, int steps, const std::string& extra = "") {
    const std::string path = dir_.Join("job" + std::to_string(r) + ".yaml");
    WriteFile(path, "model: tiny\nseq_len: 32\nmicro_batch_size: 2\nsteps: " + std::to_string(steps) +
                        "\nseed: 5\nhosts:\n  count: 2\n  rank: " + std::to_string(r) +
                        "\n  address: 127.0.0.1\n  port: " + std::to_string(port_) + "\n  timeout_seconds: 30\n" +
                        extra);
    CommandResult s = Cli(r, {"submit", path});
    EXPECT_EQ(s.exit_code, 0) << s.err;
    return s.out.substr(0, s.out.find('\n'));
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemons_[2];
  int port_ = 0;
};

// The daemons allow 127.0.0.1 only (--hosts_allow): a spec naming another rendezvous is
// refused at submit, before the daemon connects anywhere, naming the address and flag.
TEST_F(HostsDaemons, ARendezvousTheDaemonDoesNotAllowIsRefusedAtSubmit) {
  const std::string path = dir_.Join("elsewhere.yaml");
  WriteFile(path, "model: tiny\nseq_len: 32\nsteps: 2\nhosts:\n  count: 2\n  rank: 1\n  address: 169.254.169.254\n"
                  "  port: 29500\n");
  const CommandResult s = Cli(0, {"submit", path});
  EXPECT_NE(s.exit_code, 0) << s.out;
  EXPECT_NE(s.err.find("169.254.169.254"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("--hosts_allow"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("PERMISSION_DENIED"), std::string::npos) << s.err;
}

TEST_F(HostsDaemons, TinyJobOverTwoDaemonsSucceedsOnBothWithOneDigest) {
  const std::string out = dir_.Join("out0/model");
  const std::string a = Submit(0, 8, "output_dir: " + out + "\n");
  const std::string b = Submit(1, 8, "output_dir: " + dir_.Join("out1/model") + "\n");
  ASSERT_TRUE(WaitFor([&] { return State(0, a) == "JOB_STATE_SUCCEEDED" && State(1, b) == "JOB_STATE_SUCCEEDED"; },
                      180s))
      << State(0, a) << " " << State(1, b) << "\n" << daemons_[0]->log() << daemons_[1]->log();
  const std::string digest = Get(0, a).value("weights_digest", "");
  EXPECT_EQ(digest.size(), 16u);
  EXPECT_EQ(Get(1, b).value("weights_digest", ""), digest);
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  EXPECT_FALSE(fs::exists(dir_.Join("out1/model/config.json"))) << "host 0 writes the export";
}

TEST_F(HostsDaemons, PauseOnOneResumeOnTheOtherCancelOnOne) {
  const std::string a = Submit(0, 1000000);
  const std::string b = Submit(1, 1000000);
  ASSERT_TRUE(WaitFor([&] { return Step(0, a) >= 3 && Step(1, b) >= 3; }, 120s))
      << daemons_[0]->log() << daemons_[1]->log();
  ASSERT_EQ(Cli(0, {"pause", a}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State(0, a) == "JOB_STATE_PAUSED" && State(1, b) == "JOB_STATE_PAUSED"; }, 60s))
      << State(0, a) << " " << State(1, b);
  const int64_t paused_at = Step(0, a);
  EXPECT_EQ(Step(1, b), paused_at) << "both hosts pause at the same step";
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(Step(0, a), paused_at);
  ASSERT_EQ(Cli(1, {"resume", b}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return Step(0, a) > paused_at + 2 && Step(1, b) > paused_at + 2; }, 60s))
      << State(0, a) << " " << State(1, b);
  ASSERT_EQ(Cli(1, {"cancel", b}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State(0, a) == "JOB_STATE_CANCELLED" && State(1, b) == "JOB_STATE_CANCELLED"; },
                      60s))
      << State(0, a) << " " << State(1, b) << "\n" << daemons_[0]->log();
}

}  // namespace
}  // namespace slidedp::server::testing
