// PromQL selectors and exposition samples, for the dashboard and alert checks; see
// promql_selectors.h. Plain functions.
#include "tests/server/promql_selectors.h"

#include <cctype>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slidedp::server::testing {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Words that are not metric names when not followed by "(" or "{".
const std::set<std::string>& Keywords() {
  static const auto* k = new std::set<std::string>{
      "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
      "group_left", "group_right", "inf", "nan", "atan2", "start", "end"};
  return *k;
}

// Aggregation operators: `sum by (x) (...)` puts a modifier between the name and "(".
bool IsAggregation(const std::string& word) {
  static const auto* a = new std::set<std::string>{
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
      "bottomk", "topk", "quantile", "limitk", "limit_ratio"};
  return a->count(word) != 0;
}

// Keywords whose parenthesized list holds label names.
bool TakesLabelList(const std::string& word) {
  return word == "by" || word == "without" || word == "on" || word == "ignoring" ||
         word == "group_left" || word == "group_right";
}

class Scanner {
 public:
  explicit Scanner(const std::string& text) : s_(text) {}

  absl::StatusOr<std::vector<VectorSelector>> Selectors() {
    std::vector<VectorSelector> out;
    while (true) {
      SkipSpace();
      if (i_ >= s_.size()) return out;
      const char c = s_[i_];
      if (c == '"' || c == '\'' || c == '`') {
        absl::StatusOr<std::string> str = String();
        if (!str.ok()) return str.status();
      } else if (c == '[') {
        const size_t close = s_.find(']', i_);
        if (close == std::string::npos) return Error("'[' without ']'");
        i_ = close + 1;
      } else if (c == '$') {  // Grafana variable: $name or ${name}
        ++i_;
        if (i_ < s_.size() && s_[i_] == '{') {
          const size_t close = s_.find('}', i_);
          if (close == std::string::npos) return Error("'${' without '}'");
          i_ = close + 1;
        } else {
          while (i_ < s_.size() && IsNameChar(s_[i_])) ++i_;
        }
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1])))) {
        while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                  ((s_[i_] == '+' || s_[i_] == '-') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E')))) {
          ++i_;
        }
      } else if (c == '{') {  // {__name__="x", ...}
        VectorSelector selector;
        if (absl::Status st = Matchers(&selector); !st.ok()) return st;
        if (selector.metric.empty()) return Error("a selector without a metric name");
        out.push_back(std::move(selector));
      } else if (IsNameStart(c)) {
        const std::string word = Name();
        SkipSpace();
        const char next = i_ < s_.size() ? s_[i_] : '\0';
        if (next == '(') {
          if (TakesLabelList(word)) {
            const size_t close = s_.find(')', i_);
            if (close == std::string::npos) return Error("'(' without ')'");
            i_ = close + 1;
          }
          // else a function or aggregation: its arguments are scanned as they come
        } else if (Keywords().count(word) != 0 && next != '{') {
          // operator keyword
        } else if (IsAggregation(word) && NextWordIsGrouping()) {
          // `sum by (...)`: the grouping and the argument list follow
        } else {
          VectorSelector selector;
          selector.metric = word;
          if (next == '{') {
            if (absl::Status st = Matchers(&selector); !st.ok()) return st;
          }
          out.push_back(std::move(selector));
        }
      } else if (c == '}' || c == ']') {
        return Error(absl::StrCat("unbalanced '", std::string(1, c), "'"));
      } else {
        ++i_;  // operators, parentheses, commas
      }
    }
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at offset ", i_, " of: ", s_));
  }
  void SkipSpace() {
    while (i_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i_]))) {
        ++i_;
      } else if (s_[i_] == '#') {  // comment to the end of the line
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        return;
      }
    }
  }
  // Whether the word at the position is "by" or "without" (does not move).
  bool NextWordIsGrouping() const {
    size_t j = i_;
    while (j < s_.size() && IsNameChar(s_[j])) ++j;
    const std::string word = s_.substr(i_, j - i_);
    return word == "by" || word == "without";
  }
  std::string Name() {
    const size_t start = i_;
    while (i_ < s_.size() && IsNameChar(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  absl::StatusOr<std::string> String() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\' && quote != '`' && i_ + 1 < s_.size()) {
        const char e = s_[++i_];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        out += s_[i_];
      }
      ++i_;
    }
    if (i_ >= s_.size()) return Error("unterminated string");
    ++i_;
    return out;
  }
  // At '{': label matchers up to the matching '}'.
  absl::Status Matchers(VectorSelector* selector) {
    ++i_;
    while (true) {
      SkipSpace();
      if (i_ >= s_.size()) return Error("'{' without '}'");
      if (s_[i_] == '}') {
        ++i_;
        return absl::OkStatus();
      }
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (!IsNameStart(s_[i_])) return Error("expected a label name");
      LabelMatcher m;
      m.label = Name();
      SkipSpace();
      for (const char* op : {"=~", "!~", "!=", "="}) {
        if (s_.compare(i_, std::char_traits<char>::length(op), op) == 0) {
          m.op = op;
          i_ += m.op.size();
          break;
        }
      }
      if (m.op.empty()) return Error(absl::StrCat("expected =, !=, =~ or !~ after ", m.label));
      SkipSpace();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'' && s_[i_] != '`')) {
        return Error(absl::StrCat("expected a quoted value for ", m.label));
      }
      absl::StatusOr<std::string> value = String();
      if (!value.ok()) return value.status();
      m.value = *value;
      if (m.label == "__name__" && m.op == "=") {
        selector->metric = m.value;
      } else {
        selector->matchers.push_back(std::move(m));
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<VectorSelector>> ParseSelectors(const std::string& expr) {
  return Scanner(expr).Selectors();
}

absl::StatusOr<std::vector<Sample>> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  size_t line_start = 0;
  for (int line_number = 1; line_start < text.size(); ++line_number) {
    size_t end = text.find('\n', line_start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(line_start, end - line_start);
    line_start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("scrape line ", line_number, ": ", what, ": ", line));
    };
    Sample sample;
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i])) ++i;
    sample.metric = line.substr(0, i);
    if (sample.metric.empty()) return bad("no metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        if (eq == std::string::npos) return bad("a label without =\"");
        const std::string label = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        if (i >= line.size()) return bad("an unterminated label value");
        ++i;  // closing quote
        if (i < line.size() && line[i] == ',') ++i;
        sample.labels[label] = value;
      }
      if (i >= line.size()) return bad("'{' without '}'");
      ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t value_end = line.find(' ', i);
    sample.value = line.substr(i, value_end == std::string::npos ? std::string::npos : value_end - i);
    if (sample.value.empty()) return bad("no value");
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace slidedp::server::testing
