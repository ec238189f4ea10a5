// Metrics: registration, per-step updates and text exposition. Thread-safe.
#include "server/metrics.h"

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
  tokens_per_second_ = Gauge(r, "slidedp_tokens_per_second", "Training tokens per second of the last step");
  mfu_ = Gauge(r, "slidedp_mfu_ratio",
               "Model FLOPs utilization of the last step: 6 * parameters * tokens/s over the "
               "workers' peak FLOP/s");
  pcie_bytes_ = &BuildCounter()
                     .Name("slidedp_pcie_bytes_total")
                     .Help("Bytes moved over PCIe per GPU and direction (h2d: parameters, d2h: gradients)")
                     .Register(r);
  pcie_bandwidth_ = &BuildGauge()
                         .Name("slidedp_pcie_bandwidth_bytes_per_second")
                         .Help("PCIe bytes of the last step per GPU and direction over its wall time")
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
  Gauge(r, "slidedp_build_info", "Daemon version", {{"version", version}})->Set(1);
}

Metrics::PcieSeries& Metrics::Pcie(int gpu) {
  auto it = pcie_.find(gpu);
  if (it != pcie_.end()) return it->second;
  const std::string label = std::to_string(gpu);
  PcieSeries series{&pcie_bytes_->Add({{"gpu", label}, {"direction", "h2d"}}),
                    &pcie_bytes_->Add({{"gpu", label}, {"direction", "d2h"}}),
                    &pcie_bandwidth_->Add({{"gpu", label}, {"direction", "h2d"}}),
                    &pcie_bandwidth_->Add({{"gpu", label}, {"direction", "d2h"}})};
  return pcie_.emplace(gpu, series).first->second;
}

void Metrics::RecordStep(const StepStats& s, const StepContext& context) {
  step_duration_->Observe(s.step_seconds);
  tokens_per_second_->Set(s.tokens_per_second);
  if (context.peak_flops_per_worker > 0 && context.workers > 0) {
    mfu_->Set(6.0 * static_cast<double>(context.num_parameters) * s.tokens_per_second /
              (context.peak_flops_per_worker * context.workers));
  }
  const int workers = context.workers > 0 ? context.workers : 1;
  const double h2d = static_cast<double>(s.h2d_bytes) / workers;
  const double d2h = static_cast<double>(s.d2h_bytes) / workers;
  {
    absl::MutexLock lock(&mu_);
    for (int gpu = 0; gpu < workers; ++gpu) {
      PcieSeries& series = Pcie(gpu);
      series.h2d_bytes->Increment(h2d);
      series.d2h_bytes->Increment(d2h);
      series.h2d_bandwidth->Set(s.step_seconds > 0 ? h2d / s.step_seconds : 0.0);
      series.d2h_bandwidth->Set(s.step_seconds > 0 ? d2h / s.step_seconds : 0.0);
    }
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
  steps_->Increment();
  if (s.skipped) skipped_steps_->Increment();
  tokens_->Increment(static_cast<double>(s.tokens));
}

void Metrics::ClearRates() {
  tokens_per_second_->Set(0);
  mfu_->Set(0);
  absl::MutexLock lock(&mu_);
  for (auto& [gpu, series] : pcie_) {
    series.h2d_bandwidth->Set(0);
    series.d2h_bandwidth->Set(0);
  }
}

void Metrics::SetJobCounts(const JobStateCounts& counts) {
  for (size_t i = 1; i < counts.size(); ++i) jobs_[i]->Set(static_cast<double>(counts[i]));
}

void Metrics::RefreshProcess() {
  absl::StatusOr<int64_t> rss = ProcessResidentBytes();
  if (rss.ok()) process_rss_->Set(static_cast<double>(*rss));
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
