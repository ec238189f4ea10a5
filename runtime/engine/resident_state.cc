// ResidentState: see resident_state.h.
#include "runtime/engine/resident_state.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/host_group.h"
#include "runtime/model/param_layout.h"
#include "runtime/state/adamw_device.h"

namespace slidedp {

absl::StatusOr<std::unique_ptr<ResidentState>> ResidentState::Create(HostState* state, const Residency& placement,
                                                                     const std::vector<at::Device>& devices,
                                                                     HostGroup* hosts) {
  if (placement.units > 0 && state->moment_dtype() != MomentDtype::kFp32) {
    if (hosts != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy.resident_units: units resident over several hosts need optimizer.state_dtype fp32, got ",
          NameOf(state->moment_dtype())));
    }
    for (int u = 0; u < state->num_units(); ++u) {
      const size_t params = state->layout().units[u].params.size();
      if (placement.resident(u) && params > static_cast<size_t>(kMaxDeviceSpans)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "policy.resident_units: unit ", u, " has ", params, " parameters; resident units with ",
            NameOf(state->moment_dtype()), " moments take at most ", kMaxDeviceSpans, " (lower resident_units)"));
      }
    }
  }
  std::unique_ptr<ResidentState> r(new ResidentState(state, placement, hosts));
  absl::Status allocated =
      GuardExceptions("allocating the resident units", [&] { return r->Allocate(devices); });
  if (hosts != nullptr) {
    // Every host must hold the same units (each step sums their gradients over the
    // hosts); a host whose GPU could not hold them counts -1, so that all fail together
    // rather than some waiting in the gather below.
    absl::StatusOr<bool> same =
        SameOnEveryHost(*hosts, allocated.ok() ? static_cast<double>(placement.units) : -1.0);
    if (!same.ok()) return same.status();
    if (!allocated.ok()) {
      // Not RESOURCE_EXHAUSTED: a smaller plan on this host alone would meet no one.
      return absl::FailedPreconditionError(absl::StrCat(
          "policy.resident_units: ", placement.units, " units do not fit on host ", hosts->rank(),
          "'s GPUs (", allocated.message(), "); lower it in every host's spec"));
    }
    if (!*same) {
      return absl::FailedPreconditionError(absl::StrCat(
          "policy.resident_units: host ", hosts->rank(), " holds ", placement.units,
          " units on its GPUs but another host holds a different number (or could not allocate them); "
          "every host of a job must keep the same units resident"));
    }
  }
  if (!allocated.ok()) return allocated;
  if (absl::Status s = r->FromHost(); !s.ok()) return s;
  return r;
}

absl::Status ResidentState::Allocate(const std::vector<at::Device>& devices) {
  units_.resize(state_->num_units());
  streams_.resize(devices.size());
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!placement_.resident(u)) continue;
    const int owner = placement_.owner[u];
    if (owner < 0 || owner >= static_cast<int>(devices.size())) {
      return absl::InternalError(absl::StrCat("resident unit ", u, " placed on rank ", owner, " of ", devices.size()));
    }
    const at::Device& device = devices[owner];
    if (streams_[owner] == nullptr) {
      absl::StatusOr<std::unique_ptr<DeviceStreams>> s = DeviceStreams::Create(device, /*timing=*/false);
      if (!s.ok()) return s.status();
      streams_[owner] = std::move(*s);
    }
    const int64_t n = state_->layout().units[u].numel;
    const at::TensorOptions on_device = at::TensorOptions().device(device);
    const UnitState& host = state_->unit(u);  // m and v as stored; the scales (one host) the unit's
    UnitState& unit = units_[u].state;
    unit.master = at::empty({n}, on_device.dtype(at::kFloat));
    unit.m = at::empty({n}, on_device.dtype(host.m.scalar_type()));
    unit.v = at::empty({n}, on_device.dtype(host.v.scalar_type()));
    if (host.m_scale.defined()) {
      unit.m_scale = at::empty(host.m_scale.sizes(), on_device.dtype(at::kFloat));
      unit.v_scale = at::empty(host.v_scale.sizes(), on_device.dtype(at::kFloat));
    }
    unit.grad = at::zeros({n}, on_device.dtype(at::kFloat));
    if (hosts_ != nullptr && device.is_cuda() && host_grad_.numel() < n) {
      host_grad_ = at::empty({n}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    }
  }
  return absl::OkStatus();
}

ResidentState::~ResidentState() {
  // The updates in flight read and write buffers freed with this object (none where
  // Create failed before the unit's streams).
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!resident(static_cast<int>(u)) || streams_[owner(static_cast<int>(u))] == nullptr) continue;
    streams_[owner(static_cast<int>(u))]->HostWait(updated(static_cast<int>(u)));
  }
}

void ResidentState::SetGradReady(int u, const Event& e) {
  absl::MutexLock lock(&mu_);
  units_[u].grad_ready = e;
}

