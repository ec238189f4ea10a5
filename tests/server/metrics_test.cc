// Metrics: names, values after a step, the HTTP endpoint on cpp-httplib.
#include "server/metrics.h"

#include <gtest/gtest.h>

#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/metrics_http.h"

namespace slidedp::server {
namespace {

StepStats SomeStep() {
  StepStats s;
  s.step = 1;
  s.loss = 3.5;
  s.lr = 2e-4;
  s.tokens = 1000;
  s.step_seconds = 0.5;
  s.tokens_per_second = 2000;
  s.h2d_bytes = 4000;
  s.d2h_bytes = 2000;
  s.update_busy_seconds = 0.25;
  s.update_wait_seconds = 0.125;
  return s;
}

TEST(MetricsTest, ExposesEveryMetricWithItsValue) {
  Metrics metrics("1.2.3");
  metrics.RecordStep(SomeStep(), StepContext{2, 1000000, 1e9});
  JobStateCounts counts{};
  counts[2] = 1;  // JOB_STATE_RUNNING
  metrics.SetJobCounts(counts);
  const std::string text = metrics.Scrape();
  for (const char* name :
       {"slidedp_step_duration_seconds_bucket", "slidedp_tokens_per_second 2000",
        "slidedp_mfu_ratio 6", "slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"1\"} 2000",
        "slidedp_pcie_bytes_total{direction=\"d2h\",gpu=\"0\"} 1000",
        "slidedp_pcie_bandwidth_bytes_per_second{direction=\"h2d\",gpu=\"0\"} 4000",
        "slidedp_cpu_update_busy_seconds_total 0.25",
        "slidedp_stall_seconds_total{cause=\"update_wait\"} 0.125", "slidedp_loss 3.5",
        "slidedp_learning_rate 0.0002", "slidedp_steps_total 1", "slidedp_tokens_total 1000",
        "slidedp_jobs{state=\"RUNNING\"} 1", "slidedp_process_cpu_seconds_total",
        "slidedp_process_resident_memory_bytes", "slidedp_build_info{version=\"1.2.3\"} 1",
        "# TYPE slidedp_step_duration_seconds histogram"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  metrics.ClearRates();
  EXPECT_NE(metrics.Scrape().find("slidedp_tokens_per_second 0"), std::string::npos);
}

TEST(MetricsHttpTest, ServesMetricsOnAnEphemeralPort) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("slidedp_x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "slidedp_x 1\n");
  EXPECT_NE(response->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  // The same port cannot be bound twice: a clear error.
  auto second = MetricsHttpServer::Start(absl::StrCat("127.0.0.1:", (*server)->port()),
                                         [] { return std::string(); });
  EXPECT_FALSE(second.ok());
  (*server)->Stop();
  (*server)->Stop();  // idempotent
}

TEST(MetricsHttpTest, BadAddressesAreErrors) {
  EXPECT_FALSE(MetricsHttpServer::Start("nonsense", [] { return std::string(); }).ok());
  EXPECT_FALSE(MetricsHttpServer::Start("127.0.0.1:99999", [] { return std::string(); }).ok());
}

TEST(MetricsHttpTest, StopRightAfterStartDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
    ASSERT_TRUE(server.ok());
  }
}

}  // namespace
}  // namespace slidedp::server
