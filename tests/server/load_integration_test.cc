// Load: 50 concurrent gRPC clients (GetJob, ListJobs, WatchJob, SubmitJob + CancelJob)
// against the real daemon for 10 s while it trains a job: the daemon stays responsive
// (GetJob p99 under 50 ms, no errors) and the job keeps training. The minute-long
// version with the step-time comparison is tests/bench/daemon_load.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "nlohmann/json.hpp"
#include "tests/server/load_driver.h"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {
namespace {

using namespace std::chrono_literals;

TEST(LoadTest, FiftyClientsKeepGetJobP99Under50msWhileAJobTrains) {
  TempDir dir;
  DaemonProcess daemon(SLIDEDPD_PATH, dir.Join("state"));
  ASSERT_TRUE(daemon.started()) << daemon.log();
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {SLIDEDP_CLI_PATH, "--server=" + daemon.address()});
    return RunCommand(args, 60s);
  };
  auto step = [&](const std::string& id) {
    nlohmann::json j = nlohmann::json::parse(cli({"--output=json", "get", id}).out, nullptr, false);
    return j.is_object() ? std::stoll(j.value("step", std::string("0"))) : -1;
  };
  WriteFile(dir.Join("job.yaml"),
            "model: tiny\nseq_len: 32\nmicro_batch_size: 2\nsteps: 1000000\npolicy:\n  update_threads: 1\n");
  CommandResult submit = cli({"submit", dir.Join("job.yaml")});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_TRUE(WaitFor([&] { return step(id) >= 2; }, 120s)) << daemon.log();
  const int64_t before = step(id);

  LoadOptions options;
  options.address = daemon.address();
  options.job_id = id;
  options.clients = 50;
  options.duration = 10s;
  options.ticks_per_second = 10;
  const LoadResult r = RunLoad(options);
  std::cout << "load: " << Describe(r) << "\n";
  EXPECT_EQ(r.errors, 0) << r.first_error;
  EXPECT_GT(r.get_calls, 50 * 10 * 10 / 2) << "the clients could not keep half their pace";
  EXPECT_LT(r.get_p99_ms, 50.0) << Describe(r);
  EXPECT_GT(step(id), before) << "the job must keep training under load";
  EXPECT_EQ(cli({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace slidedp::server::testing
