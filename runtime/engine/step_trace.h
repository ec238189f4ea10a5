// StepTrace: a Chrome-trace timeline (chrome://tracing, Perfetto) of every stream's work
// per unit and of the CPU updates, so anyone can see the H2D of layer l+1 under the
// compute of l and the CPU updates under the next forward. Workers add spans measured
// by device events (resolved after each step) and the update thread adds host spans,
// and counters: a GPU's memory (allocated, and its peak so far in the step) as each
// compute span was issued, so that the trace says which unit's work set the step's peak.
// Threads: Add* from any thread (locked); Write from the trainer's thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace slidedp {

class StepTrace {
 public:
  StepTrace();
  // A span on process `pid` (worker rank, or kHostPid for the CPU update thread),
  // track `track` (a stream name, "update"), from t0 to t1 seconds of MonotonicSeconds().
  void Add(int pid, const std::string& track, const std::string& name, double t0, double t1);
  // A counter sample ("C" event) on process `pid` at t seconds: named series and values.
  void AddCounter(int pid, const std::string& name, double t, std::vector<std::pair<std::string, double>> values);
  absl::Status Write(const std::string& path) const;
  size_t size() const;

  static constexpr int kHostPid = 1000;

 private:
  struct Span {
    int pid;
    std::string track, name;
    double t0, t1;
  };
  const double origin_;
  mutable absl::Mutex mu_;
  std::vector<Span> spans_ ABSL_GUARDED_BY(mu_);
  struct Counter {
    int pid;
    std::string name;
    double t;
    std::vector<std::pair<std::string, double>> values;
  };
  std::vector<Counter> counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace slidedp
