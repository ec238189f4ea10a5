// Worker: one data-parallel worker (one GPU, or one CPU thread on the CPU device). Its
// RunStep is the step of DESIGN.md for this worker, top to bottom: layer-major forward
// keeping layer inputs up to the kept blocks (the last policy.kept_blocks blocks); then
// micro-batch-major through the kept blocks, the loss in sequence chunks and back
// through the kept blocks' graphs (step_schedule.h); then backward with recompute
// through the other blocks; each unit's gradient accumulated in fp32 on the device and
// sent down as soon as it is complete. Parameters stream through a ring of device slots, fetched `prefetch_depth`
// units ahead on the H2D stream while the compute stream works; gradients go down on
// the D2H stream and a landing thread hands them to the update pipeline. RunEval is a
// forward-only pass through the same stream, for held-out evaluation between steps.
// Threads: RunStep on the worker's own thread; the routes meet the other workers; the
// landing thread completes landings.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/device_streams.h"
#include "runtime/engine/routes.h"
#include "runtime/engine/serial_executor.h"
#include "runtime/engine/step_trace.h"
#include "runtime/io/stop_token.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/model/transformer.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/plan/step_schedule.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config.h"

namespace slidedp {

// This worker's share of a step: grad_accum micro-batches of [micro_batch_size, seq_len]
// int64 token ids and targets, on the CPU; with document masking also each token's
// position in its document (TokenBatch::positions), else `positions` is empty.
struct WorkerBatch {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  std::vector<at::Tensor> positions;
};

struct WorkerStepResult {
  // RunStep: the sum of token losses, already divided by the global token count.
  // RunEval: the plain sum of token losses.
  double loss_sum = 0.0;
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double wait_seconds = 0.0;  // waiting for the previous step's updates
  TransferCounters transfers;
  int64_t memory_peak_bytes = 0;
  int64_t memory_reserved_peak_bytes = 0;
  int64_t memory_allocated_bytes = 0;
  int64_t memory_total_bytes = 0;
};

class Worker {
 public:
  // All pointers must outlive the worker; `trace` and `stop` may be null. With `stop`,
  // RunStep and RunEval look at it before each unit (and LM-head chunk) and return
  // CANCELLED when it is set, aborting the collectives as for any error.
  static absl::StatusOr<std::unique_ptr<Worker>> Create(int rank, const TrainConfig& config,
                                                        HostState* state, UpdatePipeline* pipeline,
                                                        RouteShared* shared, const at::Device& device,
                                                        StepTrace* trace, const StopToken* stop = nullptr);
  ~Worker();

  // Runs this worker's part of step `step` (0-based). `inv_tokens` is 1 / the number of
  // target tokens in the whole global batch, so that the gradients summed over workers
  // are those of the global mean loss. LibTorch, CUDA and NCCL errors become a status,
  // and abort the job's collectives so that the other workers return too (with
  // kPeerAbortedMessage) rather than wait for this one.
  absl::StatusOr<WorkerStepResult> RunStep(int64_t step, const WorkerBatch& batch, double inv_tokens);

  // Forward only, between steps: the loss of `batch` with the weights after `step`
  // completed steps (it waits for their updates), through the same parameter stream
  // and forward as RunStep; no gradient, no landing, no change to the host state.
  // Every worker evaluates together (the routes meet). Only loss_sum,
  // forward_seconds, wait_seconds and transfers are set; not traced.
  absl::StatusOr<WorkerStepResult> RunEval(int64_t step, const WorkerBatch& batch);

  // Decoder blocks (the last ones) that keep their graph: the step runs them
  // micro-batch-major with the head (runtime/plan/step_schedule.h).
  int64_t kept_blocks() const { return schedule_.kept_blocks(); }

