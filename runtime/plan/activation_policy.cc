// ActivationPolicy: see activation_policy.h.
#include "runtime/plan/activation_policy.h"

#include <algorithm>

#include "runtime/model/tiled_mlp.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"

namespace slidedp {

ActivationPlan ChooseActivations(const TrainConfig& config, const ModelConfig& model, int64_t element_bytes,
                                 int64_t device_memory, int64_t device_available) {
  const int64_t budget = config.policy.gpu_memory_budget_bytes;
  const int64_t usable = budget > 0 && device_memory > 0 ? std::min(budget, device_memory) : device_memory;
  ActivationPlan plan;
  plan.mlp_tile =
      ChooseMlpTile(config.policy, config.micro_batch_size, config.seq_len, model.intermediate_size, element_bytes);
  PlanKnobs knobs = KnobsOf(config);
  JobShape job = JobShapeOf(config);
  job.param_bytes = static_cast<int>(element_bytes);
  const ModelShape shape = ShapeOf(model);
  if (config.policy.activations == ActivationPlacement::kAuto) {
    const int64_t kept = model.num_layers * config.grad_accum * config.micro_batch_size * config.seq_len *
                         model.hidden_size * element_bytes;
    plan.offload_inputs = usable > 0 && kept > usable / 10 * 4;
    if (!plan.offload_inputs && budget > 0 && device_memory > 0) {
      // Under a job's budget, the least plan with the inputs on the GPU (nothing
      // resident, no kept graph) must fit it by the step model's estimate; when it does
      // not, they wait in host memory. (Not against the device's own memory: the
      // estimate runs high at long sequences, 188 GB predicted for 7.62B at 256K where
      // 86 GiB was measured, and a job without a budget keeps the 40% rule.)
      PlanKnobs least = knobs;
      least.policy.activations = ActivationPlacement::kDevice;
      least.policy.resident_units = 0;
      least.policy.kept_blocks = 0;
      plan.offload_inputs = EstimateMemory(shape, job, least).total > usable;
    }
  } else {
    plan.offload_inputs = config.policy.activations == ActivationPlacement::kHost;
  }
  knobs.policy.activations = plan.offload_inputs ? ActivationPlacement::kHost : ActivationPlacement::kDevice;
  const int64_t memory =
      MemoryBudget(config.policy.gpu_memory_budget_bytes, device_available > 0 ? device_available : device_memory);
  plan.resident_units = ResidentUnits(shape, job, knobs, memory);
  knobs.policy.resident_units = plan.resident_units;
  plan.kept_blocks = KeptBlocks(shape, job, knobs, memory);
  return plan;
}

int64_t ChooseMlpTile(const PolicyConfig& policy, int64_t rows, int64_t seq_len, int64_t ffn,
                      int64_t element_bytes) {
  if (policy.mlp_tile_tokens > 0) return policy.mlp_tile_tokens;
  int64_t tile_budget = int64_t{1} << 30;
  if (policy.gpu_memory_budget_bytes > 0) tile_budget = std::min(tile_budget, policy.gpu_memory_budget_bytes / 32);
  return AutoMlpTile(rows, seq_len, ffn, element_bytes, tile_budget);
}

}  // namespace slidedp
