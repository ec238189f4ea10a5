// UpdatePipeline: see update_pipeline.h.
#include "runtime/engine/update_pipeline.h"
#include "runtime/engine/clock.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/host_group.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/staged_updates.h"
#include "runtime/engine/step_trace.h"
#include "runtime/model/param_layout.h"
#include "runtime/state/adamw.h"

namespace slidedp {
UpdatePipeline::UpdatePipeline(HostState* state, const TrainConfig& config)
    : state_(state),
      config_(config),
      units_(state->num_units()),
      clip_(config.optimizer.max_grad_norm > 0),
      version_(units_, 0),
      sumsq_(units_, 0.0),
      link_waiting_(units_, false) {
  thread_ = std::thread([this] { Loop(); });
}

UpdatePipeline::~UpdatePipeline() {
  Drain();
  link_executor_.reset();
  gather_executor_.reset();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void UpdatePipeline::BeginStep(int64_t step, double lr, bool hold) {
  absl::MutexLock lock(&mu_);
  step_ = step;
  lr_ = lr;
  hold_ = hold;
  issued_this_step_ = 0;
  ForgetLandings();
}

void UpdatePipeline::ForgetLandings() {
  landed_ = 0;
  link_next_ = units_ - 1;
  std::fill(link_waiting_.begin(), link_waiting_.end(), false);
  std::fill(sumsq_.begin(), sumsq_.end(), 0.0);
  summary_ = StepUpdateSummary();
  summary_.lr = lr_;
}

double UpdatePipeline::WaitParamsReady(int u, int64_t step) {
  absl::MutexLock lock(&mu_);
  // A failed update (or exchange with the other hosts) lets the step run on; the
  // trainer fails it (status()).
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_[u] >= step || !failed_.ok(); };
  if (ready()) return 0.0;
  const double t0 = MonotonicSeconds();
  mu_.Await(absl::Condition(&ready));
  return MonotonicSeconds() - t0;
}

void UpdatePipeline::GradLanded(int u, int64_t step, double sumsq) {
  absl::MutexLock lock(&mu_);
  if (link_ != nullptr) {
    // Several hosts: the unit's gradient is reduced over them first (on the link's
    // thread), then lands with the norm of the whole sum. Every host reduces in the
    // backward's order, the last unit first: this host's workers may land two units in
    // either order (a resident unit from its owner's thread, a streamed one from the
    // last rank to arrive), and the hosts' reductions meet in the order issued.
    link_waiting_[u] = true;
    for (; link_next_ >= 0 && link_waiting_[link_next_]; --link_next_) {
      const int v = link_next_;
      link_waiting_[v] = false;
      link_executor_->Push([this, v, step] { return ReduceOverHosts(v, step); });
    }
    return;
  }
  Landed(u, step, sumsq);
}

absl::Status UpdatePipeline::ReduceOverHosts(int u, int64_t step) {
  // A resident unit: the owner GPU's fp32 gradient, summed whole on every host (each
  // host's replica then takes the same update). A streamed one: the fp32 gradient, or
  // the bf16 one landed in the streamed copy (then the copy's other slices hold
  // gradients until the update's all-gather brings their weights), reduced to this
  // host's shard.
  const bool resident = resident_ != nullptr && resident_->resident(u);
  const bool fp32 = resident || state_->fp32_grad();
  at::Tensor grad = resident ? resident_->GradToHost(u) : fp32 ? state_->unit(u).grad : state_->unit(u).params;
  const int64_t sb = state_->shard_begin(u), se = state_->shard_end(u);
  absl::Status s = link_->ReduceScatter(grad, grad.narrow(0, sb, se - sb));
  if (resident && s.ok()) {
    s = link_->AllGather(grad);
    if (s.ok()) resident_->GradFromHost(u, grad);
  }
  const int threads = config_.policy.update_threads;
  std::vector<double> sumsq{
      se <= sb ? 0.0
      : fp32   ? SumSquares(grad.data_ptr<float>() + sb, se - sb, threads)
               : SumSquaresBf16(static_cast<const uint16_t*>(grad.data_ptr()) + sb, se - sb, threads)};
  if (s.ok()) s = link_->AllReduceSum(sumsq);
  absl::MutexLock lock(&mu_);
  if (!s.ok()) {
    if (failed_.ok()) failed_ = s;
    return s;
  }
  Landed(u, step, sumsq[0]);
  return absl::OkStatus();
}

void UpdatePipeline::Landed(int u, int64_t step, double sumsq) {
  sumsq_[u] = sumsq;
  ++landed_;
  const bool finite = std::isfinite(sumsq);
  if (!finite && summary_.bad_unit < 0) summary_.bad_unit = u;
  if (!clip_ && !hold_) {
    // Speculative: a unit updates as soon as it lands; a non-finite unit is skipped.
    Enqueue({u, step, 1.0, !finite, lr_, adam_steps_ + 1});
    if (!finite) summary_.skipped = true;
  } else if (landed_ == units_) {
    if (clip_) {
      ScheduleAll();
    } else {
      ScheduleHeld();
    }
  }
}

void UpdatePipeline::ScheduleHeld() {
  // What the speculative schedule would have enqueued, unit by unit, all at once, in the
  // order it would have (units land the last first): several hosts gather in queue
  // order, and each host decides alone whether a step is held (its own plan's first).
  for (int u = units_ - 1; u >= 0; --u) {
    const bool finite = std::isfinite(sumsq_[u]);
    Enqueue({u, step_, 1.0, !finite, lr_, adam_steps_ + 1});
    if (!finite) summary_.skipped = true;
  }
}

absl::Status UpdatePipeline::AbortStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (step_ != step || issued_this_step_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step + 1, " cannot be run again: ", issued_this_step_, " of its updates were already issued"));
  }
  ForgetLandings();
  return absl::OkStatus();
}

