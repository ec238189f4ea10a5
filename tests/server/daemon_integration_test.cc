// Integration on loopback with the real engine: slidedpd as a subprocess, driven by
// the slidedp CLI exactly as scripts use it. Submit + watch the tiny example; pause and
// resume mid-run and get the same weights as an uninterrupted run; cancel; restart
// and find the jobs; bad input (the daemon stays up and says why); unix sockets;
// tokens; --help. (Metrics and Prometheus: metrics_integration_test.cc.)
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::chrono::seconds kWatchLimit{180};

class DaemonIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.Join("data"));
    fs::create_directories(dir_.Join("out"));
    fs::create_directories(dir_.Join("secret"));
    WriteFile(dir_.Join("secret/tokens.bin"), std::string(4096, '\1'));
    fs::create_symlink(dir_.Join("secret"), dir_.Join("data/link"));
  }

  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--data_roots=" + dir_.Join("data"),
                                      "--output_roots=" + dir_.Join("out")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<DaemonProcess>(SLIDEDPD_PATH, dir_.Join("state"), flags);
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

  static int64_t Step(const nlohmann::json& job) {
    return job.is_object() ? std::stoll(job.value("step", std::string("0"))) : -1;
  }

  std::string SubmitYaml(const std::string& name, const std::string& yaml) {
    const std::string path = dir_.Join(name);
    WriteFile(path, yaml);
    CommandResult r = Cli({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  static std::string TinyYaml(int steps, const std::string& extra = "") {
    return "model: tiny\nseq_len: 64\nmicro_batch_size: 4\nsteps: " + std::to_string(steps) +
           "\noptimizer:\n  lr: 1.0e-3\n  warmup_steps: 2\nseed: 7\n" + extra;
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(DaemonIntegrationTest, TinyExampleSubmitPrintsTheIdAloneAndWatchEndsAtSucceeded) {
  StartDaemon();
  CommandResult submit = Cli({"submit", std::string(SLIDEDP_SOURCE_DIR) + "/client/examples/tiny.yaml"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  ASSERT_TRUE(std::regex_match(submit.out, std::regex("job-[0-9a-f]{12}\n"))) << "[" << submit.out << "]";
  const std::string id = submit.out.substr(0, submit.out.size() - 1);
  const auto start = std::chrono::steady_clock::now();
  CommandResult watch = Cli({"watch", id}, kWatchLimit);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err << daemon_->log();
  EXPECT_NE(watch.out.find("SUCCEEDED"), std::string::npos) << watch.out;
  EXPECT_NE(watch.out.find("tok/s"), std::string::npos) << watch.out;
  EXPECT_LT(seconds, 60.0) << "the tiny example must finish within a minute on 2 cores";
  const nlohmann::json job = GetJson(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Step(job), 60);
  EXPECT_TRUE(std::regex_match(job.value("weights_digest", ""), std::regex("[0-9a-f]{16}")));
  CommandResult list = Cli({"list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find(id), std::string::npos);
}

TEST_F(DaemonIntegrationTest, PauseAndResumeGiveTheSameWeightsAsAnUninterruptedRun) {
  StartDaemon();
  const int kSteps = 24;
  const std::string reference = SubmitYaml("a.yaml", TinyYaml(kSteps));
  ASSERT_EQ(Cli({"watch", reference}, kWatchLimit).exit_code, 0);
  const std::string expected = GetJson(reference).value("weights_digest", "");
  ASSERT_FALSE(expected.empty());

  const std::string out_dir = dir_.Join("out/paused-run");
  const std::string id = SubmitYaml("b.yaml", TinyYaml(kSteps, "output_dir: " + out_dir + "\n"));
  ASSERT_TRUE(WaitFor([&] { return Step(GetJson(id)) >= 4; }, 120s));
  CommandResult pause = Cli({"pause", id});
  ASSERT_EQ(pause.exit_code, 0) << pause.err;
  ASSERT_TRUE(WaitFor([&] { return GetJson(id).value("state", "") == "JOB_STATE_PAUSED"; }, 60s));
  const int64_t paused_at = Step(GetJson(id));
  EXPECT_LT(paused_at, kSteps) << "pause must land mid-run for this test to mean anything";
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(Step(GetJson(id)), paused_at) << "a paused job must not advance";
  CommandResult resume = Cli({"resume", id});
  ASSERT_EQ(resume.exit_code, 0) << resume.err;
  EXPECT_NE(resume.out.find("RUNNING"), std::string::npos) << resume.out;
  ASSERT_EQ(Cli({"watch", id}, kWatchLimit).exit_code, 0) << daemon_->log();
  EXPECT_EQ(GetJson(id).value("weights_digest", ""), expected)
      << "paused at step " << paused_at << "; resume must continue exactly";
  EXPECT_TRUE(fs::exists(out_dir + "/config.json")) << "output_dir gets the Hugging Face export";
}

TEST_F(DaemonIntegrationTest, CancelStopsARunningJob) {
  StartDaemon();
  const std::string id = SubmitYaml("long.yaml", TinyYaml(100000));
  ASSERT_TRUE(WaitFor([&] { return Step(GetJson(id)) >= 1; }, 120s));
  CommandResult cancel = Cli({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  CommandResult watch = Cli({"watch", id}, kWatchLimit);
  EXPECT_EQ(watch.exit_code, 4) << watch.out << watch.err;
  EXPECT_EQ(GetJson(id).value("state", ""), "JOB_STATE_CANCELLED");
  CommandResult again = Cli({"cancel", id});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("FAILED_PRECONDITION"), std::string::npos) << again.err;
}

// Issue 18, case 4: a FIFO as the data file hung the job thread in open() for good (the
// job RUNNING at step 0, cancel ignored, the queue stuck). Now the job fails at once,
// saying why, and the next job runs.
TEST_F(DaemonIntegrationTest, AFifoAsTheDataFileFailsTheJobAndTheQueueMovesOn) {
  ASSERT_EQ(::mkfifo(dir_.Join("data/fifo.bin").c_str(), 0644), 0);
  StartDaemon();
  const std::string fifo_job =
      SubmitYaml("fifo.yaml", TinyYaml(4, "data:\n  format: tokens\n  path: " + dir_.Join("data/fifo.bin") + "\n"));
  CommandResult watch = Cli({"watch", fifo_job}, kWatchLimit);
  EXPECT_EQ(watch.exit_code, 3) << watch.out << watch.err;
  const nlohmann::json job = GetJson(fifo_job);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_FAILED") << job.dump();
  EXPECT_NE(job.value("error", "").find("FIFO"), std::string::npos) << job.dump();
  const std::string next = SubmitYaml("next.yaml", TinyYaml(2));
  CommandResult next_watch = Cli({"watch", next}, kWatchLimit);
  EXPECT_EQ(next_watch.exit_code, 0) << next_watch.out << next_watch.err;
}

TEST_F(DaemonIntegrationTest, RestartedDaemonFindsEveryJobAsItWas) {
  StartDaemon();
  const std::string done = SubmitYaml("a.yaml", TinyYaml(4));
  ASSERT_EQ(Cli({"watch", done}, kWatchLimit).exit_code, 0);
  const std::string digest = GetJson(done).value("weights_digest", "");
  const std::string interrupted = SubmitYaml("b.yaml", TinyYaml(100000));
  ASSERT_TRUE(WaitFor([&] { return Step(GetJson(interrupted)) >= 1; }, 120s));
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->log();

  StartDaemon();
  CommandResult list = Cli({"--output=json", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  nlohmann::json jobs = nlohmann::json::parse(list.out)["jobs"];
  ASSERT_EQ(jobs.size(), 2u) << list.out;
  EXPECT_EQ(jobs[0]["id"], done);
  EXPECT_EQ(jobs[0]["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(jobs[0]["weights_digest"], digest);
  EXPECT_EQ(jobs[1]["id"], interrupted);
  EXPECT_EQ(jobs[1]["state"], "JOB_STATE_FAILED");
  EXPECT_NE(jobs[1]["error"].get<std::string>().find("interrupted by daemon shutdown"), std::string::npos);
  CommandResult watch = Cli({"watch", interrupted});
  EXPECT_EQ(watch.exit_code, 3) << "watch exits non-zero for a FAILED job";
}

TEST_F(DaemonIntegrationTest, BadInputIsRefusedWithTheReasonAndTheDaemonStaysUp) {
  StartDaemon();
  struct Case {
    std::string yaml;
    std::string expect;  // in the CLI's stderr
  } cases[] = {
      {"model: tiny\nstepz: 3\n", "stepz"},
      {"optimizer:\n  lrr: 1\n", "optimizer.lrr"},
      {"micro_batch_size: -4\n", "micro_batch_size"},
      {"seq_len: -1\n", "seq_len"},
      {"steps: many\n", "steps"},
      {"data:\n  format: tokens\n  path: " + dir_.Join("data/../secret/tokens.bin") + "\n", "PERMISSION_DENIED"},
      {"data:\n  format: tokens\n  path: " + dir_.Join("data/link/tokens.bin") + "\n", "PERMISSION_DENIED"},
      {"data:\n  format: tokens\n  path: " + dir_.Join("data/none.bin") + "\n", "does not exist"},
      {"data:\n  format: tokens\n  path: relative/tokens.bin\n", "not an absolute path"},
      {"output_dir: " + dir_.Join("secret/x") + "\n", "PERMISSION_DENIED"},
      {"model: " + dir_.Join("data") + "\n", "--model_roots"},
      {"model: /" + std::string(200000, 'm') + "\n", "INVALID_ARGUMENT"},
      {"model: [unclosed\n", "bad.yaml"},
  };
  for (const Case& c : cases) {
    WriteFile(dir_.Join("bad.yaml"), c.yaml);
    CommandResult r = Cli({"submit", dir_.Join("bad.yaml")});
    EXPECT_EQ(r.exit_code, 1) << c.yaml.substr(0, 80);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.yaml.substr(0, 80) << " -> " << r.err.substr(0, 300);
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  CommandResult missing = Cli({"submit", dir_.Join("nonexistent.yaml")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos);
  CommandResult unknown = Cli({"get", "job-000000000000"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
  EXPECT_EQ(Cli({"watch", "job-000000000000"}).exit_code, 1);
  EXPECT_EQ(Cli({"get", std::string(300, 'x')}).exit_code, 1);
  EXPECT_EQ(Cli({"frobnicate", "x"}).exit_code, 2);
  EXPECT_EQ(Cli({"get"}).exit_code, 2);
  EXPECT_TRUE(daemon_->running()) << daemon_->log();
  CommandResult node = Cli({"node"});
  EXPECT_EQ(node.exit_code, 0) << node.err;
  EXPECT_NE(node.out.find("cpu cores"), std::string::npos);
}

TEST_F(DaemonIntegrationTest, ListensOnAUnixSocket) {
  const std::string socket = "unix:" + dir_.Join("slidedpd.sock");
  daemon_ = std::make_unique<DaemonProcess>(SLIDEDPD_PATH, dir_.Join("state"),
                                            std::vector<std::string>{}, socket);
  ASSERT_TRUE(daemon_->started()) << daemon_->log();
  EXPECT_EQ(daemon_->address(), socket);
  CommandResult node = Cli({"--output=json", "node"});
  ASSERT_EQ(node.exit_code, 0) << node.err;
  EXPECT_NE(node.out.find("daemon_version"), std::string::npos);
}

TEST_F(DaemonIntegrationTest, RequiresTheBearerTokenWhenConfigured) {
  WriteFile(dir_.Join("token"), "t0ken\n");
  StartDaemon({"--token_file=" + dir_.Join("token")});
  CommandResult without = Cli({"list"});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_NE(without.err.find("UNAUTHENTICATED"), std::string::npos) << without.err;
  CommandResult with = Cli({"--token_file=" + dir_.Join("token"), "list"});
  EXPECT_EQ(with.exit_code, 0) << with.err;
}

TEST_F(DaemonIntegrationTest, ServesTlsWithTheGivenCertificate) {
  if (std::string(SLIDEDP_OPENSSL).empty()) GTEST_SKIP() << "no openssl command to make a certificate";
  CommandResult cert = RunCommand(
      {SLIDEDP_OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
       "-keyout", dir_.Join("key.pem"), "-out", dir_.Join("cert.pem")}, 60s);
  ASSERT_EQ(cert.exit_code, 0) << cert.err;
  StartDaemon({"--tls_cert=" + dir_.Join("cert.pem"), "--tls_key=" + dir_.Join("key.pem")});
  CommandResult tls = Cli({"--tls_ca=" + dir_.Join("cert.pem"), "node"});
  EXPECT_EQ(tls.exit_code, 0) << tls.err;
  CommandResult plain = Cli({"--timeout=5", "node"});
  EXPECT_EQ(plain.exit_code, 1) << "a plaintext client must not get through";
}

TEST(DaemonFlagsTest, RefusesToListenOffLoopbackWithoutTls) {
  TempDir dir;
  CommandResult r = RunCommand({SLIDEDPD_PATH, "--listen=0.0.0.0:0", "--metrics_listen=",
                                "--state_dir=" + dir.Join("state")}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--allow_insecure_remote"), std::string::npos) << r.err;
  CommandResult no_state = RunCommand({SLIDEDPD_PATH, "--listen=127.0.0.1:0"}, 30s);
  EXPECT_EQ(no_state.exit_code, 1);
  EXPECT_NE(no_state.err.find("--state_dir"), std::string::npos) << no_state.err;
}

// The daemon's own files named by the operator: a FIFO is refused at start, not waited on.
TEST(DaemonFlagsTest, AFifoAsTheTokenFileIsAnErrorNotAHang) {
  const std::string dir = ::testing::TempDir() + "/slidedp_token_fifo_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/state");
  const std::string fifo = dir + "/token";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult r = RunCommand({SLIDEDPD_PATH, "--state_dir=" + dir + "/state", "--listen=127.0.0.1:0",
                                "--metrics_listen=", "--token_file=" + fifo}, 30s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the daemon waited on the FIFO";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("not a regular file"), std::string::npos) << r.out << r.err;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(DaemonFlagsTest, HelpNamesEveryFlagAndCommand) {
  CommandResult help = RunCommand({SLIDEDPD_PATH, "--help"}, 30s);
  const std::string text = help.out + help.err;
  for (const char* flag : {"--listen", "--metrics_listen", "--state_dir", "--model_roots", "--data_roots",
                           "--output_roots", "--tls_cert", "--tls_key", "--token_file",
                           "--allow_insecure_remote", "--ready_file"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
  }
  CommandResult cli = RunCommand({SLIDEDP_CLI_PATH, "--help"}, 30s);
  const std::string cli_text = cli.out + cli.err;
  for (const char* word : {"submit", "list", "get", "watch", "pause", "resume", "cancel", "node", "--server",
                           "--output"}) {
    EXPECT_NE(cli_text.find(word), std::string::npos) << word;
  }
}

}  // namespace
}  // namespace slidedp::server::testing
