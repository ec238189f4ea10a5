// Metrics: registration, per-step updates and text exposition. Thread-safe.
#include "server/metrics.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <thread>

#include "prometheus/text_serializer.h"
#include "server/proc_stats.h"

namespace slidedp::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

constexpr std::array<const char*, 7> kStateNames = {
    "", "QUEUED", "RUNNING", "PAUSED", "SUCCEEDED", "FAILED", "CANCELLED"};

// The resources a step-time model names as the bottleneck (StepStats::bottleneck):
// their slidedp_bottleneck series exist from the start, at 0; others appear when named.
constexpr std::array<const char*, 8> kBottlenecks = {"h2d",         "d2h",        "gpu",     "cpu_update",
                                                     "collective",  "host_memory", "network", "gpu_update"};

prometheus::Gauge* Gauge(prometheus::Registry& r, const char* name, const char* help,
                         const prometheus::Labels& labels = {}) {
  return &BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Counter* Counter(prometheus::Registry& r, const char* name, const char* help,
                             const prometheus::Labels& labels = {}) {
  return &BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

}  // namespace

Metrics::Metrics(const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  step_duration_ =
      &BuildHistogram()
           .Name("slidedp_step_duration_seconds")
           .Help("Wall time of one optimizer step")
           .Register(r)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                            2.5, 5, 10, 25, 60, 120, 300});
  last_step_duration_ = Gauge(r, "slidedp_last_step_duration_seconds", "Wall time of the last step");
  predicted_step_duration_ =
      Gauge(r, "slidedp_predicted_step_duration_seconds",
            "The step-time model's prediction for the last step (0: no prediction)");
  last_step_timestamp_ = Gauge(r, "slidedp_last_step_timestamp_seconds",
                               "Unix time at which the last step completed (0: none yet)");
  workers_ = Gauge(r, "slidedp_workers", "Data-parallel workers of the running or last job");
  hosts_ = Gauge(r, "slidedp_hosts", "Hosts of the running or last job (hosts.count; 1: this host alone)");
  host_rank_ = Gauge(r, "slidedp_host_rank", "This host's rank in the running or last job (hosts.rank)");
  resident_units_ = Gauge(r, "slidedp_resident_units",
                          "Units of the running job whose training state lives on its GPUs (policy.resident_units)");
  resident_bytes_ = Gauge(r, "slidedp_resident_bytes", "GPU bytes of those units on the GPU holding most");
  bottleneck_ = &BuildGauge()
                     .Name("slidedp_bottleneck")
                     .Help("1 for the resource the step-time model names as the bottleneck of "
                           "the last step, 0 for the others")
                     .Register(r);
  tokens_per_second_ = Gauge(r, "slidedp_tokens_per_second", "Training tokens per second of the last step");
  mfu_ = Gauge(r, "slidedp_mfu_ratio",
               "Model FLOPs utilization of the last step: 6 * parameters * tokens/s over the "
               "workers' peak FLOP/s");
  pcie_bytes_ = &BuildCounter()
                     .Name("slidedp_pcie_bytes_total")
                     .Help("Bytes moved over PCIe per GPU and direction (h2d: parameters, d2h: gradients)")
                     .Register(r);
  pcie_busy_ = &BuildCounter()
                    .Name("slidedp_pcie_busy_seconds_total")
                    .Help("Time the copy stream of a GPU and direction was busy (0 where not measured)")
                    .Register(r);
  pcie_bandwidth_ = &BuildGauge()
                         .Name("slidedp_pcie_bandwidth_bytes_per_second")
                         .Help("PCIe bytes of the last step per GPU and direction over its wall time")
                         .Register(r);
  pcie_calibrated_ = &BuildGauge()
                          .Name("slidedp_calibrated_pcie_bytes_per_second")
                          .Help("Calibrated copy rate per GPU and direction (0: not calibrated)")
                          .Register(r);
  gpu_memory_allocated_ = &BuildGauge()
                               .Name("slidedp_gpu_memory_allocated_bytes")
                               .Help("Device memory held by the engine at the end of the last step")
                               .Register(r);
  gpu_memory_peak_ = &BuildGauge()
                          .Name("slidedp_gpu_memory_peak_bytes")
                          .Help("Peak device memory during the last step")
                          .Register(r);
  gpu_memory_reserved_peak_ = &BuildGauge()
                                   .Name("slidedp_gpu_memory_reserved_peak_bytes")
                                   .Help("Peak device memory the caching allocator held during the last step "
                                         "(tensors plus cached and fragmented blocks)")
                                   .Register(r);
  gpu_memory_total_ = &BuildGauge()
                           .Name("slidedp_gpu_memory_total_bytes")
                           .Help("Device memory capacity (0 on the cpu device)")
                           .Register(r);
  update_busy_ = Counter(r, "slidedp_cpu_update_busy_seconds_total", "CPU AdamW busy time");
  stall_update_wait_ =
      Counter(r, "slidedp_stall_seconds_total", "Pipeline stall time by cause",
              {{"cause", "update_wait"}});
  auto& phases = BuildGauge()
                     .Name("slidedp_step_phase_seconds")
                     .Help("Parts of the last step, summed over workers")
                     .Register(r);
  phase_forward_ = &phases.Add({{"phase", "forward"}});
  phase_backward_ = &phases.Add({{"phase", "backward"}});
  phase_update_wait_ = &phases.Add({{"phase", "update_wait"}});
  phase_update_busy_ = &phases.Add({{"phase", "update_busy"}});
  loss_ = Gauge(r, "slidedp_loss", "Mean token loss of the last step");
  lr_ = Gauge(r, "slidedp_learning_rate", "Learning rate applied by the last step");
  grad_norm_ = Gauge(r, "slidedp_grad_norm", "Global gradient L2 norm of the last step, before clipping");
  eval_loss_ = Gauge(r, "slidedp_eval_loss",
                     "Mean held-out loss over the eval tokens of the latest evaluation (NaN before the first)");
  eval_loss_->Set(std::numeric_limits<double>::quiet_NaN());
  steps_ = Counter(r, "slidedp_steps_total", "Optimizer steps completed");
  skipped_steps_ = Counter(r, "slidedp_skipped_steps_total", "Steps skipped for a non-finite loss or gradient");
  tokens_ = Counter(r, "slidedp_tokens_total", "Training tokens processed");
  auto& jobs = BuildGauge().Name("slidedp_jobs").Help("Jobs by state").Register(r);
  for (size_t i = 1; i < kStateNames.size(); ++i) jobs_[i] = &jobs.Add({{"state", kStateNames[i]}});
  process_cpu_ = Counter(r, "slidedp_process_cpu_seconds_total", "User and system CPU time of the daemon");
  process_cpu_utilization_ =
      Gauge(r, "slidedp_process_cpu_utilization_ratio",
            "CPU time of the daemon since the previous scrape over wall time times cores (0..1)");
  process_rss_ = Gauge(r, "slidedp_process_resident_memory_bytes", "Resident memory of the daemon");
  host_cpu_utilization_ =
      Gauge(r, "slidedp_host_cpu_utilization_ratio",
            "Busy CPU time of the whole host since the previous scrape over its total (0..1)");
  host_memory_total_ = Gauge(r, "slidedp_host_memory_total_bytes", "MemTotal of /proc/meminfo");
  host_memory_available_ =
      Gauge(r, "slidedp_host_memory_available_bytes", "MemAvailable of /proc/meminfo");
  Gauge(r, "slidedp_build_info", "Daemon version", {{"version", version}})->Set(1);
  // GPU 0 and the known bottlenecks exist before the first job, so that dashboards and
  // alerts see 0 rather than no data.
  absl::MutexLock lock(&mu_);
  Gpu(0);
  for (const char* resource : kBottlenecks) bottlenecks_[resource] = &bottleneck_->Add({{"resource", resource}});
}