void UpdatePipeline::ScheduleAll() {
  double total = 0.0;
  for (double s : sumsq_) total += s;
  summary_.grad_norm = std::sqrt(total);
  const bool finite = std::isfinite(total);
  summary_.skipped = !finite;
  // torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (norm + 1e-6)).
  const double scale = std::min(1.0, config_.optimizer.max_grad_norm / (summary_.grad_norm + 1e-6));
  summary_.clip_scale = finite ? scale : 0.0;
  if (finite) ++adam_steps_;
  for (int u = 0; u < units_; ++u) Enqueue({u, step_, scale, !finite, lr_, adam_steps_});
}

void UpdatePipeline::Enqueue(const Task& t) {
  if (t.step == step_) ++issued_this_step_;
  queue_.push_back(t);
  ++pending_;
}

StepUpdateSummary UpdatePipeline::Summary(int64_t step) {
  absl::MutexLock lock(&mu_);
  // Several hosts land through the link's thread: wait for the step's last unit.
  auto landed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return landed_ == units_ || !failed_.ok(); };
  if (link_ != nullptr && step_ == step) mu_.Await(absl::Condition(&landed));
  if (!clip_ && step_ == step) {
    double total = 0.0;
    for (double s : sumsq_) total += s;
    summary_.grad_norm = std::sqrt(total);
    // Without clipping the units of this step were enqueued with AdamW step
    // adam_steps_ + 1 as they landed; the next step uses the one after.
    ++adam_steps_;
  }
  return summary_;
}

