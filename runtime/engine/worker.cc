// Worker: see worker.h. The step loop of one worker reads top to bottom in Step(); the
// loss head is in worker_head.cc.
#include "runtime/engine/worker.h"
#include "runtime/engine/clock.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/model/weight_grad.h"

#include <c10/core/GradMode.h>

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

// The phase in a unit's trace span and NVTX range: "forward block 3", "backward block 3";
// the head's item is "backward head" in a step and "forward head" in the forward-only pass
// (an evaluation).
std::string Phase(StepSchedule::Use use, StepSchedule::Pass pass) {
  const bool forward = use == StepSchedule::Use::kForward || use == StepSchedule::Use::kKept ||
                       (use == StepSchedule::Use::kHead && pass == StepSchedule::Pass::kEval);
  return forward ? "forward " : "backward ";
}

// Activation placement and MLP tiles for this worker's device (activation_policy.h).
ActivationPlan Activations(const TrainConfig& config, const HostState& state, DeviceStreams* streams) {
  return ChooseActivations(config, state.config(), static_cast<int64_t>(at::elementSize(state.compute_dtype())),
                           streams->MemoryTotal(), streams->MemoryAvailable());
}

absl::Status FromException(const std::exception& e) {
  // A status thrown on the way (a stop, a failed landing) keeps its code.
  if (const auto* s = dynamic_cast<const StatusException*>(&e)) return s->status();
  const std::string what = ExceptionMessage(e);
  // LibTorch reports a CUDA allocation failure as "CUDA out of memory"; the policy can
  // shrink the plan and retry on ResourceExhausted.
  if (absl::StrContains(what, "out of memory")) return absl::ResourceExhaustedError(what);
  return absl::InternalError(what);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(int rank, const TrainConfig& config, HostState* state,
                                                       UpdatePipeline* pipeline, RouteShared* shared,
                                                       const at::Device& device, StepTrace* trace,
                                                       const StopToken* stop) {
  absl::StatusOr<std::unique_ptr<DeviceStreams>> streams = DeviceStreams::Create(device, trace != nullptr);
  if (!streams.ok()) return streams.status();
  try {
    return std::unique_ptr<Worker>(
        new Worker(rank, config, state, pipeline, shared, device, std::move(*streams), trace, stop));
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Worker::Worker(int rank, const TrainConfig& config, HostState* state, UpdatePipeline* pipeline,
               RouteShared* shared, const at::Device& device, std::unique_ptr<DeviceStreams> streams,
               StepTrace* trace, const StopToken* stop)
    : rank_(rank),
      config_(config),
      state_(state),
      pipeline_(pipeline),
      shared_(shared),
      device_(device),
      sink_weights_(WeightSinksOn(device)),
      param_route_(config.policy.param_route),
      grad_route_(config.policy.grad_route),
      activations_(Activations(config, *state, streams.get())),
      rope_(MakeRope(state->config(), config.seq_len, device)),
      streams_(std::move(streams)),
      trace_(trace),
      stop_(stop),
      schedule_(state->num_units(), state->layout().units.back().uses_tied_embedding,
                config.policy.prefetch_depth, static_cast<int>(activations_.kept_blocks)),
      lander_(/*inline_mode=*/!device.is_cuda()) {
  const ModelLayout& layout = state->layout();
  const int U = layout.num_units();

  const int W = shared->world;
  int64_t max_numel = 0, max_rest = 0, max_block = 0;
  for (int u = 0; u < U; ++u) {
    max_numel = std::max(max_numel, layout.units[u].numel);
    if (u > 0) max_rest = std::max(max_rest, layout.units[u].numel);
    if (u > 0 && u < U - 1) max_block = std::max(max_block, layout.units[u].numel);
  }
  // Buffers hold W equal slices (the collectives move equal counts per rank).
  auto padded = [&](int64_t n) { return W * SliceLength(std::max<int64_t>(n, 1), W); };
  const at::TensorOptions on_dev = at::TensorOptions().device(device);
  // The ring of slots (step_schedule.h: one computing, `depth` in flight, one more for
  // the tied head), then one slot and one fp32 accumulator for each kept block, except
  // for a kept block resident on this rank no accumulator: it accumulates into its
  // resident gradient (memory_estimate.h's KeptResidentSaving counts it so). A resident
  // unit's parameters are cast into its slot (routes.h).
  const int S = schedule_.num_slots();
  for (int s = 0; s < S; ++s) {
    const bool ring = s < schedule_.ring_slots();
    slots_.push_back(at::empty({padded(ring ? max_numel : max_block)}, on_dev.dtype(state->compute_dtype())));
  }
  for (int k = 0; k < schedule_.kept_blocks(); ++k) {
    const bool own = OwnsResident(schedule_.first_kept_unit() + k);
    kept_acc_.push_back(own ? at::Tensor() : at::empty({padded(max_block)}, on_dev.dtype(at::kFloat)));
  }
  kept_acc_free_.resize(kept_acc_.size());
  fetched_.resize(S);
  slot_free_.resize(S);
  compute_begin_.resize(S);
  for (int k = 0; k < 2; ++k) gacc_.push_back(at::empty({padded(max_rest)}, on_dev.dtype(at::kFloat)));
  gacc_free_.resize(2);
  emb_acc_ = at::empty({padded(layout.units[0].numel)}, on_dev.dtype(at::kFloat));
  const int64_t sizes[3] = {max_rest, max_rest, layout.units[0].numel};
  for (int64_t n : sizes) {
    LandingBuffers b;
    if (!state->fp32_grad()) b.down = at::empty({padded(n)}, on_dev.dtype(state->compute_dtype()));
    if (W > 1 && grad_route_ == GradRoute::kReduceScatter) b.slice = at::empty({SliceLength(n, W)}, on_dev.dtype(at::kFloat));
    if (W > 1 && grad_route_ == GradRoute::kReduceOne && rank == 0) b.reduced = at::empty({n}, on_dev.dtype(at::kFloat));
    b.sumsq_dev = at::zeros({U}, on_dev.dtype(at::kDouble));
    b.sumsq_host = at::zeros({U}, at::TensorOptions().dtype(at::kDouble).pinned_memory(device.is_cuda()));
    land_bufs_.push_back(std::move(b));
  }
}

Worker::~Worker() { lander_.WaitIdle().IgnoreError(); }

absl::StatusOr<WorkerStepResult> Worker::RunStep(int64_t step, const WorkerBatch& batch, double inv_tokens) {
  absl::Status error;
  WorkerStepResult r;
  try {
    r = Step(step, batch, inv_tokens);
  } catch (const std::exception& e) {
    error = FromException(e);
  }
  // This worker will not reach its remaining collectives: the others must not wait for
  // it (nor this worker's landings for theirs).
  if (!error.ok()) AbortCollectives();
  // Every landing of the step is complete (or failed) before the step ends.
  absl::Status landed = lander_.WaitIdle();
  if (!landed.ok()) AbortCollectives();
  if (!error.ok()) return error;
  if (!landed.ok()) return landed;
  try {
    for (const PendingSpan& s : spans_) {
      const double t1 = origin_host_ + streams_->MillisSinceOrigin(s.end) / 1e3;
      trace_->Add(rank_, StreamName(s.stream), s.name, origin_host_ + streams_->MillisSinceOrigin(s.begin) / 1e3, t1);
      if (s.allocated >= 0) {
        constexpr double kGiB = double(int64_t{1} << 30);
        trace_->AddCounter(rank_, "gpu memory GiB", t1, {{"allocated", s.allocated / kGiB}, {"peak", s.peak / kGiB}});
      }
    }
    spans_.clear();
    r.memory_peak_bytes = streams_->MemoryPeak();
    r.memory_reserved_peak_bytes = streams_->MemoryReservedPeak();
    r.memory_allocated_bytes = streams_->MemoryAllocated();
    r.memory_total_bytes = streams_->MemoryTotal();
  } catch (const std::exception& e) {
    return FromException(e);
  }
  return r;
}

absl::StatusOr<WorkerStepResult> Worker::RunEval(int64_t step, const WorkerBatch& batch) {
  try {
    WorkerStepResult r = Eval(step, batch);
    spans_.clear();  // not traced: the trace shows the steps
    return r;
  } catch (const std::exception& e) {
    AbortCollectives();
    return FromException(e);
  }
}

void Worker::StopPoint() const {
  if (StopRequested(stop_)) throw StatusException(absl::CancelledError("stopped (cancel or shutdown requested)"));
}

void Worker::AbortCollectives() {
  shared_->land_comm.Abort();
  if (shared_->comm != nullptr) shared_->comm->Abort();
}

WorkerStepResult Worker::Step(int64_t step, const WorkerBatch& batch, double inv_tokens) {
  const ModelConfig& cfg = state_->config();
  const ModelLayout& layout = state_->layout();
  const int U = layout.num_units(), head = U - 1, first_kept = schedule_.first_kept_unit();
  const size_t MB = batch.inputs.size();
  WorkerStepResult r;
  // All LibTorch work of this thread runs on the compute stream.
  const std::unique_ptr<StreamUse> on_compute = streams_->Use(StreamKind::kCompute);
  streams_->ResetPeak();
  if (trace_ != nullptr) {
    streams_->MarkOrigin();
    origin_host_ = MonotonicSeconds();
  }
  const DeviceBatch in = ToDevice(batch);
  StartFetches(step, StepSchedule::Pass::kStep, r);

  // ------- forward, layer-major up to the kept blocks; keep each unit's input -------
  double t0 = MonotonicSeconds();
  std::vector<SavedInputs> saved(U);
  std::vector<at::Tensor> h = Forward(step, in, first_kept, &saved, r);
  r.forward_seconds = MonotonicSeconds() - t0;

  // ---- kept blocks and head, micro-batch-major: each micro-batch forward through the ----
  // ---- kept blocks keeping its graph, the loss in sequence chunks, and back; land ----
  t0 = MonotonicSeconds();
  std::vector<KeptBlock> kept(head - first_kept);
  HeadSlots slots;
  at::Tensor head_grad, emb_grad;
  at::Tensor loss_acc = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  std::vector<at::Tensor> grad_h(MB);
  for (size_t mb = 0; mb < MB; ++mb) {
    const bool first = mb == 0, last = mb + 1 == MB;
    std::vector<KeptGraph> graphs(kept.size());
    at::Tensor x = std::move(h[mb]);
    for (int u = first_kept; u < head; ++u) {
      StopPoint();
      KeptBlock& b = kept[u - first_kept];
      const int item = schedule_.forward_item(u);
      if (first) {
        const at::Tensor slot = Acquire(step, item, r);
        b.params = ViewBlock(layout.units[u], slot, &b.leaves);
        b.grad = GradBuffer(u);
        if (sink_weights_) SinkWeights(layout.units[u], b.grad, &b.params);
      }
      x = KeptForward(u, b, x, in.layouts[mb], graphs[u - first_kept]);
      if (first) FirstComputeIssued(step, item, r);
    }
    if (first) {
      slots = AcquireHead(step, r);
      head_grad = GradBuffer(head);
      emb_grad = GradBuffer(0);
    }
    const Event head_begin = TraceBegin("head");
    at::Tensor g = HeadBackward(x, in.targets[mb], slots.head, slots.table, inv_tokens, loss_acc, head_grad, emb_grad);
    TraceEnd("head", head_begin);
    x = at::Tensor();
    if (last) {
      ReleaseHead(step, r);
      Land(head, step, head_grad, r);
    }
    for (int u = head - 1; u >= first_kept; --u) {
      StopPoint();
      KeptBlock& b = kept[u - first_kept];
      g = KeptBackward(u, b, graphs[u - first_kept], g);
      if (last) {
        Release(step, schedule_.forward_item(u), r);
        Land(u, step, b.grad, r);
        b = KeptBlock();
      }
    }
    grad_h[mb] = std::move(g);
  }

  // ------- backward through the other blocks, recomputing from their inputs; land -------
  const int top = first_kept - 1;  // the last block that is not kept
  SavedInputs next = top >= 1 ? Restore(top, std::move(saved[top]), r) : SavedInputs();
  for (int u = top; u >= 1; --u) {
    StopPoint();
    const int it = schedule_.backward_item(u);
    const UnitLayout& unit = layout.units[u];
    const at::Tensor slot = Acquire(step, it, r);
    SavedInputs inputs = std::move(next);
    if (u > 1) next = Restore(u - 1, std::move(saved[u - 1]), r);  // under this unit's backward
    at::Tensor grad = GradBuffer(u);
    std::vector<at::Tensor> leaves;  // one leaf per parameter, shared by the micro-batches
    BlockParams p = ViewBlock(unit, slot, &leaves);
    if (sink_weights_) SinkWeights(unit, grad, &p);
    streams_->Wait(StreamKind::kCompute, inputs.ready);
    for (size_t mb = 0; mb < MB; ++mb) {
      at::Tensor x = inputs.xs[mb].detach().requires_grad_(true);
      inputs.xs[mb] = at::Tensor();
      RecomputedBlockBackward(cfg, p, x, in.layouts[mb], activations_.mlp_tile, grad_h[mb]);
      grad_h[mb] = x.grad();
      for (size_t i = 0; i < leaves.size(); ++i) Accumulate(leaves[i], unit.params[i], grad);
    }
    Release(step, it, r);
    Land(u, step, grad, r);
  }

  // ---------------- embedding: scatter-add of the input gradient ----------------
  // In fp32: many rows of a bf16 table would otherwise round away.
  at::Tensor table_grad = emb_grad.view(layout.units[0].params[0].shape);
  for (size_t mb = 0; mb < MB; ++mb) {
    table_grad.index_add_(0, in.ids[mb].reshape({-1}), grad_h[mb].reshape({-1, cfg.hidden_size}).to(at::kFloat));
  }
  Land(0, step, emb_grad, r);
  r.backward_seconds = MonotonicSeconds() - t0;
  r.loss_sum = loss_acc.item<double>();  // the step's end: waits for the compute stream
  return r;
}

WorkerStepResult Worker::Eval(int64_t step, const WorkerBatch& batch) {
  WorkerStepResult r;
  const std::unique_ptr<StreamUse> on_compute = streams_->Use(StreamKind::kCompute);
  const DeviceBatch in = ToDevice(batch);
  // The step's schedule up to the head (and the tied table), kept blocks as forward ones.
  StartFetches(step, StepSchedule::Pass::kEval, r);
  const double t0 = MonotonicSeconds();
  std::vector<at::Tensor> h = Forward(step, in, state_->num_units() - 1, /*saved=*/nullptr, r);
  const HeadSlots slots = AcquireHead(step, r);
  at::Tensor loss_acc = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (size_t mb = 0; mb < h.size(); ++mb) {
    loss_acc.add_(HeadLossSum(h[mb], in.targets[mb], slots.head, slots.table));
    h[mb] = at::Tensor();
  }
  ReleaseHead(step, r);
  r.loss_sum = loss_acc.item<double>();  // waits for the compute stream
  r.forward_seconds = MonotonicSeconds() - t0;
  return r;
}

Worker::DeviceBatch Worker::ToDevice(const WorkerBatch& batch) {
  const bool cuda = device_.is_cuda();
  // Through pinned memory, so that the copies are asynchronous.
  auto copy = [&](const at::Tensor& t) { return (cuda ? t.pin_memory() : t).to(device_, /*non_blocking=*/true); };
  DeviceBatch in;
  for (size_t mb = 0; mb < batch.inputs.size(); ++mb) {
    in.ids.push_back(copy(batch.inputs[mb]));
    in.targets.push_back(copy(batch.targets[mb]));
    if (batch.positions.empty()) {
      in.layouts.push_back(TokenLayout{rope_, {}});
    } else {
      in.layouts.push_back(DocumentLayout(state_->config(), batch.positions[mb], copy(batch.positions[mb]), &rope_));
    }
  }
  return in;
}

std::vector<at::Tensor> Worker::Forward(int64_t step, const DeviceBatch& in, int end_unit,
                                        std::vector<SavedInputs>* saved, WorkerStepResult& r) {
  const ModelConfig& cfg = state_->config();
  const ModelLayout& layout = state_->layout();
  const size_t MB = in.ids.size();
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> h(MB);
  // Each unit's compute is issued before the next fetch (issued by Release), which may
  // wait for that unit's CPU update of the previous step.
  const int emb = schedule_.forward_item(0);
  const at::Tensor table = ParamView(layout.units[0], Acquire(step, emb, r), 0);
  for (size_t mb = 0; mb < MB; ++mb) h[mb] = EmbeddingForward(table, in.ids[mb]);
  Release(step, emb, r);
  for (int u = 1; u < end_unit; ++u) {
    StopPoint();
    const int item = schedule_.forward_item(u);
    const at::Tensor slot = Acquire(step, item, r);
    const BlockParams p = ViewBlock(layout.units[u], slot);
    if (saved != nullptr) (*saved)[u] = Offload(u, h, r);
    for (size_t mb = 0; mb < MB; ++mb) h[mb] = BlockForward(cfg, p, h[mb], in.layouts[mb], activations_.mlp_tile);
    if (schedule_.item(item).use == StepSchedule::Use::kKept) FirstComputeIssued(step, item, r);
    Release(step, item, r);
  }
  return h;
}

at::Tensor Worker::KeptForward(int u, const KeptBlock& b, const at::Tensor& x, const TokenLayout& layout,
                               KeptGraph& g) {
  const std::string name = "forward " + schedule_.unit_name(u);
  const Event begin = TraceBegin(name);
  at::AutoGradMode with_grad(true);
  g.x = x.detach().requires_grad_(true);
  g.y = BlockForward(state_->config(), b.params, g.x, layout, activations_.mlp_tile);
  TraceEnd(name, begin);
  return g.y.detach();
}

at::Tensor Worker::KeptBackward(int u, KeptBlock& b, KeptGraph& g, const at::Tensor& grad_out) {
  const std::string name = "backward " + schedule_.unit_name(u);
  const Event begin = TraceBegin(name);
  g.y.backward(grad_out);
  at::Tensor grad_in = g.x.grad();
  g = KeptGraph();
  const UnitLayout& unit = state_->layout().units[u];
  for (size_t i = 0; i < b.leaves.size(); ++i) Accumulate(b.leaves[i], unit.params[i], b.grad);
  TraceEnd(name, begin);
  return grad_in;
}

Event Worker::TraceBegin(const std::string& name) {
  streams_->RangeStart(name);
  return trace_ != nullptr && streams_->is_cuda() ? streams_->Record(StreamKind::kCompute) : Event();
}

void Worker::TraceEnd(const std::string& name, const Event& begin) {
  streams_->RangeEnd();
  if (trace_ != nullptr && streams_->is_cuda()) Span(StreamKind::kCompute, name, begin, streams_->Record(StreamKind::kCompute));
}

Worker::HeadSlots Worker::AcquireHead(int64_t step, WorkerStepResult& r) {
  HeadSlots slots;
  // Taking the head issues the next fetch, the table's at prefetch depth 1: before
  // the table's slot is taken.
  slots.head = Acquire(step, schedule_.head_item(), r);
  if (schedule_.tied_head()) slots.table = Acquire(step, schedule_.table_item(), r);
  return slots;
}

void Worker::ReleaseHead(int64_t step, WorkerStepResult& r) {
  Release(step, schedule_.head_item(), r);
  if (schedule_.tied_head()) Release(step, schedule_.table_item(), r);
}

void Worker::StartFetches(int64_t step, StepSchedule::Pass pass, WorkerStepResult& r) {
  pass_ = pass;
  for (int i = 0; i < schedule_.prefetch_depth(); ++i) Fetch(step, i, r);
}

void Worker::Fetch(int64_t step, int item, WorkerStepResult& r) {
  if (item < 0 || item >= schedule_.end(pass_)) return;
  MaybeRecordSlotEvent(rank_, step, {StepSchedule::Op::kFetch, item});
  const int u = schedule_.item(item).unit;
  const int s = schedule_.item(item).slot;
  r.wait_seconds += pipeline_->WaitParamsReady(u, step);
  streams_->Wait(StreamKind::kH2D, slot_free_[s]);
  const Event begin = trace_ != nullptr ? streams_->Record(StreamKind::kH2D) : Event();
  at::Tensor slot = SlotOf(s, u);
  fetched_[s] = FetchUnit(param_route_, rank_, *shared_, *state_, u, slot, *streams_, Event(), r.transfers);
  if (fetched_[s].pending()) Span(StreamKind::kH2D, "fetch " + schedule_.unit_name(u), begin, fetched_[s]);
}

at::Tensor Worker::Acquire(int64_t step, int item, WorkerStepResult& r) {
  MaybeRecordSlotEvent(rank_, step, {StepSchedule::Op::kAcquire, item});
  const StepSchedule::Item& it = schedule_.item(item);
  streams_->Wait(StreamKind::kCompute, fetched_[it.slot]);
  if (trace_ != nullptr) compute_begin_[it.slot] = streams_->Record(StreamKind::kCompute);
  streams_->RangeStart(Phase(it.use, pass_) + schedule_.unit_name(it.unit));
  const at::Tensor slot = SlotOf(it.slot, it.unit);
  if (it.prefetch_at == StepSchedule::PrefetchAt::kAcquire) Fetch(step, it.prefetch, r);
  return slot;
}

void Worker::FirstComputeIssued(int64_t step, int item, WorkerStepResult& r) {
  const StepSchedule::Item& it = schedule_.item(item);
  if (it.prefetch_at == StepSchedule::PrefetchAt::kFirstCompute) Fetch(step, it.prefetch, r);
}

void Worker::Release(int64_t step, int item, WorkerStepResult& r) {
  MaybeRecordSlotEvent(rank_, step, {StepSchedule::Op::kRelease, item});
  const StepSchedule::Item& it = schedule_.item(item);
  slot_free_[it.slot] = streams_->Record(StreamKind::kCompute);
  streams_->RangeEnd();
  // A kept block's micro-batches and the head's have spans of their own (KeptForward,
  // KeptBackward, "head" in Step): their slots are held across the micro-batches, with
  // the other units' work in between. In the forward-only pass they are forward items.
  const bool own_spans = it.use == StepSchedule::Use::kKept || it.use == StepSchedule::Use::kHead;
  if (!own_spans || pass_ == StepSchedule::Pass::kEval) {
    Span(StreamKind::kCompute, Phase(it.use, pass_) + schedule_.unit_name(it.unit), compute_begin_[it.slot],
         slot_free_[it.slot]);
  }
  if (it.prefetch_at == StepSchedule::PrefetchAt::kRelease) Fetch(step, it.prefetch, r);
}

bool Worker::OwnsResident(int u) const {
  return shared_->resident != nullptr && shared_->resident->resident(u) && shared_->resident->owner(u) == rank_;
}

at::Tensor Worker::SlotOf(int s, int u) const { return slots_[s].narrow(0, 0, state_->layout().units[u].numel); }

at::Tensor Worker::GradBuffer(int u) {
  MaybeInjectOutOfMemory();
  const int64_t n = state_->layout().units[u].numel;
  at::Tensor g;
  if (u == 0) {
    streams_->Wait(StreamKind::kCompute, emb_free_);
    g = emb_acc_.narrow(0, 0, n);
  } else if (schedule_.kept(u)) {
    const int j = u - schedule_.first_kept_unit();
    streams_->Wait(StreamKind::kCompute, kept_acc_free_[j]);
    // A kept block resident on this rank accumulates into its resident gradient (its
    // last update read it before this step's forward of the block, which waited for it).
    g = OwnsResident(u) ? shared_->resident->grad(u) : kept_acc_[j].narrow(0, 0, n);
  } else {
    streams_->Wait(StreamKind::kCompute, gacc_free_[next_gacc_]);
    g = gacc_[next_gacc_].narrow(0, 0, n);
  }
  g.zero_();
  return g;
}

void Worker::Land(int u, int64_t step, const at::Tensor& grad, WorkerStepResult& r) {
  const int k = u == 0 ? 2 : next_gacc_;
  if (!DeviceReducesGradient(grad_route_, shared_->world)) {
    // The host sums from one landing buffer per rank: the previous sum must be done.
    ThrowIfError(lander_.WaitIdle());  // with its code
  }
  // The landing buffers' previous landing is copied (GradBuffer waited already for a
  // ring accumulator; a kept block's comes from its own).
  streams_->Wait(StreamKind::kCompute, u == 0 ? emb_free_ : gacc_free_[k]);
  const Event ready = streams_->Record(StreamKind::kCompute);
  const Landing l = IssueGradLanding(grad_route_, rank_, *shared_, *state_, u, step, grad, ready,
                                     land_bufs_[k], *streams_, r.transfers);
  if (u == 0) {
    emb_free_ = l.copied;
  } else {
    gacc_free_[k] = l.copied;
    next_gacc_ = 1 - k;
  }
  if (schedule_.kept(u)) kept_acc_free_[u - schedule_.first_kept_unit()] = l.copied;
  Span(StreamKind::kD2H, "land " + schedule_.unit_name(u), ready, l.copied);
  const LandingBuffers* bufs = &land_bufs_[k];
  lander_.Push([this, l, bufs] {
    if (absl::Status injected = MaybeInjectLandingFailure(); !injected.ok()) return injected;
    return CompleteGradLanding(grad_route_, rank_, *shared_, *state_, l, *bufs, *streams_, *pipeline_);
  });
}

Worker::SavedInputs Worker::Offload(int u, std::vector<at::Tensor> xs, WorkerStepResult& r) {
  if (!activations_.offload_inputs) return {std::move(xs), Event()};
  const bool cuda = device_.is_cuda();
  // The copies start once the compute stream has produced the inputs.
  streams_->Wait(StreamKind::kD2H, streams_->Record(StreamKind::kCompute));
  const Event begin = trace_ != nullptr ? streams_->Record(StreamKind::kD2H) : Event();
  SavedInputs out;
  {
    auto use = streams_->Use(StreamKind::kD2H);
    for (const at::Tensor& x : xs) {
      at::Tensor host = at::empty(x.sizes(), x.options().device(at::kCPU).pinned_memory(cuda));
      host.copy_(x, /*non_blocking=*/cuda);
      streams_->KeepFor(x, StreamKind::kD2H);  // the device copy is freed after the copy
      r.transfers.d2h_bytes += x.numel() * static_cast<int64_t>(x.element_size());
      out.xs.push_back(std::move(host));
    }
  }
  out.ready = streams_->Record(StreamKind::kD2H);
  Span(StreamKind::kD2H, "offload inputs " + schedule_.unit_name(u), begin, out.ready);
  return out;
}

Worker::SavedInputs Worker::Restore(int u, SavedInputs saved, WorkerStepResult& r) {
  if (!activations_.offload_inputs) return saved;
  const bool cuda = device_.is_cuda();
  streams_->Wait(StreamKind::kH2D, saved.ready);
  const Event begin = trace_ != nullptr ? streams_->Record(StreamKind::kH2D) : Event();
  SavedInputs out;
  {
    // Allocated on the H2D stream and kept for the compute stream that reads them.
    auto use = streams_->Use(StreamKind::kH2D);
    for (const at::Tensor& host : saved.xs) {
      at::Tensor x = at::empty(host.sizes(), host.options().device(device_).pinned_memory(false));
      x.copy_(host, /*non_blocking=*/cuda);
      streams_->KeepFor(x, StreamKind::kCompute);
      r.transfers.h2d_bytes += x.numel() * static_cast<int64_t>(x.element_size());
      out.xs.push_back(std::move(x));
    }
  }
  out.ready = streams_->Record(StreamKind::kH2D);
  Span(StreamKind::kH2D, "restore inputs " + schedule_.unit_name(u), begin, out.ready);
  return out;
}

void Worker::Accumulate(at::Tensor& leaf, const ParamSpec& spec, at::Tensor& acc) {
  if (!leaf.defined() || !leaf.grad().defined()) return;
  acc.narrow(0, spec.offset, spec.numel).add_(leaf.grad().reshape({-1}));
  leaf.mutable_grad().reset();
}

void Worker::Span(StreamKind k, const std::string& name, const Event& begin, const Event& end) {
  if (trace_ == nullptr || !streams_->is_cuda()) return;
  spans_.push_back({k, name, begin, end});
  if (k == StreamKind::kCompute) {
    spans_.back().allocated = streams_->MemoryAllocated();
    spans_.back().peak = streams_->MemoryPeak();
  }
}

}  // namespace slidedp
