// The Grafana dashboard (deploy/grafana) and the Prometheus alert rules
// (deploy/prometheus) against a real slidedpd: the daemon runs a tiny job to the end so
// that its labelled series exist, its /metrics is scraped, and every metric name and
// label value that a dashboard query or an alert expression selects must be in the
// scrape. Also: the Grafana provisioning files fit the dashboard, and README.md's
// metrics reference names every exported metric.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "nlohmann/json.hpp"
#include "server/listen_address.h"
#include "tests/server/promql_selectors.h"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

namespace slidedp::server::testing {
namespace {

using namespace std::chrono_literals;

const std::string kSource = SLIDEDP_SOURCE_DIR;
const std::string kDashboard = kSource + "/deploy/grafana/dashboards/slidedp.json";
const std::string kRules = kSource + "/deploy/prometheus/slidedp-alerts.yml";

// Series that Prometheus makes itself for every target, and the labels it attaches.
const std::set<std::string> kMadeByPrometheus = {"up"};
const std::set<std::string> kTargetLabels = {"instance", "job"};

struct Query {
  std::string where;  // "dashboard panel 'Loss' target A"
  std::string expr;
};

void CollectDashboardQueries(const nlohmann::json& node, const std::string& panel,
                             std::vector<Query>* out) {
  if (node.is_array()) {
    for (const auto& item : node) CollectDashboardQueries(item, panel, out);
    return;
  }
  if (!node.is_object()) return;
  const std::string title = node.contains("title") && node["title"].is_string()
                                ? node["title"].get<std::string>() : panel;
  if (node.contains("expr") && node["expr"].is_string()) {
    out->push_back({"dashboard panel '" + title + "' target " + node.value("refId", "?"),
                    node["expr"].get<std::string>()});
  }
  for (const auto& [key, value] : node.items()) {
    if (key != "templating") CollectDashboardQueries(value, title, out);
  }
}

// Grafana's label_values(METRIC, LABEL) of the template variables, as METRIC alone.
void CollectTemplateQueries(const nlohmann::json& dashboard, std::vector<Query>* out) {
  const std::regex label_values(R"(label_values\(\s*([^,]+?)\s*,\s*([a-zA-Z_]\w*)\s*\))");
  for (const auto& variable : dashboard["templating"]["list"]) {
    const nlohmann::json& q = variable["query"];
    const std::string text = q.is_object() ? q.value("query", "") : q.is_string() ? q.get<std::string>() : "";
    std::smatch m;
    const std::string where = "dashboard variable '" + variable.value("name", "?") + "'";
    if (std::regex_search(text, m, label_values)) {
      out->push_back({where, m[1].str()});
      EXPECT_TRUE(kTargetLabels.count(m[2].str()) != 0) << where << " lists label " << m[2]
                                                        << ", not a target label";
    } else {
      ADD_FAILURE() << where << ": not a label_values() query: " << text;
    }
  }
}

std::vector<Query> RuleQueries() {
  std::vector<Query> out;
  YAML::Node rules = YAML::LoadFile(kRules);
  for (const auto& group : rules["groups"]) {
    for (const auto& rule : group["rules"]) {
      const std::string name = rule["alert"] ? rule["alert"].as<std::string>() : rule["record"].as<std::string>();
      out.push_back({"alert " + name, rule["expr"].as<std::string>()});
    }
  }
  return out;
}

nlohmann::json LoadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::string Scrape(const std::string& address) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return "";
  httplib::Client client(hp->host, hp->port);
  client.set_read_timeout(10, 0);
  auto response = client.Get("/metrics");
  return response && response->status == 200 ? response->body : "";
}

// The scrape of a daemon that ran a tiny 3-step job to the end, once for the suite.
class DashboardMetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    DaemonProcess daemon(SLIDEDPD_PATH, dir_->Join("state"));
    if (!daemon.started()) {
      error_ = "slidedpd did not start: " + daemon.log();
      return;
    }
    WriteFile(dir_->Join("job.yaml"), "model: tiny\nseq_len: 32\nmicro_batch_size: 2\nsteps: 3\n");
    const std::string server = "--server=" + daemon.address();
    CommandResult submit = RunCommand({SLIDEDP_CLI_PATH, server, "submit", dir_->Join("job.yaml")}, 60s);
    if (submit.exit_code != 0) {
      error_ = "submit failed: " + submit.err;
      return;
    }
    const std::string id = submit.out.substr(0, submit.out.find('\n'));
    CommandResult watch = RunCommand({SLIDEDP_CLI_PATH, server, "watch", id}, 180s);
    if (watch.exit_code != 0) {
      error_ = "the job did not succeed: " + watch.out + watch.err + daemon.log();
      return;
    }
    // Two scrapes: the CPU utilization ratios are set from the second one on.
    Scrape(daemon.metrics_address());
    *scrape_ = Scrape(daemon.metrics_address());
    if (scrape_->empty()) error_ = "no answer from http://" + daemon.metrics_address() + "/metrics";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(error_.empty()) << error_; }

  static TempDir* dir_;
  static std::string error_;
  static std::string* scrape_;
};
TempDir* DashboardMetricsTest::dir_ = nullptr;
std::string DashboardMetricsTest::error_;
std::string* DashboardMetricsTest::scrape_ = new std::string;

