// The PromQL selector scanner and the exposition reader used by the dashboard check.
#include "tests/server/promql_selectors.h"

#include <gtest/gtest.h>

namespace slidedp::server::testing {
namespace {

std::vector<std::string> Names(const std::string& expr) {
  absl::StatusOr<std::vector<VectorSelector>> s = ParseSelectors(expr);
  EXPECT_TRUE(s.ok()) << s.status();
  std::vector<std::string> names;
  if (s.ok()) {
    for (const VectorSelector& v : *s) names.push_back(v.metric);
  }
  return names;
}

using Strings = std::vector<std::string>;

TEST(PromqlSelectorsTest, FindsMetricsAndSkipsFunctionsKeywordsAndLabelLists) {
  EXPECT_EQ(Names("slidedp_loss"), Strings{"slidedp_loss"});
  EXPECT_EQ(Names("sum by (instance, job) (rate(slidedp_x_total{a=\"b\"}[5m])) / on(instance) "
                  "group_left(gpu) slidedp_workers > 0.25 or absent(up{job=\"slidedpd\"})"),
            (Strings{"slidedp_x_total", "slidedp_workers", "up"}));
  EXPECT_EQ(Names("rate(a[$__rate_interval]) * 1e9 + 2.5e-3 - 0x1F + b offset 10m unless bool c"),
            (Strings{"a", "b", "c"}));
  EXPECT_EQ(Names("histogram_quantile(0.9, sum(rate(h_bucket{i=~\"$instance\"}[5m])) by (le))"),
            Strings{"h_bucket"});
  EXPECT_EQ(Names("max without (gpu) (m) + count by(a)(n)"), (Strings{"m", "n"}));
  EXPECT_EQ(Names("{__name__=\"slidedp_loss\", job=\"x\"}"), Strings{"slidedp_loss"});
  EXPECT_EQ(Names("label_replace(m, \"dst\", \"$1\", \"src\", \"(.*)\") # a comment naming n\n+ ${var}"),
            Strings{"m"});
  // A metric may be named like a keyword when it has matchers.
  EXPECT_EQ(Names("on{a=\"b\"}"), Strings{"on"});
}

TEST(PromqlSelectorsTest, ReadsMatchers) {
  absl::StatusOr<std::vector<VectorSelector>> s =
      ParseSelectors("m{direction=\"h2d\", gpu!~'1|2' , q=\"a\\\"b\",}");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);
  const VectorSelector& v = (*s)[0];
  EXPECT_EQ(v.metric, "m");
  ASSERT_EQ(v.matchers.size(), 3u);
  EXPECT_EQ(v.matchers[0].label, "direction");
  EXPECT_EQ(v.matchers[0].op, "=");
  EXPECT_EQ(v.matchers[0].value, "h2d");
  EXPECT_EQ(v.matchers[1].op, "!~");
  EXPECT_EQ(v.matchers[1].value, "1|2");
  EXPECT_EQ(v.matchers[2].value, "a\"b");
}

TEST(PromqlSelectorsTest, MalformedExpressionsAreErrors) {
  for (const char* bad : {"m{a=\"b\"", "m{a \"b\"}", "m{a=b}", "rate(m[5m)", "m{a=\"b}", "{a=\"b\"}", "m}"}) {
    EXPECT_FALSE(ParseSelectors(bad).ok()) << bad;
  }
}

TEST(PromqlSelectorsTest, ReadsTheExpositionFormat) {
  absl::StatusOr<std::vector<Sample>> s = ParseExposition(
      "# HELP a_total help\n# TYPE a_total counter\na_total 3\n"
      "b{direction=\"h2d\",gpu=\"0\"} 1.5e+09 1700000000\nc{v=\"x\\\"y\"} NaN\n\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].metric, "a_total");
  EXPECT_EQ((*s)[0].value, "3");
  EXPECT_EQ((*s)[1].labels.at("gpu"), "0");
  EXPECT_EQ((*s)[1].labels.at("direction"), "h2d");
  EXPECT_EQ((*s)[1].value, "1.5e+09");
  EXPECT_EQ((*s)[2].labels.at("v"), "x\"y");
  EXPECT_FALSE(ParseExposition("b{gpu=\"0} 1\n").ok());
  EXPECT_FALSE(ParseExposition("b{gpu} 1\n").ok());
  EXPECT_FALSE(ParseExposition("b\n").ok());
}

}  // namespace
}  // namespace slidedp::server::testing