Metrics::GpuSeries& Metrics::Gpu(int gpu) {
  auto it = gpus_.find(gpu);
  if (it != gpus_.end()) return it->second;
  const prometheus::Labels h2d = {{"gpu", std::to_string(gpu)}, {"direction", "h2d"}};
  const prometheus::Labels d2h = {{"gpu", std::to_string(gpu)}, {"direction", "d2h"}};
  const prometheus::Labels one = {{"gpu", std::to_string(gpu)}};
  GpuSeries series{&pcie_bytes_->Add(h2d),       &pcie_bytes_->Add(d2h),
                   &pcie_busy_->Add(h2d),        &pcie_busy_->Add(d2h),
                   &pcie_bandwidth_->Add(h2d),   &pcie_bandwidth_->Add(d2h),
                   &pcie_calibrated_->Add(h2d),  &pcie_calibrated_->Add(d2h),
                   &gpu_memory_allocated_->Add(one), &gpu_memory_peak_->Add(one),
                   &gpu_memory_reserved_peak_->Add(one), &gpu_memory_total_->Add(one)};
  return gpus_.emplace(gpu, series).first->second;
}

void Metrics::RecordGpus(const StepStats& s, const StepContext& context) {
  const int workers = std::max<int>({1, context.workers, static_cast<int>(s.workers.size())});
  const double per_second = s.step_seconds > 0 ? 1.0 / s.step_seconds : 0.0;
  for (int gpu = 0; gpu < workers; ++gpu) {
    GpuSeries& series = Gpu(gpu);
    double h2d = 0, d2h = 0;
    if (s.workers.empty()) {  // fallback: the totals, split evenly
      h2d = static_cast<double>(s.h2d_bytes) / workers;
      d2h = static_cast<double>(s.d2h_bytes) / workers;
    } else if (gpu < static_cast<int>(s.workers.size())) {
      const WorkerDeviceStats& w = s.workers[gpu];
      h2d = static_cast<double>(w.h2d_bytes);
      d2h = static_cast<double>(w.d2h_bytes);
      series.h2d_busy->Increment(std::max(0.0, w.h2d_busy_seconds));
      series.d2h_busy->Increment(std::max(0.0, w.d2h_busy_seconds));
      series.memory_allocated->Set(static_cast<double>(w.memory_allocated_bytes));
      series.memory_peak->Set(static_cast<double>(w.memory_peak_bytes));
      series.memory_reserved_peak->Set(static_cast<double>(w.memory_reserved_peak_bytes));
      series.memory_total->Set(static_cast<double>(w.memory_total_bytes));
    }
    series.h2d_bytes->Increment(h2d);
    series.d2h_bytes->Increment(d2h);
    series.h2d_bandwidth->Set(h2d * per_second);
    series.d2h_bandwidth->Set(d2h * per_second);
    const PcieCalibration calibration =
        gpu < static_cast<int>(calibration_.size()) ? calibration_[gpu] : PcieCalibration{};
    series.h2d_calibrated->Set(calibration.h2d_bytes_per_second);
    series.d2h_calibrated->Set(calibration.d2h_bytes_per_second);
  }
}