 private:
  Worker(int rank, const TrainConfig& config, HostState* state, UpdatePipeline* pipeline,
         RouteShared* shared, const at::Device& device, std::unique_ptr<DeviceStreams> streams,
         StepTrace* trace, const StopToken* stop);
  // Throws a StatusException of CANCELLED when the job was asked to stop.
  void StopPoint() const;
  WorkerStepResult Step(int64_t step, const WorkerBatch& batch, double inv_tokens);
  WorkerStepResult Eval(int64_t step, const WorkerBatch& batch);
  // This worker failed: the others' collectives and landing barriers fail instead of waiting.
  void AbortCollectives();

  // A WorkerBatch on the device (copied asynchronously through pinned memory), with
  // each micro-batch's token layout (RoPE tables, document starts).
  struct DeviceBatch {
    std::vector<at::Tensor> ids, targets;
    std::vector<TokenLayout> layouts;
  };
  DeviceBatch ToDevice(const WorkerBatch& batch);

  // The parameter stream, as schedule_ says (runtime/plan/step_schedule.h): which unit
  // each item fetches, into which slot, and which item's taking, first compute or
  // release issues the next fetch. StartFetches begins a pass, `prefetch_depth` ahead.
  void StartFetches(int64_t step, StepSchedule::Pass pass, WorkerStepResult& r);
  void Fetch(int64_t step, int item, WorkerStepResult& r);  // no-op outside the pass
  // The compute stream waits for item's fetch (and issues the fetch the item prefetches
  // when taken).
  at::Tensor Acquire(int64_t step, int item, WorkerStepResult& r);
  // The compute of a kept item's first micro-batch is issued: its prefetch.
  void FirstComputeIssued(int64_t step, int item, WorkerStepResult& r);
  // The compute stream is done with item's slot (and issues the fetch it prefetches
  // when released).
  void Release(int64_t step, int item, WorkerStepResult& r);
  // The head's items: the head and, with a tied head, unit 0's table (the head's weight).
  struct HeadSlots {
    at::Tensor head, table;  // table: undefined unless tied
  };
  HeadSlots AcquireHead(int64_t step, WorkerStepResult& r);
  void ReleaseHead(int64_t step, WorkerStepResult& r);

  // The gradient stream: unit u's fp32 accumulator (the embedding's, a kept block's own,
  // else the ring's next entry), then its landing (through the ring's landing buffers).
  at::Tensor GradBuffer(int u);  // fp32 [numel] on the device, ready to be written
  // Unit `u` is resident on this worker's GPU (its owner: resident_state.h).
  bool OwnsResident(int u) const;
  // Slot `s` narrowed to unit `u`'s parameters.
  at::Tensor SlotOf(int s, int u) const;
  void Land(int u, int64_t step, const at::Tensor& grad, WorkerStepResult& r);

  // Activation placement "host": a unit's saved inputs go to pinned host memory on the
  // D2H stream after its forward, and come back on the H2D stream one unit ahead of
  // their backward. Placement "device" keeps them where they are.
  struct SavedInputs {
    std::vector<at::Tensor> xs;  // per micro-batch
    Event ready;                 // on the stream that produced xs
  };
  SavedInputs Offload(int u, std::vector<at::Tensor> xs, WorkerStepResult& r);
  SavedInputs Restore(int u, SavedInputs saved, WorkerStepResult& r);

  // The embedding and blocks [1, end_unit), layer-major over the micro-batches without
  // gradients; with `saved`, each block's inputs are kept there for backward. Returns
  // the hidden states after unit end_unit - 1.
  std::vector<at::Tensor> Forward(int64_t step, const DeviceBatch& in, int end_unit,
                                  std::vector<SavedInputs>* saved, WorkerStepResult& r);