void UpdatePipeline::Drain() {
  if (link_executor_ != nullptr) link_executor_->WaitIdle().IgnoreError();  // its error is failed_
  absl::MutexLock lock(&mu_);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

double UpdatePipeline::TakeBusySeconds() {
  absl::MutexLock lock(&mu_);
  const double b = busy_seconds_;
  busy_seconds_ = 0.0;
  return b;
}

void UpdatePipeline::set_hosts(HostGroup* link, HostGroup* gather) {
  link_ = link;
  gather_ = gather;
  if (link != nullptr && link_executor_ == nullptr) link_executor_ = std::make_unique<SerialExecutor>(/*inline_mode=*/false);
  if (gather != nullptr && gather_executor_ == nullptr) gather_executor_ = std::make_unique<SerialExecutor>(/*inline_mode=*/false);
}

int64_t UpdatePipeline::TakeGatheredBytes(int64_t step) {
  absl::MutexLock lock(&mu_);
  auto it = gathered_bytes_.find(step);
  if (it == gathered_bytes_.end()) return 0;
  const int64_t b = it->second;
  gathered_bytes_.erase(gathered_bytes_.begin(), std::next(it));
  return b;
}

absl::Status UpdatePipeline::status() {
  absl::MutexLock lock(&mu_);
  return failed_;
}

int64_t UpdatePipeline::adam_steps() {
  absl::MutexLock lock(&mu_);
  return adam_steps_;
}

void UpdatePipeline::RestoreProgress(int64_t steps, int64_t adam_steps) {
  absl::MutexLock lock(&mu_);
  std::fill(version_.begin(), version_.end(), steps);
  adam_steps_ = adam_steps;
  step_ = steps - 1;
}

void UpdatePipeline::Loop() {
  for (;;) {
    Task t;
    {
      absl::MutexLock lock(&mu_);
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (queue_.empty()) return;  // stop_ with nothing left
      // Earliest deadline first: the next forward needs unit 0 first, then 1, 2, ...,
      // so among the queued updates the lowest (step, unit) goes first. Without
      // clipping, units land L..1, 0; the ones still queued when backward ends are
      // then updated in the order the next forward uses them.
      // A staged update goes before any CPU update: issuing it only queues its copies
      // and kernels on its GPU, which then run beside the CPU's updates.
      auto earlier = [](const Task& a, const Task& b) { return a.step != b.step ? a.step < b.step : a.unit < b.unit; };
      auto next = queue_.end();
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        const bool on_gpu = staged_ != nullptr && !it->skip && staged_->staged(it->unit);
        if (on_gpu && (next == queue_.end() || earlier(*it, *next))) next = it;
      }
      if (next == queue_.end()) next = std::min_element(queue_.begin(), queue_.end(), earlier);
      // Several hosts meet in every update's gather: the same order on each, the order
      // the link landed the units in (the same everywhere), not that of what is queued.
      if (gather_ != nullptr) next = queue_.begin();
      t = *next;
      queue_.erase(next);
    }
    if (staged_ != nullptr && !t.skip && staged_->staged(t.unit)) {
      IssueStaged(t);
      continue;
    }
    const double t0 = MonotonicSeconds();
    const bool on_gpu = resident_ != nullptr && resident_->resident(t.unit);
    absl::Status failed;
    if (!t.skip) {
      try {
        Apply(t);
      } catch (const std::exception& e) {
        failed = absl::InternalError(absl::StrCat("the update of ", UnitName(t.unit, units_), " in step ", t.step + 1,
                                                  " failed: ", ExceptionMessage(e)));
      }
    } else if (!state_->fp32_grad() && !on_gpu) {
      // The streamed copy holds the discarded gradient: restore the weights (this
      // host's shard; the gather below brings the others').
      state_->RefreshParams(t.unit, state_->shard_begin(t.unit), state_->shard_end(t.unit));
    }
    const double busy = MonotonicSeconds() - t0;
    if (trace_ != nullptr) {
      trace_->Add(StepTrace::kHostPid, "update",
                  absl::StrCat(on_gpu ? "issue GPU update " : "update ", UnitName(t.unit, units_),
                               t.skip ? " (skipped)" : ""),
                  t0, t0 + busy);
    }
    // A skipped update changed no weights, but a gradient landed in bf16 took the
    // copy's place on every host: then the weights are gathered back all the same. A
    // resident unit's replicas took the same update on every host: nothing to gather.
    const bool gather = failed.ok() && !on_gpu && (!t.skip || !state_->fp32_grad()) && gather_ != nullptr;
    {
      absl::MutexLock lock(&mu_);
      busy_seconds_ += busy;
      if (!gather) Done(t, failed);
    }
    if (!gather) continue;
    // Several hosts: each updated its shard of the streamed copy; the others' come on
    // the gather's thread, in this (landing) order, while this thread updates the next
    // unit; the unit is ready once they have come.
    gather_executor_->Push([this, t] {
      absl::Status s;
      int64_t bytes = 0;
      // After a failed exchange the step fails: the units left only count down (each
      // further gather could wait the whole timeout for a host that is gone).
      if (status().ok()) {
        const int64_t before = gather_->bytes_sent();
        s = gather_->AllGather(state_->unit(t.unit).params);
        bytes = gather_->bytes_sent() - before;
      }
      absl::MutexLock lock(&mu_);
      gathered_bytes_[t.step] += bytes;
      Done(t, s);
      return absl::OkStatus();  // a failure fails the step (status()); later gathers still count down
    });
  }
}

void UpdatePipeline::Done(const Task& t, const absl::Status& s) {
  if (!s.ok() && failed_.ok()) failed_ = s;
  version_[t.unit] = t.step + 1;
  --pending_;
}

AdamWHyper UpdatePipeline::Hyper(const Task& t) const {
  AdamWHyper h;
  h.lr = static_cast<float>(t.lr);
  h.step = t.adam_step;
  h.beta1 = static_cast<float>(config_.optimizer.beta1);
  h.beta2 = static_cast<float>(config_.optimizer.beta2);
  h.eps = static_cast<float>(config_.optimizer.eps);
  h.grad_scale = static_cast<float>(t.scale);
  return h;
}

std::vector<float> UpdatePipeline::Decays(int u) const {
  std::vector<float> decay;
  for (const ParamSpec& ps : state_->layout().units[u].params) {
    decay.push_back(ps.decay ? static_cast<float>(config_.optimizer.weight_decay) : 0.0f);
  }
  return decay;
}