void Metrics::SetBottleneck(const std::string& resource) {
  if (!resource.empty() && bottlenecks_.find(resource) == bottlenecks_.end()) {
    bottlenecks_[resource] = &bottleneck_->Add({{"resource", resource}});
  }
  for (auto& [name, gauge] : bottlenecks_) gauge->Set(name == resource ? 1 : 0);
}

void Metrics::RecordStep(const StepStats& s, const StepContext& context) {
  step_duration_->Observe(s.step_seconds);
  last_step_duration_->Set(s.step_seconds);
  predicted_step_duration_->Set(s.predicted_step_seconds);
  last_step_timestamp_->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  workers_->Set(std::max(1, context.workers));
  hosts_->Set(std::max(1, context.hosts));
  host_rank_->Set(context.host_rank);
  tokens_per_second_->Set(s.tokens_per_second);
  if (context.peak_flops_per_worker > 0 && context.workers > 0) {
    mfu_->Set(6.0 * static_cast<double>(context.num_parameters) * s.tokens_per_second /
              (context.peak_flops_per_worker * context.workers * std::max(1, context.hosts)));
  }
  {
    absl::MutexLock lock(&mu_);
    RecordGpus(s, context);
    SetBottleneck(s.bottleneck);
  }
  update_busy_->Increment(s.update_busy_seconds);
  stall_update_wait_->Increment(s.update_wait_seconds);
  phase_forward_->Set(s.forward_seconds);
  phase_backward_->Set(s.backward_seconds);
  phase_update_wait_->Set(s.update_wait_seconds);
  phase_update_busy_->Set(s.update_busy_seconds);
  loss_->Set(s.loss);
  lr_->Set(s.lr);
  grad_norm_->Set(s.grad_norm);
  if (s.eval_loss.has_value()) eval_loss_->Set(*s.eval_loss);
  steps_->Increment();
  if (s.skipped) skipped_steps_->Increment();
  tokens_->Increment(static_cast<double>(s.tokens));
}

