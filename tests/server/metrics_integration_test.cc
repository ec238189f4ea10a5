// The metrics endpoint of a real slidedpd running a real job: scraped over HTTP, checked
// by `promtool check metrics`, and scraped by a real Prometheus server that must answer a
// query for the job's tokens/s. promtool and prometheus come from Debian's prometheus
// package; the tests that need them skip when it is absent.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include "nlohmann/json.hpp"
#include "server/listen_address.h"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

namespace slidedp::server::testing {
namespace {

using namespace std::chrono_literals;

std::string Scrape(const std::string& address, const std::string& path = "/metrics") {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return "";
  httplib::Client client(hp->host, hp->port);
  client.set_read_timeout(10, 0);
  client.set_url_encode(false);  // paths here are already encoded
  auto response = client.Get(path.c_str());
  return response && response->status == 200 ? response->body : "";
}

class MetricsIntegrationTest : public ::testing::Test {
 protected:
  void StartAndRun(int steps) {
    daemon_ = std::make_unique<DaemonProcess>(SLIDEDPD_PATH, dir_.Join("state"));
    ASSERT_TRUE(daemon_->started()) << daemon_->log();
    WriteFile(dir_.Join("job.yaml"), "model: tiny\nseq_len: 64\nmicro_batch_size: 4\nsteps: " +
                                         std::to_string(steps) + "\n");
    CommandResult submit = Cli({"submit", dir_.Join("job.yaml")});
    ASSERT_EQ(submit.exit_code, 0) << submit.err;
    id_ = submit.out.substr(0, submit.out.find('\n'));
  }
  CommandResult Cli(std::vector<std::string> args, std::chrono::seconds limit = 180s) {
    args.insert(args.begin(), {SLIDEDP_CLI_PATH, "--server=" + daemon_->address()});
    return RunCommand(args, limit);
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string id_;
};

TEST_F(MetricsIntegrationTest, ScrapeHasTheExpectedMetricsAndPassesPromtool) {
  StartAndRun(10);
  ASSERT_EQ(Cli({"watch", id_}).exit_code, 0);
  const std::string text = Scrape(daemon_->metrics_address());
  ASSERT_FALSE(text.empty()) << "no answer from http://" << daemon_->metrics_address() << "/metrics";
  for (const char* name :
       {"# TYPE slidedp_step_duration_seconds histogram", "slidedp_step_duration_seconds_count 10",
        "slidedp_tokens_per_second", "slidedp_mfu_ratio", "slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"}",
        "slidedp_pcie_bandwidth_bytes_per_second", "slidedp_cpu_update_busy_seconds_total",
        "slidedp_stall_seconds_total{cause=\"update_wait\"}", "slidedp_loss", "slidedp_learning_rate",
        "slidedp_steps_total 10", "slidedp_tokens_total 2560", "slidedp_jobs{state=\"SUCCEEDED\"} 1",
        "slidedp_process_cpu_seconds_total", "slidedp_process_cpu_utilization_ratio",
        "slidedp_process_resident_memory_bytes", "slidedp_build_info"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  if (std::string(SLIDEDP_PROMTOOL).empty()) GTEST_SKIP() << "promtool not installed (Debian: prometheus)";
  WriteFile(dir_.Join("scrape.txt"), text);
  CommandResult check = RunCommand(
      {"/bin/sh", "-c", std::string(SLIDEDP_PROMTOOL) + " check metrics < " + dir_.Join("scrape.txt")}, 60s);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST_F(MetricsIntegrationTest, PrometheusScrapesTheDaemonAndAnswersForTokensPerSecond) {
  if (std::string(SLIDEDP_PROMETHEUS).empty()) GTEST_SKIP() << "prometheus not installed";
  daemon_ = std::make_unique<DaemonProcess>(SLIDEDPD_PATH, dir_.Join("state"));
  ASSERT_TRUE(daemon_->started()) << daemon_->log();
  WriteFile(dir_.Join("prometheus.yml"),
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: slidedpd\n    static_configs:\n      - targets: ['" +
                daemon_->metrics_address() + "']\n");
  // Prometheus cannot report an ephemeral port: try random high ports.
  std::mt19937 rng(std::random_device{}());
  std::unique_ptr<ChildProcess> prometheus;
  std::string web;
  for (int attempt = 0; attempt < 5 && web.empty(); ++attempt) {
    const std::string candidate = "127.0.0.1:" + std::to_string(20000 + rng() % 40000);
    prometheus = std::make_unique<ChildProcess>(
        std::vector<std::string>{SLIDEDP_PROMETHEUS, "--config.file=" + dir_.Join("prometheus.yml"),
                                 "--storage.tsdb.path=" + dir_.Join("tsdb-" + std::to_string(attempt)),
                                 "--web.listen-address=" + candidate},
        dir_.Join("prometheus.log"));
    if (WaitFor([&] { return !Scrape(candidate, "/-/ready").empty() || !prometheus->running(); }, 60s) &&
        prometheus->running()) {
      web = candidate;
    }
  }
  ASSERT_FALSE(web.empty()) << ReadFileOrEmpty(dir_.Join("prometheus.log"));
  // Prometheus applies discovered targets every 5 s: wait until it has scraped the
  // daemon, so that the job below runs while it is watched.
  auto query = [&](const std::string& expression, double* value) {
    const std::string body = Scrape(web, "/api/v1/query?query=" + expression);
    nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
    if (json.is_discarded() || json.value("status", "") != "success") return false;
    bool any = false;
    for (const auto& series : json["data"]["result"]) {
      *value = std::max(any ? *value : 0.0, std::stod(series["value"][1].get<std::string>()));
      any = true;
    }
    return any;
  };
  double up = 0;
  ASSERT_TRUE(WaitFor([&] { return query("up", &up) && up == 1; }, 60s))
      << "Prometheus never scraped " << daemon_->metrics_address() << "\n"
      << ReadFileOrEmpty(dir_.Join("prometheus.log"));
  WriteFile(dir_.Join("job.yaml"), "model: tiny\nseq_len: 64\nmicro_batch_size: 4\nsteps: 40\n");
  CommandResult submit = Cli({"submit", dir_.Join("job.yaml")});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  ASSERT_EQ(Cli({"watch", submit.out.substr(0, submit.out.find('\n'))}).exit_code, 0);
  double best = 0;
  const bool answered = WaitFor([&] {
    return query("max_over_time(slidedp_tokens_per_second%5B10m%5D)", &best) && best > 0;
  }, 60s);
  EXPECT_TRUE(answered) << "Prometheus has no positive slidedp_tokens_per_second\n"
                        << ReadFileOrEmpty(dir_.Join("prometheus.log"));
  EXPECT_GT(best, 0);
}

}  // namespace
}  // namespace slidedp::server::testing
