// plan_bench: the proof of the step-time model and the policy (RESULTS.md). For one
// model shape and global batch it calibrates, prints the policy's plan and its
// prediction, then sweeps the knobs (micro-batch size, prefetch depth, activation
// placement; the routes with several workers), running each plan that fits the memory
// budget for a few steps with the real engine (one host state, Trainer::UsePlan), and
// prints predicted against measured step time per plan (the mean of the steps after a
// plan's first), then the policy's choice against the best measured plan.
// Usage: plan_bench [--model=qwen2.5-3b] [--device=cuda] [--workers=1] [--seq_len=4096]
//                   [--batch=4] [--steps=3] [--no_clip=1] [--loss_chunk=4096]
//                   [--prefetch=1,2,3] [--activations=device,host] [--budget_gib=0]
//                   [--max_configs=0]
// On this machine: plan_bench --device=cpu --model=tiny --seq_len=32 --batch=4 (seconds).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/engine/calibration.h"
#include "runtime/engine/trainer.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "tests/bench/bench_flags.h"

namespace slidedp {
namespace {

struct Measured {
  bool ok = false;
  double step_seconds = 0.0;  // mean of the steps after the first
  double gpu_peak_gib = 0.0;
  std::string error;
};

// `steps` steps of `trainer` with the plan it has now.
Measured Run(Trainer& trainer, int steps) {
  Measured m;
  double sum = 0;
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepStats> st = trainer.Step();
    if (!st.ok()) {
      m.error = std::string(st.status().message());
      return m;
    }
    if (s > 0) sum += st->step_seconds;
    for (const WorkerDeviceStats& w : st->workers) {
      m.gpu_peak_gib = std::max(m.gpu_peak_gib, w.memory_peak_bytes / double(int64_t{1} << 30));
    }
  }
  m.ok = true;
  m.step_seconds = sum / std::max(1, steps - 1);
  return m;
}

int Main(int argc, char** argv) {
  TrainConfig c = BenchConfig(argc, argv);
  const int64_t batch = std::stoll(Flag(argc, argv, "batch", "4"));
  const int steps = std::max(2, std::stoi(Flag(argc, argv, "steps", "3")));
  c.micro_batch_size = std::max<int64_t>(1, batch / c.workers);
  c.grad_accum = 1;
  c.steps = 1000;
  if (Flag(argc, argv, "no_clip", "0") != "0") c.optimizer.max_grad_norm = 0;
  c.policy.loss_chunk_tokens = std::stoll(Flag(argc, argv, "loss_chunk", "4096"));
  const int max_configs = std::stoi(Flag(argc, argv, "max_configs", "0"));
  const double budget_gib = std::stod(Flag(argc, argv, "budget_gib", "0"));
  c.policy.gpu_memory_budget_bytes = static_cast<int64_t>(budget_gib * (int64_t{1} << 30));
  SearchSpace space;
  space.prefetch_depths.clear();
  for (absl::string_view d : absl::StrSplit(Flag(argc, argv, "prefetch", "1,2,3"), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(d, &v)) space.prefetch_depths.push_back(v);
  }
  space.activations.clear();
  for (absl::string_view a : absl::StrSplit(Flag(argc, argv, "activations", "device,host"), ',')) {
    const std::optional<ActivationPlacement> placement = EnumFromName<ActivationPlacement>(std::string(a));
    if (!placement) {
      std::fprintf(stderr, "plan_bench: --activations: '%s' is not one of %s\n", std::string(a).c_str(),
                   EnumNameList<ActivationPlacement>().c_str());
      return 2;
    }
    space.activations.push_back(*placement);
  }

  absl::StatusOr<ModelConfig> model = PresetConfig(c.model);
  if (!model.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Calibration> cal = Calibrate(*model, c);
  if (!cal.ok()) {
    std::fprintf(stderr, "plan_bench: calibration: %s\n", std::string(cal.status().message()).c_str());
    return 1;
  }
  const ModelShape shape = ShapeOf(*model);
  const JobShape job = JobShapeOf(c);
  const int64_t budget = MemoryBudget(c.policy.gpu_memory_budget_bytes, cal->device_free_bytes);
  std::printf("model %s, %s x%d, %lld x %lld tokens a step, clip %s | calibration %.2f s\n", c.model.c_str(),
              NameOf(c.device), c.workers, static_cast<long long>(batch), static_cast<long long>(c.seq_len),
              job.clip ? "on" : "off", cal->seconds);
  for (const std::string& n : cal->notes) std::printf("  %s\n", n.c_str());
  absl::StatusOr<PlanChoice> choice = ChoosePlan(shape, job, KnobsOf(c), cal->rates, budget, space);
  if (!choice.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", std::string(choice.status().message()).c_str());
    return 1;
  }
  const std::string chosen = DescribeKnobs(choice->knobs);
  std::printf("policy: %s | predicted %.3f s, bottleneck %s, GPU memory %.2f GiB (budget %s)\n", chosen.c_str(),
              choice->prediction.step_seconds, choice->prediction.bottleneck.c_str(),
              choice->prediction.memory.total / double(int64_t{1} << 30),
              budget > 0 ? absl::StrFormat("%.1f GiB", budget / double(int64_t{1} << 30)).c_str() : "none");

  std::printf("\n| plan | fits | predicted s | measured s | error | bottleneck | GPU memory predicted / peak GiB |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  double best = 1e30, policy_measured = 0, worst_error = 0;
  std::unique_ptr<Trainer> trainer;
  std::string best_plan;
  int run = 0;
  for (const Candidate& cand : choice->candidates) {
    const std::string name = DescribeKnobs(cand.knobs);
    const double mem = cand.prediction.memory.total / double(int64_t{1} << 30);
    if (!cand.fits || (max_configs > 0 && run >= max_configs && name != chosen)) {
      std::printf("| %s | %s | %.3f | - | - | %s | %.1f / - |\n", name.c_str(), cand.fits ? "yes" : "no",
                  cand.prediction.step_seconds, cand.prediction.bottleneck.c_str(), mem);
      continue;
    }
    ++run;
    // One host state for the whole sweep (a 7B state takes a minute to set up); a
    // fresh one only after a failed step.
    if (trainer == nullptr) {
      absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
      if (!t.ok()) {
        std::fprintf(stderr, "plan_bench: %s\n", std::string(t.status().message()).c_str());
        return 1;
      }
      trainer = *std::move(t);
    }
    Measured m;
    if (absl::Status s = trainer->UsePlan(cand.knobs); !s.ok()) {
      m.error = std::string(s.message());
    } else {
      m = Run(*trainer, steps);
    }
    if (!m.ok) {
      trainer.reset();
      std::printf("| %s | yes | %.3f | failed: %s | - | %s | %.1f / - |\n", name.c_str(), cand.prediction.step_seconds,
                  m.error.c_str(), cand.prediction.bottleneck.c_str(), mem);
      continue;
    }
    const double err = cand.prediction.step_seconds / m.step_seconds - 1;
    worst_error = std::max(worst_error, std::abs(err));
    std::printf("| %s%s | yes | %.3f | %.3f | %+.1f%% | %s | %.1f / %.1f |\n", name.c_str(), name == chosen ? " (policy)" : "",
                cand.prediction.step_seconds, m.step_seconds, 100 * err, cand.prediction.bottleneck.c_str(), mem,
                m.gpu_peak_gib);
    std::fflush(stdout);
    if (m.step_seconds < best) {
      best = m.step_seconds;
      best_plan = name;
    }
    if (name == chosen) policy_measured = m.step_seconds;
  }
  std::printf("\npolicy's plan measured %.3f s; best measured %.3f s (%s): policy at %+.1f%% of best; "
              "largest |predicted/measured - 1| %.1f%%\n",
              policy_measured, best, best_plan.c_str(), 100 * (policy_measured / best - 1), 100 * worst_error);
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