void Metrics::SetResidency(int64_t units, int64_t bytes) {
  resident_units_->Set(static_cast<double>(units));
  resident_bytes_->Set(static_cast<double>(bytes));
}

void Metrics::ClearRates() {
  resident_units_->Set(0);
  resident_bytes_->Set(0);
  tokens_per_second_->Set(0);
  mfu_->Set(0);
  predicted_step_duration_->Set(0);
  absl::MutexLock lock(&mu_);
  SetBottleneck("");
  for (auto& [gpu, series] : gpus_) {
    series.h2d_bandwidth->Set(0);
    series.d2h_bandwidth->Set(0);
    series.memory_allocated->Set(0);
    series.memory_peak->Set(0);
    series.memory_reserved_peak->Set(0);
  }
}

void Metrics::SetCalibration(std::vector<PcieCalibration> per_gpu) {
  absl::MutexLock lock(&mu_);
  calibration_ = std::move(per_gpu);
  for (size_t gpu = 0; gpu < calibration_.size(); ++gpu) {
    GpuSeries& series = Gpu(static_cast<int>(gpu));
    series.h2d_calibrated->Set(calibration_[gpu].h2d_bytes_per_second);
    series.d2h_calibrated->Set(calibration_[gpu].d2h_bytes_per_second);
  }
}

void Metrics::SetJobCounts(const JobStateCounts& counts) {
  for (size_t i = 1; i < counts.size(); ++i) jobs_[i]->Set(static_cast<double>(counts[i]));
}

void Metrics::RefreshProcess() {
  absl::StatusOr<int64_t> rss = ProcessResidentBytes();
  if (rss.ok()) process_rss_->Set(static_cast<double>(*rss));
  absl::StatusOr<HostMemory> memory = ReadHostMemory();
  if (memory.ok()) {
    host_memory_total_->Set(static_cast<double>(memory->total_bytes));
    host_memory_available_->Set(static_cast<double>(memory->available_bytes));
  }
  if (absl::StatusOr<HostCpuTimes> host = ReadHostCpuTimes(); host.ok()) {
    absl::MutexLock lock(&mu_);
    const double total = host->total_seconds - last_host_total_;
    if (last_host_busy_ >= 0 && total > 0) {
      host_cpu_utilization_->Set(std::clamp((host->busy_seconds - last_host_busy_) / total, 0.0, 1.0));
    }
    last_host_busy_ = host->busy_seconds;
    last_host_total_ = host->total_seconds;
  }
  absl::StatusOr<double> cpu = ProcessCpuSeconds();
  if (!cpu.ok()) return;
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  const double delta = *cpu - last_cpu_seconds_;
  if (delta > 0) process_cpu_->Increment(delta);
  if (last_cpu_sample_ != absl::InfinitePast()) {
    const double wall = absl::ToDoubleSeconds(now - last_cpu_sample_);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (wall > 0) process_cpu_utilization_->Set(std::max(0.0, delta) / (wall * cores));
  }
  last_cpu_seconds_ = std::max(last_cpu_seconds_, *cpu);
  last_cpu_sample_ = now;
}

std::string Metrics::Scrape() {
  RefreshProcess();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace slidedp::server
