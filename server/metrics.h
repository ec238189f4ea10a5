// Metrics: the daemon's Prometheus metrics (prometheus-cpp registry) and their text
// exposition. RecordStep is called by the job thread, SetJobCounts by whoever changes
// a job's state, Scrape by the metrics HTTP thread; all are thread-safe.
//
// Names follow the Prometheus conventions (base units, _total for counters):
//   slidedp_step_duration_seconds (histogram), slidedp_tokens_per_second,
//   slidedp_mfu_ratio, slidedp_pcie_bytes_total{gpu,direction},
//   slidedp_pcie_bandwidth_bytes_per_second{gpu,direction},
//   slidedp_cpu_update_busy_seconds_total, slidedp_stall_seconds_total{cause},
//   slidedp_step_phase_seconds{phase}, slidedp_loss, slidedp_learning_rate,
//   slidedp_grad_norm, slidedp_steps_total, slidedp_skipped_steps_total,
//   slidedp_tokens_total, slidedp_jobs{state}, slidedp_process_cpu_seconds_total,
//   slidedp_process_cpu_utilization_ratio, slidedp_process_resident_memory_bytes,
//   slidedp_build_info{version}.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "runtime/engine/trainer.h"

namespace slidedp::server {

// What RecordStep needs to know about the job besides the step's numbers.
struct StepContext {
  int workers = 1;
  int64_t num_parameters = 0;
  // Peak dense FLOP/s of one worker; <= 0: slidedp_mfu_ratio is not updated.
  double peak_flops_per_worker = 0.0;
};

// Job states as slidedp.v1.JobState numbers 1..6 (index 0 unused).
using JobStateCounts = std::array<int64_t, 7>;

class Metrics {
 public:
  explicit Metrics(const std::string& version);

  // Updates every per-step metric. The PCIe byte counts of StepStats are totals over
  // the workers; they are attributed evenly to gpu="0".."workers-1".
  void RecordStep(const StepStats& stats, const StepContext& context);

  // The running job stopped (paused or finished): rate gauges go to 0.
  void ClearRates();

  void SetJobCounts(const JobStateCounts& counts);

  // Refreshes the process metrics from /proc and returns the text exposition format
  // (version 0.0.4) of every metric.
  std::string Scrape();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  struct PcieSeries {
    prometheus::Counter* h2d_bytes;
    prometheus::Counter* d2h_bytes;
    prometheus::Gauge* h2d_bandwidth;
    prometheus::Gauge* d2h_bandwidth;
  };
  PcieSeries& Pcie(int gpu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshProcess();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* step_duration_;
  prometheus::Gauge* tokens_per_second_;
  prometheus::Gauge* mfu_;
  prometheus::Family<prometheus::Counter>* pcie_bytes_;
  prometheus::Family<prometheus::Gauge>* pcie_bandwidth_;
  prometheus::Counter* update_busy_;
  prometheus::Counter* stall_update_wait_;
  prometheus::Gauge* phase_forward_;
  prometheus::Gauge* phase_backward_;
  prometheus::Gauge* phase_update_wait_;
  prometheus::Gauge* phase_update_busy_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* lr_;
  prometheus::Gauge* grad_norm_;
  prometheus::Counter* steps_;
  prometheus::Counter* skipped_steps_;
  prometheus::Counter* tokens_;
  std::array<prometheus::Gauge*, 7> jobs_{};
  prometheus::Counter* process_cpu_;
  prometheus::Gauge* process_cpu_utilization_;
  prometheus::Gauge* process_rss_;

  absl::Mutex mu_;
  std::map<int, PcieSeries> pcie_ ABSL_GUARDED_BY(mu_);
  double last_cpu_seconds_ ABSL_GUARDED_BY(mu_) = 0.0;
  absl::Time last_cpu_sample_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace slidedp::server
