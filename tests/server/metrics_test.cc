// Metrics: names, values after a step, per-GPU series, host figures, the HTTP endpoint
// (scraped with cpp-httplib's client), also while other clients hold connections.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/metrics_http.h"
#include "server/proc_stats.h"
#include "tests/server/test_util.h"

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

// A job over several hosts: each daemon says which host it is, and the job's tokens/s
// (every host's) count against every host's workers in the MFU.
TEST(MetricsTest, AHostOfSeveralSaysItsRankAndTheMfuCountsEveryHost) {
  Metrics metrics("1");
  metrics.RecordStep(SomeStep(), StepContext{2, 1000000, 1e9, /*hosts=*/3, /*host_rank=*/1});
  const std::string text = metrics.Scrape();
  for (const char* line : {"slidedp_hosts 3", "slidedp_host_rank 1", "slidedp_mfu_ratio 2"}) {
    EXPECT_NE(text.find(std::string("\n") + line + "\n"), std::string::npos) << line << "\n" << text;
  }
}

// Issue 21: the running job's resident units and their GPU bytes, cleared with the rates.
TEST(MetricsTest, ResidentUnitsAndBytesUntilTheJobStops) {
  Metrics metrics("1");
  metrics.SetResidency(7, 123456789);
  std::string text = metrics.Scrape();
  EXPECT_NE(text.find("\nslidedp_resident_units 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nslidedp_resident_bytes 123456789\n"), std::string::npos) << text;
  metrics.ClearRates();
  text = metrics.Scrape();
  EXPECT_NE(text.find("\nslidedp_resident_units 0\n"), std::string::npos) << text;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(MetricsTest, PerGpuSeriesComeFromTheWorkersFigures) {
  Metrics metrics("1");
  StepStats s = SomeStep();  // totals 4000 / 2000 over 0.5 s
  WorkerDeviceStats w0, w1;
  w0.h2d_bytes = 3000, w0.d2h_bytes = 500, w0.h2d_busy_seconds = 0.25, w0.d2h_busy_seconds = 0.125;
  w0.memory_allocated_bytes = 7, w0.memory_peak_bytes = 9, w0.memory_reserved_peak_bytes = 11,
      w0.memory_total_bytes = 100;
  w1.h2d_bytes = 1000, w1.d2h_bytes = 1500, w1.memory_total_bytes = 100;
  s.workers = {w0, w1};
  s.predicted_step_seconds = 0.375;
  s.bottleneck = "cpu_update";
  const StepContext context{2, 1000, 0};
  metrics.SetCalibration({{50e9, 40e9}});  // GPU 1 not calibrated
  metrics.RecordStep(s, context);
  const std::string text = metrics.Scrape();
  for (const char* line :
       {"slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"} 3000",
        "slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"1\"} 1000",
        "slidedp_pcie_bytes_total{direction=\"d2h\",gpu=\"1\"} 1500",
        "slidedp_pcie_bandwidth_bytes_per_second{direction=\"h2d\",gpu=\"0\"} 6000",
        "slidedp_pcie_bandwidth_bytes_per_second{direction=\"d2h\",gpu=\"1\"} 3000",
        "slidedp_pcie_busy_seconds_total{direction=\"h2d\",gpu=\"0\"} 0.25",
        "slidedp_pcie_busy_seconds_total{direction=\"d2h\",gpu=\"0\"} 0.125",
        "slidedp_pcie_busy_seconds_total{direction=\"h2d\",gpu=\"1\"} 0",
        "slidedp_calibrated_pcie_bytes_per_second{direction=\"h2d\",gpu=\"0\"} 50000000000",
        "slidedp_calibrated_pcie_bytes_per_second{direction=\"d2h\",gpu=\"0\"} 40000000000",
        "slidedp_calibrated_pcie_bytes_per_second{direction=\"h2d\",gpu=\"1\"} 0",
        "slidedp_gpu_memory_allocated_bytes{gpu=\"0\"} 7", "slidedp_gpu_memory_peak_bytes{gpu=\"0\"} 9",
        "slidedp_gpu_memory_reserved_peak_bytes{gpu=\"0\"} 11",
        "slidedp_gpu_memory_total_bytes{gpu=\"1\"} 100", "slidedp_predicted_step_duration_seconds 0.375",
        "slidedp_last_step_duration_seconds 0.5", "slidedp_workers 2",
        "slidedp_bottleneck{resource=\"cpu_update\"} 1", "slidedp_bottleneck{resource=\"h2d\"} 0"}) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
  // A bottleneck outside the known list gets its own series; the others drop to 0.
  s.bottleneck = "nccl";
  metrics.RecordStep(s, context);
  std::string next = metrics.Scrape();
  EXPECT_TRUE(Has(next, "slidedp_bottleneck{resource=\"nccl\"} 1")) << next;
  EXPECT_TRUE(Has(next, "slidedp_bottleneck{resource=\"cpu_update\"} 0")) << next;
  EXPECT_TRUE(Has(next, "slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"} 6000")) << next;
  metrics.ClearRates();
  next = metrics.Scrape();
  for (const char* line :
       {"slidedp_bottleneck{resource=\"nccl\"} 0", "slidedp_predicted_step_duration_seconds 0",
        "slidedp_gpu_memory_allocated_bytes{gpu=\"0\"} 0",
        "slidedp_pcie_bandwidth_bytes_per_second{direction=\"h2d\",gpu=\"0\"} 0",
        "slidedp_gpu_memory_total_bytes{gpu=\"1\"} 100",
        "slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"} 6000"}) {
    EXPECT_TRUE(Has(next, line)) << line << "\n" << next;
  }
}

TEST(MetricsTest, ZeroSeriesExistBeforeTheFirstStep) {
  Metrics metrics("1");
  const std::string text = metrics.Scrape();
  for (const char* line :
       {"slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"} 0",
        "slidedp_gpu_memory_allocated_bytes{gpu=\"0\"} 0",
        "slidedp_calibrated_pcie_bytes_per_second{direction=\"d2h\",gpu=\"0\"} 0",
        "slidedp_bottleneck{resource=\"cpu_update\"} 0", "slidedp_predicted_step_duration_seconds 0",
        "slidedp_last_step_timestamp_seconds 0"}) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
  EXPECT_NE(text.find("slidedp_host_memory_total_bytes "), std::string::npos) << text;
  EXPECT_EQ(text.find("slidedp_host_memory_total_bytes 0\n"), std::string::npos) << text;
}