void UpdatePipeline::IssueStaged(const Task& t) {
  const double t0 = MonotonicSeconds();
  auto done = [this, t, t0](absl::Status s) {
    if (!s.ok()) {
      s = absl::InternalError(absl::StrCat("the staged update of ", UnitName(t.unit, units_), " in step ",
                                           t.step + 1, " failed: ", s.message()));
    }
    if (trace_ != nullptr) {
      trace_->Add(StepTrace::kHostPid, "staged update", absl::StrCat("staged update ", UnitName(t.unit, units_)),
                  t0, MonotonicSeconds());
    }
    absl::MutexLock lock(&mu_);
    Done(t, s);
  };
  // Not the update thread's busy time (TakeBusySeconds: the CPU's AdamW), which the
  // rates' refinement divides among the CPU's units (measurements.h).
  try {
    staged_->Issue(t.unit, Hyper(t), Decays(t.unit), done);
  } catch (const std::exception& e) {
    done(absl::InternalError(ExceptionMessage(e)));  // nothing of it was left to complete
  }
}

void UpdatePipeline::Apply(const Task& t) {
  UnitState& s = state_->unit(t.unit);
  const UnitLayout& layout = state_->layout().units[t.unit];
  AdamWHyper h = Hyper(t);
  if (resident_ != nullptr && resident_->resident(t.unit)) {
    // Resident on a GPU: issued there, after the gradient, before the next forward.
    resident_->Update(t.unit, h, Decays(t.unit), config_.policy.update_threads);
    return;
  }
  float* p = s.master.data_ptr<float>();
  const int threads = config_.policy.update_threads;
  // The gradient is fp32 in s.grad, or bf16 in the streamed copy (which the update
  // then rewrites in the same pass).
  const bool fp32_grad = s.grad.defined();
  const float* g = fp32_grad ? s.grad.data_ptr<float>() : nullptr;
  uint16_t* gp = fp32_grad ? nullptr : static_cast<uint16_t*>(s.params.data_ptr());
  const MomentView moments = state_->moments(t.unit);
  // This host's shard of the unit (all of it on one host): the master, m and v hold
  // [sb, se) at index i - sb; the gradient and the streamed copy are whole.
  const int64_t sb = state_->shard_begin(t.unit), se = state_->shard_end(t.unit);
  if (moments.dtype != MomentDtype::kFp32) {
    // Compact moments: one call per chunk (chunks start on quantization blocks), each
    // parameter's range with its own decay setting.
    const std::vector<float> decay = Decays(t.unit);
    for (const Chunk& chunk : state_->chunks(t.unit)) {
      const int64_t cb = std::max(chunk.begin, sb), ce = std::min(chunk.end, se);
      if (ce <= cb) continue;
      const std::vector<DecaySpan> spans = DecaySpansOf(layout, decay, cb, ce);
      AdamWUpdateStored(h, spans, ce - cb, p + (cb - sb), fp32_grad ? g + cb : nullptr, fp32_grad ? nullptr : gp + cb,
                        OffsetMoments(moments, cb - sb), /*first_index=*/cb, threads);
      if (fp32_grad) state_->RefreshParams(t.unit, cb, ce);
    }
    return;
  }
  float* m = static_cast<float*>(moments.m);
  float* v = static_cast<float*>(moments.v);
  for (const Chunk& chunk : state_->chunks(t.unit)) {
    const int64_t cb = std::max(chunk.begin, sb), ce = std::min(chunk.end, se);
    if (ce <= cb) continue;
    const Chunk c{chunk.unit, cb, ce};
    // Within a chunk, each parameter's overlapping range gets its own decay setting.
    for (const ParamSpec& ps : layout.params) {
      const int64_t b = std::max(c.begin, ps.offset), e = std::min(c.end, ps.offset + ps.numel);
      if (e <= b) continue;
      h.weight_decay = ps.decay ? static_cast<float>(config_.optimizer.weight_decay) : 0.0f;
      // The master, m and v from the shard's start; the gradient and copy whole.
      const int64_t o = b - sb;
      if (fp32_grad) {
        AdamWUpdate(h, e - b, p + o, g + b, m + o, v + o, threads);
      } else {
        AdamWUpdateBf16Grad(h, e - b, p + o, gp + b, m + o, v + o, threads);
      }
    }
    if (fp32_grad) state_->RefreshParams(t.unit, c.begin, c.end);
  }
}

}  // namespace slidedp
