// hosts_plan_bench: predictions, not measurements, of a job over several hosts (issue
// 24): for each model shape, per-GPU batch and host count, the policy's plan (micro-batch
// fixed, the rest searched within one GPU's memory) with the step model's default rates
// (DefaultRates: the H200 host's on cuda) and the network's bandwidth, and its predicted
// step time, the job's tokens a second, the bottleneck and the busy time of the CPU
// update, the network, host memory and the GPU. One host has two rows: as the engine plans
// it (resident units auto) and with every unit streamed (policy.resident_units 0, as
// several hosts run by default: auto keeps none there); several hosts have those two
// too, streamed and with one host's resident units on every host (the count given,
// each host's replicas summing their gradients over the network); the speed-ups are
// the job's tokens a second over one host's two rows. Runs nothing on a device (no
// calibration).
// Usage: hosts_plan_bench [--models=qwen2.5-7b,qwen3-14b] [--device=cuda] [--workers=4]
//                         [--seq_len=4096] [--hosts=1,2,4] [--batches=1x1,4x4]
//                         [--cross_host_gbps=50] [--gpu_gib=139] [--no_clip=1]
// --batches: micro_batch_size x grad_accum per GPU; --gpu_gib: each GPU's free memory.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "tests/bench/bench_flags.h"

namespace slidedp {
namespace {

double Busy(const StepPrediction& p, const char* resource) {
  auto it = p.busy.find(resource);
  return it == p.busy.end() ? 0.0 : it->second;
}

int Main(int argc, char** argv) {
  const double gbps = std::stod(Flag(argc, argv, "cross_host_gbps", "50"));
  const double gpu_gib = std::stod(Flag(argc, argv, "gpu_gib", "139"));
  const int64_t budget = MemoryBudget(0, static_cast<int64_t>(gpu_gib * (int64_t{1} << 30)));
  std::vector<int> host_counts;
  for (absl::string_view h : absl::StrSplit(Flag(argc, argv, "hosts", "1,2,4"), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(h, &v) && v >= 1) host_counts.push_back(v);
  }
  std::printf(
      "| model | batch a GPU | hosts | plan | step s | tokens/s | vs 1 host | vs 1 host streamed | bottleneck | "
      "cpu_update s | network s | host_memory s | gpu s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (absl::string_view model : absl::StrSplit(Flag(argc, argv, "models", "qwen2.5-7b,qwen3-14b"), ',')) {
    TrainConfig c = BenchConfig(argc, argv);
    c.model = std::string(model);
    c.workers = std::stoi(Flag(argc, argv, "workers", "4"));
    if (Flag(argc, argv, "no_clip", "0") != "0") c.optimizer.max_grad_norm = 0;
    absl::StatusOr<ModelConfig> config = PresetConfig(c.model);
    if (!config.ok()) {
      std::fprintf(stderr, "hosts_plan_bench: %s\n", std::string(config.status().message()).c_str());
      return 1;
    }
    const ModelShape shape = ShapeOf(*config);
    for (absl::string_view batch : absl::StrSplit(Flag(argc, argv, "batches", "1x1,4x4"), ',')) {
      const std::vector<std::string> mb = absl::StrSplit(batch, 'x');
      c.micro_batch_size = std::stoll(mb.at(0));
      c.grad_accum = mb.size() > 1 ? std::stoll(mb[1]) : 1;
      double one_host = 0.0, one_streamed = 0.0;
      int64_t one_resident = 0;  // the units one host keeps resident (its auto plan)
      // hosts, and their resident units: -1 auto, 0 every unit streamed, kAsOneHost
      // one host's count.
      constexpr int64_t kAsOneHost = -2;
      std::vector<std::pair<int, int64_t>> rows;
      for (int hosts : host_counts) {
        rows.push_back({hosts, hosts > 1 ? 0 : -1});
        rows.push_back({hosts, hosts > 1 ? kAsOneHost : 0});
      }
      for (const auto& [hosts, asked] : rows) {
        const int64_t resident = asked == kAsOneHost ? one_resident : asked;
        if (asked == kAsOneHost && resident == 0) continue;  // the streamed row already
        const bool streamed = resident == 0;
        c.hosts.count = hosts;
        c.policy.resident_units = resident;
        c.hosts.address = "host0";
        const JobShape job = JobShapeOf(c);
        Rates rates = DefaultRates(shape, job);
        rates.cross_host_gbps = gbps;
        SearchSpace space;
        space.vary_micro_batch = false;
        absl::StatusOr<PlanChoice> choice = ChoosePlan(shape, job, KnobsOf(c), rates, budget, space);
        if (!choice.ok()) {
          std::printf("| %s | %s | %d | %s |\n", c.model.c_str(), std::string(batch).c_str(), hosts,
                      std::string(choice.status().message()).c_str());
          continue;
        }
        const StepPrediction& p = choice->prediction;
        const double tokens = static_cast<double>(c.job_batch_sequences() * c.seq_len);
        const double rate = tokens / p.step_seconds;
        if (hosts == 1) (streamed ? one_streamed : one_host) = rate;
        if (hosts == 1 && !streamed) one_resident = choice->knobs.policy.resident_units;
        auto ratio = [&](double base) { return base > 0 ? absl::StrFormat("%.2f", rate / base) : std::string("-"); };
        const std::string what =
            streamed ? (hosts == 1 ? " streamed" : "")
                     : absl::StrFormat(" (%d units resident)", choice->knobs.policy.resident_units);
        std::printf("| %s | %s | %d%s | %s | %.2f | %.0f | %s | %s | %s | %.2f | %.2f | %.2f | %.2f |\n",
                    c.model.c_str(), std::string(batch).c_str(), hosts, what.c_str(),
                    DescribeKnobs(choice->knobs).c_str(), p.step_seconds, rate, ratio(one_host).c_str(),
                    ratio(one_streamed).c_str(), p.bottleneck.c_str(), Busy(p, kResCpuUpdate),
                    Busy(p, kResNetwork), Busy(p, kResHostMemory), Busy(p, kResGpu));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