TEST_F(DashboardMetricsTest, EveryMetricTheDashboardAndTheAlertsQueryIsExported) {
  absl::StatusOr<std::vector<Sample>> samples = ParseExposition(*scrape_);
  ASSERT_TRUE(samples.ok()) << samples.status();
  std::map<std::string, std::vector<const Sample*>> exported;
  for (const Sample& s : *samples) exported[s.metric].push_back(&s);

  const nlohmann::json dashboard = LoadJson(kDashboard);
  ASSERT_TRUE(dashboard.is_object()) << kDashboard << " is not JSON";
  std::vector<Query> queries;
  CollectDashboardQueries(dashboard["panels"], "", &queries);
  CollectTemplateQueries(dashboard, &queries);
  const size_t dashboard_queries = queries.size();
  for (Query& q : RuleQueries()) queries.push_back(std::move(q));
  ASSERT_GE(dashboard_queries, 20u) << "the dashboard lost its panels?";
  ASSERT_GE(queries.size() - dashboard_queries, 6u) << "the alert rules lost their alerts?";

  std::set<std::string> checked;
  for (const Query& q : queries) {
    absl::StatusOr<std::vector<VectorSelector>> selectors = ParseSelectors(q.expr);
    ASSERT_TRUE(selectors.ok()) << q.where << ": " << selectors.status();
    EXPECT_FALSE(selectors->empty()) << q.where << " selects no metric: " << q.expr;
    for (const VectorSelector& v : *selectors) {
      checked.insert(v.metric);
      if (kMadeByPrometheus.count(v.metric) != 0) continue;
      auto it = exported.find(v.metric);
      if (it == exported.end()) {
        ADD_FAILURE() << q.where << " queries " << v.metric << ", which slidedpd does not export\n  "
                      << q.expr;
        continue;
      }
      for (const LabelMatcher& m : v.matchers) {
        if (kTargetLabels.count(m.label) != 0 || m.op == "!=" || m.op == "!~") continue;
        const bool literal = m.op == "=" && m.value.find('$') == std::string::npos;
        bool found = false;
        for (const Sample* s : it->second) {
          auto label = s->labels.find(m.label);
          if (label != s->labels.end() && (!literal || label->second == m.value)) found = true;
        }
        EXPECT_TRUE(found) << q.where << " selects " << v.metric << "{" << m.label << m.op << "\""
                           << m.value << "\"}, which no exported series has\n  " << q.expr;
      }
    }
  }
  // What the dashboard is for (issue 7): if one of these goes, a panel went with it.
  for (const char* needed :
       {"slidedp_tokens_per_second", "slidedp_last_step_duration_seconds", "slidedp_step_phase_seconds",
        "slidedp_predicted_step_duration_seconds", "slidedp_pcie_bandwidth_bytes_per_second",
        "slidedp_host_cpu_utilization_ratio", "slidedp_gpu_memory_allocated_bytes", "slidedp_loss",
        "slidedp_learning_rate", "slidedp_jobs", "slidedp_calibrated_pcie_bytes_per_second"}) {
    EXPECT_TRUE(checked.count(needed) != 0) << "no dashboard query or alert uses " << needed;
  }
}

