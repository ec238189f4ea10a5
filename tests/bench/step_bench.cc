// step_bench: training-step throughput of the engine on a preset shape, the program
// behind the step-time figures of tests/bench/RESULTS.md.
// Usage: step_bench [--model=qwen2.5-3b] [--device=cuda] [--workers=1] [--seq_len=4096]
//                   [--micro_batch_size=1] [--grad_accum=4] [--steps=4] [--loss_chunk=4096]
//                   [--prefetch=1] [--grad_landing=auto] [--activations=auto|device|host] [--mlp_tile=0] [--kept_blocks=-1] [--no_clip=1] [--grad_route=..] [--param_route=..] [--trace=FILE]
//                   [--resident_units=-1] [--staged_updates=0] [--gpu_memory_budget=0]
//                   [--nnodes=1 --node_rank=0 --master_addr=127.0.0.1 --master_port=29500: one host of a job
//                    over several (issue 24); the batch flags are this host's]
//                   [--routes=PARAM/GRAD,...: each pair in turn over one host state]
//                   [--sweep=FIELD:V1,V2,...: each value of FIELD (resident_units, kept_blocks, staged_updates,
//                    gpu_memory_budget_bytes, micro_batch_size: the same sequences a step) in
//                    turn over one host state, in one process]
// Prints every step, then the mean of the steps after the first (with --steps=1, of the
// first, warm-up included, for runs too long to repeat): s/step, tokens/s,
// model FLOPs utilization (6 x params x tokens + attention, over 790 TFLOP/s a GPU), PCIe
// bytes per step against the minimum (2 bytes a parameter each way), peak RSS.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/engine/trainer.h"
#include "runtime/plan/job_knobs.h"
#include "tests/bench/bench_flags.h"

namespace slidedp {
namespace {

double PeakRssGiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);
  }
  return 0;
}

