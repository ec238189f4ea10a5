// ActivationPolicy: where a step's layer inputs wait for backward, which units' training
// state is resident on a GPU, which blocks keep their whole graph instead of recomputing
// in backward, and how long the MLP's sequence tiles are, from the job's fields and the device's memory. The job's explicit
// choices win; "auto" decides against policy.gpu_memory_budget_bytes when set (capped by
// the device), else the device's memory. Pure function; called when a worker is built.
#pragma once

#include <cstdint>

#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

namespace slidedp {

struct ActivationPlan {
  bool offload_inputs = false;  // layer inputs in pinned host memory between forward and backward
  int64_t mlp_tile = 0;         // sequence positions per MLP tile (>= seq_len: whole)
  // The last `kept_blocks` decoder blocks keep their graph from forward to backward
  // (one micro-batch's at a time: they run micro-batch-major with the head; no
  // recompute, not offloaded); the others keep only their input.
  int64_t kept_blocks = 0;
  // The first `resident_units` units keep their training state on a GPU
  // (runtime/plan/residency.h places them).
  int64_t resident_units = 0;
};

// `element_bytes`: of the compute dtype. `device_memory`: the device's total bytes, 0 on
// the CPU device (which never offloads: its "device" memory is host memory).
//  - activations "auto": offload when one step's layer inputs (layers x sequences x
//    positions x hidden) would take more than 40% of the memory they may use, or, with
//    a budget, when the least plan keeping them on the GPU (nothing resident, no kept
//    graph) is predicted over it (memory_estimate.h's EstimateMemory).
//  - mlp_tile_tokens 0: AutoMlpTile with one intermediate under 1 GiB, and under 1/32 of
//    the budget when one is set.
//  - resident_units -1: step_model.h's ResidentUnits within MemoryBudget(budget,
//    device_available) with the placement chosen above and the default rates (none on
//    the CPU device).
//  - kept_blocks -1: memory_estimate.h's KeptBlocks within the same memory, with the
//    resident units chosen before (ResidentUnits chose the pair).
// `device_available`: what the process can still allocate there (0: as `device_memory`),
// the kept blocks' limit (another process on the GPU leaves less).
ActivationPlan ChooseActivations(const TrainConfig& config, const ModelConfig& model, int64_t element_bytes,
                                 int64_t device_memory, int64_t device_available = 0);

// The MLP tile alone, as ChooseActivations picks it for micro-batches of `rows`
// sequences (the step-time model, plan_shapes.cc's MlpTile, predicts with it too).
int64_t ChooseMlpTile(const PolicyConfig& policy, int64_t rows, int64_t seq_len, int64_t ffn,
                      int64_t element_bytes);

}  // namespace slidedp