Event ResidentState::updated(int u) {
  absl::MutexLock lock(&mu_);
  return units_[u].updated;
}

void ResidentState::Update(int u, const AdamWHyper& h, const std::vector<float>& decay, int threads) {
  Unit& unit = units_[u];
  UnitState& s = unit.state;
  DeviceStreams& streams = *streams_[owner(u)];
  const UnitLayout& layout = state_->layout().units[u];
  Event ready;
  {
    absl::MutexLock lock(&mu_);
    ready = unit.grad_ready;
  }
  streams.Wait(StreamKind::kCompute, ready);
  {
    const std::unique_ptr<StreamUse> use = streams.Use(StreamKind::kCompute);
    const std::vector<DecaySpan> spans = DecaySpansOf(layout, decay, 0, layout.numel);
    if (s.master.is_cuda()) {
      RunDeviceAdamW(s, h, spans);
    } else {
      // The CPU device: the host path's call (update_pipeline.cc; with fp32 moments the
      // bits of AdamWUpdate) on the unit's own buffers, the whole unit at once (its
      // element 0 is index 0).
      AdamWUpdateStored(h, spans, s.master.numel(), s.master.data_ptr<float>(), s.grad.data_ptr<float>(), nullptr,
                        MomentsOf(state_->moment_dtype(), s), /*first_index=*/0, threads);
    }
  }
  const Event done = streams.Record(StreamKind::kCompute);
  absl::MutexLock lock(&mu_);
  unit.updated = done;
}

std::vector<ResidentState::StatePair> ResidentState::StatePairs(int u) {
  const int64_t sb = state_->shard_begin(u), n = state_->shard_end(u) - sb;
  const UnitState& host = state_->unit(u);
  const UnitState& unit = units_[u].state;
  std::vector<StatePair> pairs = {{host.master, unit.master, sb, n}, {host.m, unit.m, sb, n}, {host.v, unit.v, sb, n}};
  if (host.m_scale.defined()) {  // one host (Create): the shard is the unit
    pairs.push_back({host.m_scale, unit.m_scale, 0, host.m_scale.numel()});
    pairs.push_back({host.v_scale, unit.v_scale, 0, host.v_scale.numel()});
  }
  return pairs;
}

at::Tensor ResidentState::GradToHost(int u) {
  Event ready;
  {
    absl::MutexLock lock(&mu_);
    ready = units_[u].grad_ready;
  }
  streams_[owner(u)]->HostWait(ready);
  const at::Tensor& grad = units_[u].state.grad;
  if (!grad.is_cuda()) return grad;  // the CPU device: summed where it is
  at::Tensor host = host_grad_.narrow(0, 0, grad.numel());
  host.copy_(grad);  // synchronous: complete on return
  return host;
}

void ResidentState::GradFromHost(int u, const at::Tensor& host) {
  at::Tensor grad = units_[u].state.grad;
  // Synchronous, so that the update issued after this call reads the sum.
  if (!host.is_same(grad)) grad.copy_(host);
}

void ResidentState::ToHost() {
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!resident(u)) continue;
    streams_[owner(u)]->HostWait(updated(u));
    const UnitState& unit = units_[u].state;
    for (const StatePair& pair : StatePairs(u)) {
      at::Tensor(pair.host).copy_(pair.device.narrow(0, pair.begin, pair.length));
    }
    // The streamed copy follows the master: refreshed from it on one host; over several
    // the host holds a shard of the master, so the whole unit's copy is cast from the
    // replica's (the same bits on every host).
    if (hosts_ == nullptr) {
      state_->RefreshParams(u, 0, unit.master.numel());
    } else {
      state_->unit(u).params.copy_(unit.master.to(state_->compute_dtype()));
    }
  }
}

absl::Status ResidentState::FromHost() {
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!resident(u)) continue;
    streams_[owner(u)]->HostWait(updated(u));
    for (const StatePair& pair : StatePairs(u)) {
      if (hosts_ == nullptr) {
        pair.device.narrow(0, pair.begin, pair.length).copy_(pair.host);
        continue;
      }
      // Several hosts (fp32 moments, Create): each holds its shard; every host gathers
      // the whole unit.
      at::Tensor whole = at::zeros({pair.device.numel()}, at::kFloat);
      whole.narrow(0, pair.begin, pair.length).copy_(pair.host);
      if (absl::Status s = hosts_->AllGather(whole); !s.ok()) return s;
      at::Tensor(pair.device).copy_(whole);
    }
  }
  return absl::OkStatus();
}

#if !defined(SLIDEDP_TORCH_CUDA)
void RunDeviceAdamW(const UnitState&, const AdamWHyper&, const std::vector<DecaySpan>&, int64_t, const at::Tensor&) {
  throw std::runtime_error("resident units on a GPU: this build has no CUDA kernels");
}
#endif

}  // namespace slidedp
