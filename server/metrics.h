// Metrics: the daemon's Prometheus metrics (prometheus-cpp registry) and their text
// exposition. RecordStep is called by the job thread, SetJobCounts by whoever changes
// a job's state, Scrape by the metrics HTTP thread; all are thread-safe.
//
// Names follow the Prometheus conventions (base units, _total for counters). The list
// with types, labels and meaning is the metrics reference of README.md:
//   step:    slidedp_step_duration_seconds (histogram), slidedp_last_step_duration_seconds,
//            slidedp_predicted_step_duration_seconds, slidedp_step_phase_seconds{phase},
//            slidedp_bottleneck{resource}, slidedp_tokens_per_second, slidedp_mfu_ratio,
//            slidedp_workers, slidedp_loss, slidedp_learning_rate, slidedp_grad_norm,
//            slidedp_steps_total, slidedp_skipped_steps_total, slidedp_tokens_total,
//            slidedp_last_step_timestamp_seconds, slidedp_eval_loss
//   PCIe:    slidedp_pcie_bytes_total{gpu,direction},
//            slidedp_pcie_busy_seconds_total{gpu,direction},
//            slidedp_pcie_bandwidth_bytes_per_second{gpu,direction},
//            slidedp_calibrated_pcie_bytes_per_second{gpu,direction}
//   GPU:     slidedp_gpu_memory_allocated_bytes{gpu}, slidedp_gpu_memory_peak_bytes{gpu},
//            slidedp_gpu_memory_reserved_peak_bytes{gpu}, slidedp_gpu_memory_total_bytes{gpu}
//   CPU:     slidedp_cpu_update_busy_seconds_total, slidedp_stall_seconds_total{cause}
//   jobs:    slidedp_jobs{state}
//   process: slidedp_process_cpu_seconds_total, slidedp_process_cpu_utilization_ratio,
//            slidedp_process_resident_memory_bytes, slidedp_host_cpu_utilization_ratio,
//            slidedp_host_memory_total_bytes, slidedp_host_memory_available_bytes,
//            slidedp_build_info{version}
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// Measured host<->device copy rates of one GPU (bytes/s), from the calibration the
// step-time model uses; 0: not measured.
struct PcieCalibration {
  double h2d_bytes_per_second = 0.0;
  double d2h_bytes_per_second = 0.0;
};

// What RecordStep needs to know about the job besides the step's numbers.
struct StepContext {
  int workers = 1;  // of this host
  int64_t num_parameters = 0;
  // Peak dense FLOP/s of one worker; <= 0: slidedp_mfu_ratio is not updated.
  double peak_flops_per_worker = 0.0;
  int hosts = 1;  // of the job: tokens/s is the job's, its MFU over every host's workers
  int host_rank = 0;
};

// Job states as slidedp.v1.JobState numbers 1..6 (index 0 unused).
using JobStateCounts = std::array<int64_t, 7>;

class Metrics {
 public:
  explicit Metrics(const std::string& version);

  // Updates every per-step metric. Per-GPU series (gpu="0".."N-1") come from
  // stats.workers; when it is empty (an engine that does not report per worker), the
  // PCIe byte totals of StepStats are split evenly over context.workers and the
  // per-GPU busy times and memory stay 0.
  void RecordStep(const StepStats& stats, const StepContext& context);

  // The running job stopped (paused or finished): rate gauges, the prediction, the
  // bottleneck and the GPU memory in use go to 0.
  void ClearRates();

  void SetJobCounts(const JobStateCounts& counts);

  // The running job's units whose training state lives on its GPUs (policy.
  // resident_units, as the plan runs them) and their bytes on the GPU holding most;
  // ClearRates sets both to 0.
  void SetResidency(int64_t units, int64_t bytes);

  // The calibrated copy rates per GPU (index = gpu label), exported as
  // slidedp_calibrated_pcie_bytes_per_second from the next step on; GPUs beyond the
  // vector export 0. Called when a job's plan is made (nobody does yet: 0 until then).
  void SetCalibration(std::vector<PcieCalibration> per_gpu);

  // Refreshes the process metrics from /proc and returns the text exposition format
  // (version 0.0.4) of every metric.
  std::string Scrape();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  // Every per-GPU series of one GPU.
  struct GpuSeries {
    prometheus::Counter* h2d_bytes;
    prometheus::Counter* d2h_bytes;
    prometheus::Counter* h2d_busy;
    prometheus::Counter* d2h_busy;
    prometheus::Gauge* h2d_bandwidth;
    prometheus::Gauge* d2h_bandwidth;
    prometheus::Gauge* h2d_calibrated;
    prometheus::Gauge* d2h_calibrated;
    prometheus::Gauge* memory_allocated;
    prometheus::Gauge* memory_peak;
    prometheus::Gauge* memory_reserved_peak;
    prometheus::Gauge* memory_total;
  };
  GpuSeries& Gpu(int gpu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordGpus(const StepStats& stats, const StepContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetBottleneck(const std::string& resource) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshProcess();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* step_duration_;
  prometheus::Gauge* last_step_duration_;
  prometheus::Gauge* predicted_step_duration_;
  prometheus::Gauge* last_step_timestamp_;
  prometheus::Gauge* workers_;
  prometheus::Gauge* hosts_;
  prometheus::Gauge* resident_units_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* host_rank_;
  prometheus::Family<prometheus::Gauge>* bottleneck_;
  prometheus::Gauge* tokens_per_second_;
  prometheus::Gauge* mfu_;
  prometheus::Family<prometheus::Counter>* pcie_bytes_;
  prometheus::Family<prometheus::Counter>* pcie_busy_;
  prometheus::Family<prometheus::Gauge>* pcie_bandwidth_;
  prometheus::Family<prometheus::Gauge>* pcie_calibrated_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_allocated_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_peak_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_reserved_peak_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_total_;
  prometheus::Counter* update_busy_;
  prometheus::Counter* stall_update_wait_;
  prometheus::Gauge* phase_forward_;
  prometheus::Gauge* phase_backward_;
  prometheus::Gauge* phase_update_wait_;
  prometheus::Gauge* phase_update_busy_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* lr_;
  prometheus::Gauge* grad_norm_;
  prometheus::Gauge* eval_loss_;  // NaN until the first evaluation; kept after it
  prometheus::Counter* steps_;
  prometheus::Counter* skipped_steps_;
  prometheus::Counter* tokens_;
  std::array<prometheus::Gauge*, 7> jobs_{};
  prometheus::Counter* process_cpu_;
  prometheus::Gauge* process_cpu_utilization_;
  prometheus::Gauge* process_rss_;
  prometheus::Gauge* host_cpu_utilization_;
  prometheus::Gauge* host_memory_total_;
  prometheus::Gauge* host_memory_available_;

  absl::Mutex mu_;
  std::map<int, GpuSeries> gpus_ ABSL_GUARDED_BY(mu_);
  std::vector<PcieCalibration> calibration_ ABSL_GUARDED_BY(mu_);
  // resource -> its slidedp_bottleneck series (1 for the current bottleneck, else 0).
  std::map<std::string, prometheus::Gauge*> bottlenecks_ ABSL_GUARDED_BY(mu_);
  double last_cpu_seconds_ ABSL_GUARDED_BY(mu_) = 0.0;
  absl::Time last_cpu_sample_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double last_host_busy_ ABSL_GUARDED_BY(mu_) = -1.0;  // < 0: no sample yet
  double last_host_total_ ABSL_GUARDED_BY(mu_) = 0.0;
};

}  // namespace slidedp::server