  // A kept block through the step's micro-batch-major part: its slot's parameters as
  // leaves shared by the micro-batches, and its fp32 gradient accumulator.
  struct KeptBlock {
    BlockParams params;
    std::vector<at::Tensor> leaves;  // one per parameter
    at::Tensor grad;
  };
  // One micro-batch's graph through a kept block: its input (a leaf) and output.
  struct KeptGraph {
    at::Tensor x, y;
  };
  // Forward of micro-batch `mb` through a kept block with autograd; returns its output
  // (detached) and keeps the graph in `g`.
  at::Tensor KeptForward(int u, const KeptBlock& b, const at::Tensor& x, const TokenLayout& layout, KeptGraph& g);
  // Backward of a micro-batch through its graph `g`: the gradient of the block's output
  // in, of its input out; the parameters' gradients added to b.grad.
  at::Tensor KeptBackward(int u, KeptBlock& b, KeptGraph& g, const at::Tensor& grad_out);
  // One micro-batch's compute in a kept block ("forward block 3"): an NVTX range and a
  // trace span of that name.
  Event TraceBegin(const std::string& name);
  void TraceEnd(const std::string& name, const Event& begin);

  // Adds a leaf's gradient into its parameter's range of an fp32 accumulator and clears
  // it, so that micro-batches and loss chunks accumulate in fp32 whatever the compute
  // dtype.
  static void Accumulate(at::Tensor& leaf, const ParamSpec& spec, at::Tensor& acc);

  // The loss head (worker_head.cc). The loss sum over `hidden` in sequence chunks,
  // without gradients.
  at::Tensor HeadLossSum(const at::Tensor& hidden, const at::Tensor& targets, const at::Tensor& head,
                         const at::Tensor& table);
  at::Tensor HeadBackward(const at::Tensor& hidden, const at::Tensor& targets, const at::Tensor& head,
                          const at::Tensor& table, double inv_tokens, at::Tensor& loss_acc,
                          at::Tensor& head_grad, at::Tensor& table_grad);
  void Span(StreamKind k, const std::string& name, const Event& begin, const Event& end);

  const int rank_;
  const TrainConfig& config_;
  HostState* const state_;
  UpdatePipeline* const pipeline_;
  RouteShared* const shared_;
  const at::Device device_;
  // The blocks' projection weights add their gradients straight into the unit's fp32
  // accumulator (weight_grad.h): on CUDA, unless SLIDEDP_WEIGHT_SINKS=0.
  const bool sink_weights_;
  const ParamRoute param_route_;
  const GradRoute grad_route_;
  // Layer inputs to host memory or not, and the MLP's sequence tile (activation_policy.h).
  const ActivationPlan activations_;
  RopeTables rope_;
  std::unique_ptr<DeviceStreams> streams_;
  StepTrace* const trace_;
  const StopToken* const stop_;

  // The step's schedule (fetch order, slots, unit names) and the slots, allocated once:
  // the ring's with the largest unit's size, the kept blocks' with the largest block's.
  const StepSchedule schedule_;
  std::vector<at::Tensor> slots_;
  std::vector<Event> fetched_;
  std::vector<Event> slot_free_;
  std::vector<Event> compute_begin_;  // trace: when the compute stream took each slot
  StepSchedule::Pass pass_ = StepSchedule::Pass::kStep;  // the pass fetches items [0, schedule_.end(pass_))

  // fp32 accumulation buffers: a ring of two for the units in turn, one for the
  // embedding (it accumulates the tied head's gradient through the whole backward), and
  // one for each kept block (its micro-batches come between the head's); the landings
  // go through the ring's landing buffers.
  std::vector<at::Tensor> gacc_;
  std::vector<Event> gacc_free_;
  int next_gacc_ = 0;
  at::Tensor emb_acc_;
  Event emb_free_;
  std::vector<at::Tensor> kept_acc_;  // per kept block, first kept unit first; undefined
                                      // for one resident on this rank (OwnsResident)
  std::vector<Event> kept_acc_free_;
  std::vector<LandingBuffers> land_bufs_;  // one per gacc ring entry, and the embedding's

  struct PendingSpan {
    StreamKind stream;
    std::string name;
    Event begin, end;
    // Compute spans: the GPU's allocated bytes and the step's peak so far, read when the
    // span's work had been issued (the caching allocator allocates as work is issued).
    int64_t allocated = -1, peak = -1;
  };
  std::vector<PendingSpan> spans_;
  double origin_host_ = 0.0;

  SerialExecutor lander_;
};

}  // namespace slidedp
