// Reading PromQL and the Prometheus text format far enough to check that what the
// dashboard and the alert rules query is what the daemon exports: the vector
// selectors of an expression (metric name and label matchers), and the samples of a
// scrape. Not a PromQL parser: functions, operators, numbers, durations, strings and
// Grafana variables ($x, ${x}, [$__rate_interval]) are skipped, not checked. Plain
// functions; any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace slidedp::server::testing {

struct LabelMatcher {
  std::string label;
  std::string op;     // "=", "!=", "=~" or "!~"
  std::string value;  // unquoted, escapes resolved
};

struct VectorSelector {
  std::string metric;  // from the name or a __name__="..." matcher
  std::vector<LabelMatcher> matchers;  // without __name__
};

// Every vector selector of `expr`, in order. Errors: unbalanced brackets, quotes or
// braces, and matchers that do not read as `label op "value"`.
absl::StatusOr<std::vector<VectorSelector>> ParseSelectors(const std::string& expr);

// One sample line of the text exposition format.
struct Sample {
  std::string metric;
  std::map<std::string, std::string> labels;
  std::string value;
};

// The samples of a scrape (comment and blank lines skipped). Errors name the line.
absl::StatusOr<std::vector<Sample>> ParseExposition(const std::string& text);

}  // namespace slidedp::server::testing