TEST_F(DashboardMetricsTest, PerGpuSeriesExistForTheCpuWorker) {
  for (const char* line :
       {"slidedp_pcie_bytes_total{direction=\"h2d\",gpu=\"0\"} ",
        "slidedp_pcie_busy_seconds_total{direction=\"d2h\",gpu=\"0\"} 0\n",
        "slidedp_gpu_memory_allocated_bytes{gpu=\"0\"} 0\n",
        "slidedp_calibrated_pcie_bytes_per_second{direction=\"h2d\",gpu=\"0\"} 0\n",
        "slidedp_steps_total 3\n", "slidedp_jobs{state=\"SUCCEEDED\"} 1\n"}) {
    EXPECT_NE(scrape_->find(line), std::string::npos) << line << "\n" << *scrape_;
  }
}

TEST_F(DashboardMetricsTest, TheReadmeDocumentsEveryExportedMetric) {
  const std::string readme = ReadFileOrEmpty(kSource + "/README.md");
  ASSERT_FALSE(readme.empty());
  const std::regex type_line(R"(# TYPE (\w+) (\w+))");
  int families = 0;
  for (std::sregex_iterator it(scrape_->begin(), scrape_->end(), type_line), end; it != end; ++it) {
    ++families;
    const std::string name = (*it)[1].str();
    EXPECT_NE(readme.find("| `" + name + "` | " + (*it)[2].str()), std::string::npos)
        << "README.md's metrics reference has no row \"| `" << name << "` | " << (*it)[2] << " |\"";
  }
  EXPECT_GE(families, 30);
}

TEST(GrafanaProvisioningTest, DatasourceAndProviderFitTheDashboard) {
  const nlohmann::json dashboard = LoadJson(kDashboard);
  ASSERT_TRUE(dashboard.is_object());
  YAML::Node datasources = YAML::LoadFile(kSource + "/deploy/grafana/provisioning/datasources/slidedp.yml");
  YAML::Node providers = YAML::LoadFile(kSource + "/deploy/grafana/provisioning/dashboards/slidedp.yml");
  ASSERT_EQ(datasources["apiVersion"].as<int>(), 1);
  ASSERT_EQ(providers["apiVersion"].as<int>(), 1);
  ASSERT_EQ(datasources["datasources"].size(), 1u);
  const std::string uid = datasources["datasources"][0]["uid"].as<std::string>();
  EXPECT_EQ(datasources["datasources"][0]["type"].as<std::string>(), "prometheus");
  ASSERT_EQ(providers["providers"].size(), 1u);
  EXPECT_EQ(providers["providers"][0]["type"].as<std::string>(), "file");
  EXPECT_FALSE(providers["providers"][0]["options"]["path"].as<std::string>().empty());

  EXPECT_FALSE(dashboard.value("uid", "").empty());
  std::set<int> ids;
  int panels = 0;
  for (const auto& panel : dashboard["panels"]) {
    EXPECT_TRUE(ids.insert(panel["id"].get<int>()).second) << "duplicate panel id " << panel["id"];
    if (panel["type"] == "row") continue;
    ++panels;
    const std::string title = panel.value("title", "?");
    EXPECT_EQ(panel["datasource"]["uid"], uid) << "panel '" << title << "'";
    ASSERT_TRUE(panel["targets"].is_array() && !panel["targets"].empty()) << "panel '" << title << "'";
    for (const auto& target : panel["targets"]) {
      EXPECT_EQ(target["datasource"]["uid"], uid) << "panel '" << title << "'";
    }
    const auto& grid = panel["gridPos"];
    EXPECT_LE(grid["x"].get<int>() + grid["w"].get<int>(), 24) << "panel '" << title << "' is wider than the row";
  }
  EXPECT_GE(panels, 15);
  for (const auto& variable : dashboard["templating"]["list"]) {
    EXPECT_EQ(variable["datasource"]["uid"], uid) << "variable " << variable["name"];
  }
}

}  // namespace
}  // namespace slidedp::server::testing
