// StepTrace: see step_trace.h. Writes the JSON array form of the Trace Event Format
// ("X" complete events in microseconds, one thread name per track; "C" counters).
#include "runtime/engine/step_trace.h"

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/engine/clock.h"

namespace slidedp {

StepTrace::StepTrace() : origin_(MonotonicSeconds()) {}

void StepTrace::Add(int pid, const std::string& track, const std::string& name, double t0, double t1) {
  absl::MutexLock lock(&mu_);
  spans_.push_back({pid, track, name, t0, t1});
}

void StepTrace::AddCounter(int pid, const std::string& name, double t,
                           std::vector<std::pair<std::string, double>> values) {
  absl::MutexLock lock(&mu_);
  counters_.push_back({pid, name, t, std::move(values)});
}

size_t StepTrace::size() const {
  absl::MutexLock lock(&mu_);
  return spans_.size();
}

absl::Status StepTrace::Write(const std::string& path) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json events = nlohmann::json::array();
  std::map<std::pair<int, std::string>, int> tids;
  for (const Span& s : spans_) {
    auto [it, added] = tids.emplace(std::make_pair(s.pid, s.track), static_cast<int>(tids.size()));
    if (added) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", s.pid}, {"tid", it->second},
                        {"args", {{"name", s.track}}}});
    }
    events.push_back({{"ph", "X"}, {"name", s.name}, {"pid", s.pid}, {"tid", it->second},
                      {"ts", (s.t0 - origin_) * 1e6}, {"dur", std::max(0.0, s.t1 - s.t0) * 1e6}});
  }
  for (const Counter& c : counters_) {
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [series, value] : c.values) args[series] = value;
    events.push_back({{"ph", "C"}, {"name", c.name}, {"pid", c.pid}, {"ts", (c.t - origin_) * 1e6}, {"args", args}});
  }
  for (const auto& [key, tid] : tids) {
    (void)tid;
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", key.first}, {"tid", 0},
                      {"args", {{"name", key.first == kHostPid ? std::string("host")
                                                               : "worker " + std::to_string(key.first)}}}});
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return absl::InternalError("trace: cannot write " + tmp);
    f << nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump() << "\n";
    if (!f.good()) return absl::InternalError("trace: write to " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError("trace: cannot rename to " + path);
  return absl::OkStatus();
}

}  // namespace slidedp