TEST(MetricsTest, EvalLossIsNanUntilTheFirstEvaluationAndKeptAfterIt) {
  Metrics metrics("1");
  EXPECT_NE(metrics.Scrape().find("\nslidedp_eval_loss Nan\n"), std::string::npos) << metrics.Scrape();
  StepStats evaluated = SomeStep();
  evaluated.eval_loss = 2.75;
  evaluated.eval_tokens = 512;
  metrics.RecordStep(evaluated, StepContext{1, 1000, 0});
  EXPECT_TRUE(Has(metrics.Scrape(), "slidedp_eval_loss 2.75")) << metrics.Scrape();
  metrics.RecordStep(SomeStep(), StepContext{1, 1000, 0});  // a step without evaluation
  metrics.ClearRates();
  EXPECT_TRUE(Has(metrics.Scrape(), "slidedp_eval_loss 2.75")) << metrics.Scrape();
}

TEST(MetricsTest, HostCpuUtilizationIsBetweenTwoScrapes) {
  Metrics metrics("1");
  metrics.Scrape();
  volatile double sink = 0;  // some busy time on this host
  for (int i = 0; i < 20000000; ++i) sink = sink + i;
  const std::string text = metrics.Scrape();
  const size_t at = text.find("\nslidedp_host_cpu_utilization_ratio ");
  ASSERT_NE(at, std::string::npos) << text;
  const double ratio = std::stod(text.substr(at + 36));
  EXPECT_GT(ratio, 0.0);
  EXPECT_LE(ratio, 1.0);
}

TEST(ProcStatsTest, HostCpuTimesFromTheCpuLine) {
  testing::TempDir dir;
  testing::WriteFile(dir.Join("stat"),
                     "cpu  100 10 50 800 40 5 5 10 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n");
  absl::StatusOr<HostCpuTimes> t = ReadHostCpuTimes(dir.Join("stat"));
  ASSERT_TRUE(t.ok()) << t.status();
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  EXPECT_DOUBLE_EQ(t->busy_seconds, 180 * tick);  // user nice system irq softirq steal
  EXPECT_DOUBLE_EQ(t->total_seconds, 1020 * tick);
  testing::WriteFile(dir.Join("short"), "cpu  1 2 3\n");
  EXPECT_FALSE(ReadHostCpuTimes(dir.Join("short")).ok());
  testing::WriteFile(dir.Join("bad"), "cpu  1 2 x 4 5 6 7 8\n");
  EXPECT_FALSE(ReadHostCpuTimes(dir.Join("bad")).ok());
  EXPECT_FALSE(ReadHostCpuTimes(dir.Join("missing")).ok());
  ASSERT_TRUE(ReadHostCpuTimes().ok());
  EXPECT_GT(ReadHostCpuTimes()->total_seconds, 0);
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

// Opens a TCP connection to 127.0.0.1:`port` without waiting on a full accept queue;
// sends `bytes` once connected (within a second). Returns the socket.
int OpenConnection(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (!bytes.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 1000) == 1) (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  return fd;
}

// Issue 18: slow or many clients must not keep scrapes waiting. 64 connections that send
// nothing, 64 that stop halfway through their request line and 32 that send a request
// and never read: a scrape is still answered at once.
TEST(MetricsHttpTest, ScrapesAreAnsweredWhileManyClientsHoldConnections) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(100000, '#') + "\n"; });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) held.push_back(OpenConnection(port, ""));
  for (int i = 0; i < 64; ++i) held.push_back(OpenConnection(port, "GET /metr"));
  for (int i = 0; i < 32; ++i) held.push_back(OpenConnection(port, "GET /metrics HTTP/1.1\r\n\r\n"));
  const auto start = std::chrono::steady_clock::now();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  for (int i = 0; i < 3; ++i) {
    auto response = client.Get("/metrics");
    ASSERT_TRUE(response) << "scrape " << i << " not answered";
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body.size(), 100001u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int fd : held) close(fd);
}

// A connection that never completes its request is closed at the timeout, and past
// max_connections the oldest connections give way to new ones.
TEST(MetricsHttpTest, IdleConnectionsAreClosedAndTheOldestGiveWay) {
  MetricsHttpLimits limits;
  limits.max_connections = 8;
  limits.connection_timeout = absl::Milliseconds(300);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("slidedp_x 1\n"); }, limits);
  ASSERT_TRUE(server.ok()) << server.status();
  // The server closes a connection that does not finish its request in time: a read
  // sees the end of the stream.
  const auto start = std::chrono::steady_clock::now();
  const int idle = OpenConnection((*server)->port(), "GET /");
  pollfd p{idle, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  char byte;
  EXPECT_LE(recv(idle, &byte, 1, 0), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  close(idle);
  // 20 connections held open against a limit of 8: the oldest give way to the scrape.
  std::vector<int> held;
  for (int i = 0; i < 20; ++i) held.push_back(OpenConnection((*server)->port(), ""));
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(5, 0);
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "slidedp_x 1\n");
  for (int fd : held) close(fd);
}

}  // namespace
}  // namespace slidedp::server
