// Worker: one data-parallel worker (one GPU, or one CPU thread on the CPU device). Its
// RunStep is the step of DESIGN.md for this worker, top to bottom: layer-major forward
// keeping layer inputs, the loss in sequence chunks, backward with recompute, each
// unit's gradient reduced into the host state as soon as it is complete.
// Threads: RunStep runs on the worker's own thread; the routes meet the other workers.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "runtime/engine/routes.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/model/transformer.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config.h"

namespace slidedp {

// This worker's share of a step: grad_accum micro-batches of [micro_batch_size, seq_len]
// int64 token ids and targets.
struct WorkerBatch {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
};

struct WorkerStepResult {
  double loss_sum = 0.0;  // sum of token losses, already divided by the global token count
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double wait_seconds = 0.0;  // waiting for the previous step's updates
  TransferCounters transfers;
};

class Worker {
 public:
  // All pointers must outlive the worker.
  Worker(int rank, const TrainConfig& config, HostState* state, UpdatePipeline* pipeline,
         RouteShared* shared, const at::Device& device);

  // Runs this worker's part of step `step` (0-based). `inv_tokens` is 1 / the number of
  // target tokens in the whole global batch, so that the gradients summed over workers
  // are those of the global mean loss.
  WorkerStepResult RunStep(int64_t step, const WorkerBatch& batch, double inv_tokens);

 private:
  at::Tensor Fetch(int u, int64_t step, WorkerStepResult& r);
  at::Tensor HeadBackward(const at::Tensor& hidden, const at::Tensor& targets, const at::Tensor& head,
                          const at::Tensor& table, double inv_tokens, at::Tensor& loss_acc);
  void Reduce(int u, int64_t step, const at::Tensor& grad, WorkerStepResult& r);

  const int rank_;
  const TrainConfig& config_;
  HostState* const state_;
  UpdatePipeline* const pipeline_;
  RouteShared* const shared_;
  const at::Device device_;
  const ParamRoute param_route_;
  const GradRoute grad_route_;
  RopeTables rope_;
};

}  // namespace slidedp
