// StagedUpdates: see staged_updates.h.
#include "runtime/engine/staged_updates.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/resident_state.h"
#include "runtime/model/param_layout.h"
#include "runtime/state/adamw_device.h"
#include "runtime/state/moment_codec.h"
#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
#include "runtime/cuda/pinned_slab.h"
#endif

namespace slidedp {

absl::StatusOr<std::unique_ptr<StagedUpdates>> StagedUpdates::Create(HostState* state, const Staging& staging,
                                                                     const std::vector<at::Device>& devices) {
  for (int u = 0; u < state->num_units(); ++u) {
    if (u >= static_cast<int>(staging.lane.size()) || staging.lane[u] < 0) continue;
    if (state->shard_begin(u) != 0 || state->shard_end(u) != state->layout().units[u].numel) {
      return absl::InvalidArgumentError("policy.staged_updates: the host state holds a shard of each unit "
                                        "(several hosts); staged updates need whole units");
    }
    const size_t params = state->layout().units[u].params.size();
    if (state->moment_dtype() != MomentDtype::kFp32 && params > static_cast<size_t>(kMaxDeviceSpans)) {
      return absl::InvalidArgumentError(absl::StrCat("policy.staged_updates: unit ", u, " has ", params,
                                                     " parameters; staged updates with ", NameOf(state->moment_dtype()),
                                                     " moments take at most ", kMaxDeviceSpans));
    }
    if (staging.lane[u] >= static_cast<int>(devices.size())) {
      return absl::InternalError(absl::StrCat("staged unit ", u, " placed on rank ", staging.lane[u], " of ",
                                              devices.size()));
    }
  }
  std::unique_ptr<StagedUpdates> s(new StagedUpdates(state, staging));
  absl::Status allocated = GuardExceptions("allocating the staged updates' buffers", [&] { return s->Allocate(devices); });
  if (!allocated.ok()) return allocated;
  return s;
}

absl::Status StagedUpdates::Allocate(const std::vector<at::Device>& devices) {
  lanes_.resize(devices.size());
  bool cuda = false;
  int first = 0;  // a staged unit: m and v are stored alike in every unit
  while (first < state_->num_units() && !staged(first)) ++first;
  if (first == state_->num_units()) return absl::OkStatus();  // every unit resident: none staged
  const UnitState& host = state_->unit(first);
  for (size_t r = 0; r < devices.size(); ++r) {
    if (std::find(staging_.lane.begin(), staging_.lane.end(), static_cast<int>(r)) == staging_.lane.end()) continue;
    absl::StatusOr<std::unique_ptr<DeviceStreams>> st = DeviceStreams::Create(devices[r], /*timing=*/false);
    if (!st.ok()) return st.status();
    Lane& lane = lanes_[r];
    lane.streams = std::move(*st);
    cuda = cuda || lane.streams->is_cuda();
    const int64_t n = staging_.chunk_elems;
    const at::TensorOptions on = at::TensorOptions().device(devices[r]);
    for (Buffer& b : lane.buffers) {
      b.state.master = at::empty({n}, on.dtype(at::kFloat));
      b.state.grad = at::empty({n}, on.dtype(at::kFloat));
      b.state.m = at::empty({n}, on.dtype(host.m.scalar_type()));
      b.state.v = at::empty({n}, on.dtype(host.v.scalar_type()));
      if (host.m_scale.defined()) {
        const int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
        b.state.m_scale = at::empty({blocks}, on.dtype(at::kFloat));
        b.state.v_scale = at::empty({blocks}, on.dtype(at::kFloat));
      }
      b.state.params = at::empty({n}, on.dtype(state_->compute_dtype()));
    }
  }
  completions_ = std::make_unique<SerialExecutor>(/*inline_mode=*/!cuda);
#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
  if (cuda) {
    // Page-lock the staged units' host buffers: copies from and to pageable memory would
    // hold the update pipeline's thread for their whole length. Buffers under 1 MiB are
    // left as they are (a small model's, or the scales of a small unit): they may share
    // a page with another buffer, which the driver cannot lock twice, and cost little.
    for (int u = 0; u < state_->num_units(); ++u) {
      if (!staged(u)) continue;
      const UnitState& h = state_->unit(u);
      for (const at::Tensor* t : {&h.master, &h.m, &h.v, &h.m_scale, &h.v_scale}) {
        if (!t->defined() || t->numel() * t->element_size() < (int64_t{1} << 20)) continue;
        absl::StatusOr<std::shared_ptr<void>> lock =
            PageLock(t->data_ptr(), static_cast<size_t>(t->numel()) * t->element_size());
        if (!lock.ok()) return lock.status();
        page_locks_.push_back(std::move(*lock));
      }
    }
  }
#endif
  return absl::OkStatus();
}

StagedUpdates::~StagedUpdates() {
  for (Lane& lane : lanes_) {
    if (lane.streams == nullptr) continue;
    for (const Buffer& b : lane.buffers) lane.streams->HostWait(b.free);
  }
  if (completions_ != nullptr) completions_->WaitIdle().IgnoreError();
}

void StagedUpdates::Issue(int u, const AdamWHyper& h, const std::vector<float>& decay,
                          std::function<void(absl::Status)> done) {
  Lane& lane = lanes_[staging_.lane[u]];
  const int64_t n = state_->layout().units[u].numel;
  Event last;
  for (int64_t b = 0; b < n; b += staging_.chunk_elems) {
    last = Chunk(lane, u, b, std::min(n, b + staging_.chunk_elems), h, decay);
  }
  DeviceStreams* streams = lane.streams.get();
  completions_->Push([streams, last, done = std::move(done)] {
    absl::Status s;
    try {
      streams->HostWait(last);
    } catch (const std::exception& e) {
      s = absl::InternalError(absl::StrCat("waiting for a staged update: ", ExceptionMessage(e)));
    }
    done(s);
    return absl::OkStatus();  // a failure is the update's (done), not the executor's
  });
}

Event StagedUpdates::Chunk(Lane& lane, int u, int64_t b, int64_t e, const AdamWHyper& h,
                           const std::vector<float>& decay) {
  Buffer& buf = lane.buffers[lane.next];
  lane.next = 1 - lane.next;
  DeviceStreams& streams = *lane.streams;
  UnitState& host = state_->unit(u);
  const bool fp32_grad = host.grad.defined();
  const bool cuda = streams.is_cuda();
  const int64_t n = e - b;
  const int64_t sb = b / kMomentBlock, se = (e + kMomentBlock - 1) / kMomentBlock;  // the chunk's scales
  UnitState dev;  // the buffer narrowed to the chunk
  dev.master = buf.state.master.narrow(0, 0, n);
  dev.grad = buf.state.grad.narrow(0, 0, n);
  dev.m = buf.state.m.narrow(0, 0, n);
  dev.v = buf.state.v.narrow(0, 0, n);
  if (host.m_scale.defined()) {
    dev.m_scale = buf.state.m_scale.narrow(0, 0, se - sb);
    dev.v_scale = buf.state.v_scale.narrow(0, 0, se - sb);
  }
  dev.params = buf.state.params.narrow(0, 0, n);
  // The host buffers and the device's, in the order they are copied: in, then back out.
  std::vector<std::pair<at::Tensor, at::Tensor>> state = {{host.master.narrow(0, b, n), dev.master},
                                                          {host.m.narrow(0, b, n), dev.m},
                                                          {host.v.narrow(0, b, n), dev.v}};
  if (host.m_scale.defined()) {
    state.push_back({host.m_scale.narrow(0, sb, se - sb), dev.m_scale});
    state.push_back({host.v_scale.narrow(0, sb, se - sb), dev.v_scale});
  }
  const at::Tensor host_params = host.params.narrow(0, b, n);

  // In: the state and the gradient (fp32, or bf16 in the streamed copy).
  streams.Wait(StreamKind::kH2D, buf.free);
  {
    auto use = streams.Use(StreamKind::kH2D);
    for (auto& [h_t, d_t] : state) d_t.copy_(h_t, /*non_blocking=*/cuda);
    if (fp32_grad) {
      dev.grad.copy_(host.grad.narrow(0, b, n), /*non_blocking=*/cuda);
    } else {
      dev.params.copy_(host_params, /*non_blocking=*/cuda);
    }
  }
  streams.Wait(StreamKind::kCompute, streams.Record(StreamKind::kH2D));

  // The update: each parameter's range of the chunk with its decay.
  const std::vector<DecaySpan> spans = DecaySpansOf(state_->layout().units[u], decay, b, e);
  {
    auto use = streams.Use(StreamKind::kCompute);
    if (cuda) {
      if (!fp32_grad) dev.grad.copy_(dev.params);  // bf16 to fp32: exact
      RunDeviceAdamW(dev, h, spans, /*first_index=*/b, /*out=*/dev.params);
    } else {
      // The CPU device: the host path's call (update_pipeline.cc) on the buffers.
      AdamWUpdateStored(h, spans, n, dev.master.data_ptr<float>(), fp32_grad ? dev.grad.data_ptr<float>() : nullptr,
                        fp32_grad ? nullptr : static_cast<uint16_t*>(dev.params.data_ptr()),
                        MomentsOf(state_->moment_dtype(), dev), /*first_index=*/b);
      if (fp32_grad) dev.params.copy_(dev.master);
    }
  }
  streams.Wait(StreamKind::kD2H, streams.Record(StreamKind::kCompute));

  // Out: the state and the new streamed copy.
  {
    auto use = streams.Use(StreamKind::kD2H);
    for (auto& [h_t, d_t] : state) at::Tensor(h_t).copy_(d_t, /*non_blocking=*/cuda);
    at::Tensor(host_params).copy_(dev.params, /*non_blocking=*/cuda);
  }
  buf.free = streams.Record(StreamKind::kD2H);
  return buf.free;
}

}  // namespace slidedp