int Main(int argc, char** argv) {
  TrainConfig c = BenchConfig(argc, argv);
  c.micro_batch_size = std::stoll(Flag(argc, argv, "micro_batch_size", "1"));
  c.grad_accum = std::stoll(Flag(argc, argv, "grad_accum", "4"));
  c.steps = std::stoll(Flag(argc, argv, "steps", "4"));
  c.policy.loss_chunk_tokens = std::stoll(Flag(argc, argv, "loss_chunk", "4096"));
  c.policy.prefetch_depth = std::stoi(Flag(argc, argv, "prefetch", "1"));
  c.policy.grad_landing = EnumFlag<GradLanding>(argc, argv, "grad_landing", "auto");
  c.policy.activations = EnumFlag<ActivationPlacement>(argc, argv, "activations", "auto");
  c.policy.mlp_tile_tokens = std::stoll(Flag(argc, argv, "mlp_tile", "0"));
  c.policy.kept_blocks = std::stoll(Flag(argc, argv, "kept_blocks", "-1"));
  c.policy.resident_units = std::stoll(Flag(argc, argv, "resident_units", "-1"));
  c.policy.staged_updates = std::stoll(Flag(argc, argv, "staged_updates", "0"));
  c.policy.gpu_memory_budget_bytes = static_cast<int64_t>(std::stod(Flag(argc, argv, "gpu_memory_budget", "0")));
  c.hosts.count = std::stoi(Flag(argc, argv, "nnodes", "1"));
  c.hosts.rank = std::stoi(Flag(argc, argv, "node_rank", "0"));
  c.hosts.address = Flag(argc, argv, "master_addr", "127.0.0.1");
  c.hosts.port = std::stoi(Flag(argc, argv, "master_port", "29500"));
  c.policy.grad_route = EnumFlag<GradRoute>(argc, argv, "grad_route", "gather_host");
  c.policy.param_route = EnumFlag<ParamRoute>(argc, argv, "param_route", "replicate");
  c.trace_file = Flag(argc, argv, "trace", "");
  if (Flag(argc, argv, "no_clip", "0") != "0") c.optimizer.max_grad_norm = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto trainer = Trainer::Create(c);
  if (!trainer.ok()) {
    std::fprintf(stderr, "step_bench: %s\n", std::string(trainer.status().message()).c_str());
    return 1;
  }
  const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& m = (*trainer)->model_config();
  const double params = static_cast<double>((*trainer)->num_parameters());
  std::printf("model %s: %.3fB params, %lld layers | %s x%d | %lld sequences x %lld tokens a step | setup %.1f s | "
              "%lld blocks kept, %lld units resident\n",
              c.model.c_str(), params / 1e9, static_cast<long long>(m.num_layers), NameOf(c.device), c.workers,
              static_cast<long long>(c.global_batch_sequences()), static_cast<long long>(c.seq_len), setup,
              static_cast<long long>((*trainer)->Plan().knobs.policy.kept_blocks),
              static_cast<long long>((*trainer)->Plan().knobs.policy.resident_units));
  // The step loop and its summary for the plan the trainer has now.
  auto run = [&](const std::string& label) -> bool {
    double sum_t = 0, sum_tok = 0, sum_predicted = 0;
    int64_t h2d = 0, d2h = 0, gpu_peak = 0, gpu_reserved = 0;
    for (int64_t s = 0; s < c.steps; ++s) {
      auto st = (*trainer)->Step();
      if (!st.ok()) {
        std::fprintf(stderr, "step_bench: %sstep %lld: %s\n", label.c_str(), static_cast<long long>(s + 1),
                     std::string(st.status().message()).c_str());
        return false;
      }
      std::printf("%sstep %lld | loss %.4f | %.3f s (predicted %.3f) | %.0f tok/s | fwd %.3f bwd %.3f wait %.3f upd %.3f s | h2d %.2f GB d2h %.2f GB | to hosts %.2f GB\n",
                  label.c_str(), static_cast<long long>(st->step), st->loss, st->step_seconds,
                  st->predicted_step_seconds, st->tokens_per_second,
                  st->forward_seconds, st->backward_seconds, st->update_wait_seconds, st->update_busy_seconds,
                  st->h2d_bytes / 1e9, st->d2h_bytes / 1e9, st->host_bytes_sent / 1e9);
      std::fflush(stdout);
      if (s > 0 || c.steps == 1) {
        sum_t += st->step_seconds;
        sum_predicted += st->predicted_step_seconds;
        sum_tok += static_cast<double>(st->tokens);
        h2d = st->h2d_bytes;
        d2h = st->d2h_bytes;
      }
      for (size_t w = 0; w < st->workers.size(); ++w) {
        gpu_peak = std::max(gpu_peak, st->workers[w].memory_peak_bytes);
        gpu_reserved = std::max(gpu_reserved, st->workers[w].memory_reserved_peak_bytes);
      }
    }
    const double n = static_cast<double>(std::max<int64_t>(1, c.steps - 1)), t = sum_t / n, tok = sum_tok / n;
    // Attention: 12 x layers x hidden(q) x seq per token (fwd+bwd, causal halves 4x), as in MFU papers.
    const double attn = 6.0 * m.num_layers * m.num_heads * m.head_dim * c.seq_len * tok;
    const double flops = 6.0 * params * tok + attn;
    // The GPU's memory: tensors' peak, what the caching allocator held at its peak, and
    // what the plan's memory estimate predicted (runtime/plan/memory_estimate.h; the
    // configured budget is in the label).
    const double predicted_memory = (*trainer)->Plan().prediction.memory.total;
    std::printf("%smean of %d step%s: %.3f s/step (predicted %.3f) | %.0f tokens/s | MFU %.1f%% | PCIe h2d %.2f GB d2h %.2f GB per step (minimum %.2f each) | peak RSS %.1f GiB | GPU peak %.1f GiB (reserved %.1f, predicted %.1f)\n",
                label.c_str(), static_cast<int>(n), c.steps == 1 ? " (the first)" : "s", t, sum_predicted / n, tok / t,
                100.0 * flops / t / (790e12 * c.workers), h2d / 1e9, d2h / 1e9, 2.0 * params / 1e9, PeakRssGiB(),
                gpu_peak / double(1 << 30), gpu_reserved / double(1 << 30),
                predicted_memory / double(1 << 30));
    std::fflush(stdout);
    return true;
  };
  // The plan the trainer runs with now, for the labels of a sweep.
  auto plan_label = [&]() {
    const PlanKnobs& k = (*trainer)->Plan().knobs;
    return absl::StrFormat("%d x %d micro-batches | resident %d kept %d staged %d budget %.0f GB | ",
                           k.micro_batch_size, k.grad_accum, k.policy.resident_units, k.policy.kept_blocks,
                           k.policy.staged_updates, k.policy.gpu_memory_budget_bytes / 1e9);
  };
  const std::string sweep = Flag(argc, argv, "sweep", "");
  if (!sweep.empty()) {
    // --sweep=FIELD:V1,V2,...: each value in turn over the same host state (Trainer::UsePlan).
    const std::vector<std::string> fv = absl::StrSplit(sweep, absl::MaxSplits(':', 1));
    const std::string field = fv[0];
    if (fv.size() != 2 || (field != "resident_units" && field != "kept_blocks" && field != "gpu_memory_budget_bytes" &&
                           field != "micro_batch_size" && field != "staged_updates")) {
      std::fprintf(stderr,
                   "step_bench: --sweep wants resident_units|kept_blocks|staged_updates|gpu_memory_budget_bytes|micro_batch_size:V1,V2,..., "
                   "got \"%s\"\n",
                   sweep.c_str());
      return 2;
    }
    for (absl::string_view value : absl::StrSplit(fv[1], ',')) {
      PlanKnobs k = KnobsOf(c);
      const int64_t v = static_cast<int64_t>(std::stod(std::string(value)));
      if (field == "resident_units") k.policy.resident_units = v;
      if (field == "kept_blocks") k.policy.kept_blocks = v;
      if (field == "staged_updates") k.policy.staged_updates = v;
      if (field == "gpu_memory_budget_bytes") k.policy.gpu_memory_budget_bytes = v;
      if (field == "micro_batch_size") {  // the same sequences a step, in micro-batches of v
        const int64_t sequences = c.micro_batch_size * c.grad_accum;
        if (v < 1 || sequences % v != 0) {
          std::fprintf(stderr, "step_bench: micro_batch_size=%s does not divide the %lld sequences a step\n",
                       std::string(value).c_str(), static_cast<long long>(sequences));
          return 2;
        }
        k.micro_batch_size = v;
        k.grad_accum = sequences / v;
      }
      if (absl::Status st = (*trainer)->UsePlan(k); !st.ok()) {
        std::fprintf(stderr, "step_bench: %s=%s: %s\n", field.c_str(), std::string(value).c_str(),
                     std::string(st.message()).c_str());
        return 1;
      }
      if (!run(absl::StrCat(field, "=", value, " | ", plan_label()))) return 1;
    }
    return 0;
  }
  const std::string routes = Flag(argc, argv, "routes", "");
  if (routes.empty()) return run(plan_label()) ? 0 : 1;
  // --routes=PARAM/GRAD,...: each pair in turn over the same host state (Trainer::UsePlan).
  for (absl::string_view pair : absl::StrSplit(routes, ',')) {
    const std::vector<std::string> pr = absl::StrSplit(pair, '/');
    if (pr.size() != 2) {
      std::fprintf(stderr, "step_bench: --routes wants PARAM/GRAD pairs, got \"%s\"\n", std::string(pair).c_str());
      return 2;
    }
    const std::optional<ParamRoute> param_route = EnumFromName<ParamRoute>(pr[0]);
    const std::optional<GradRoute> grad_route = EnumFromName<GradRoute>(pr[1]);
    if (!param_route || !grad_route) {
      std::fprintf(stderr, "step_bench: --routes: \"%s\" is not PARAM/GRAD, of %s / %s\n", std::string(pair).c_str(),
                   EnumNameList<ParamRoute>().c_str(), EnumNameList<GradRoute>().c_str());
      return 2;
    }
    PlanKnobs k = KnobsOf(c);
    k.policy.param_route = *param_route;
    k.policy.grad_route = *grad_route;
    if (absl::Status st = (*trainer)->UsePlan(k); !st.ok()) {
      std::fprintf(stderr, "step_bench: %s: %s\n", std::string(pair).c_str(), std::string(st.message()).c_str());
      return 1;
    }
    if (!run(std::string(pair) + " | ")) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
