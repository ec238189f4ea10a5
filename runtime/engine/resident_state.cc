// ResidentState: see resident_state.h.
#include "runtime/engine/resident_state.h"

#include <array>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/host_group.h"
#include "runtime/model/param_layout.h"

namespace slidedp {
namespace {

// An fp32 host buffer of the state as a tensor (the moments are raw pointers).
at::Tensor HostFloats(void* p, int64_t n) { return at::from_blob(p, {n}, at::TensorOptions().dtype(at::kFloat)); }

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentState>> ResidentState::Create(HostState* state, const Residency& placement,
                                                                     const std::vector<at::Device>& devices,
                                                                     HostGroup* hosts) {
  if (placement.units > 0 && state->moment_dtype() != MomentDtype::kFp32) {
    return absl::InvalidArgumentError("policy.resident_units: resident units need optimizer.state_dtype fp32");
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
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    Unit& unit = units_[u];
    unit.master = at::empty({n}, f32);
    unit.m = at::empty({n}, f32);
    unit.v = at::empty({n}, f32);
    unit.grad = at::zeros({n}, f32);
    unit.params = at::empty({n}, f32.dtype(state_->compute_dtype()));
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
    if (unit.master.is_cuda()) {
      std::vector<std::pair<int64_t, int64_t>> spans;
      for (const ParamSpec& p : layout.params) spans.emplace_back(p.offset, p.numel);
      RunDeviceAdamW(unit.master, h, decay, spans, unit.grad, unit.m, unit.v, unit.params);
    } else {
      // The CPU device: the host path's arithmetic on the unit's own buffers.
      for (size_t i = 0; i < layout.params.size(); ++i) {
        const ParamSpec& p = layout.params[i];
        AdamWHyper hp = h;
        hp.weight_decay = decay[i];
        AdamWUpdate(hp, p.numel, unit.master.data_ptr<float>() + p.offset, unit.grad.data_ptr<float>() + p.offset,
                    unit.m.data_ptr<float>() + p.offset, unit.v.data_ptr<float>() + p.offset, threads);
      }
      unit.params.copy_(unit.master);
    }
  }
  const Event done = streams.Record(StreamKind::kCompute);
  absl::MutexLock lock(&mu_);
  unit.updated = done;
}

std::array<std::pair<at::Tensor, at::Tensor>, 3> ResidentState::ShardPairs(int u) {
  const int64_t n = state_->shard_end(u) - state_->shard_begin(u);
  const MomentView mv = state_->moments(u);
  Unit& unit = units_[u];
  return {{{state_->unit(u).master, unit.master}, {HostFloats(mv.m, n), unit.m}, {HostFloats(mv.v, n), unit.v}}};
}

at::Tensor ResidentState::GradToHost(int u) {
  Event ready;
  {
    absl::MutexLock lock(&mu_);
    ready = units_[u].grad_ready;
  }
  streams_[owner(u)]->HostWait(ready);
  const at::Tensor& grad = units_[u].grad;
  if (!grad.is_cuda()) return grad;  // the CPU device: summed where it is
  at::Tensor host = host_grad_.narrow(0, 0, grad.numel());
  host.copy_(grad);  // synchronous: complete on return
  return host;
}

void ResidentState::GradFromHost(int u, const at::Tensor& host) {
  at::Tensor grad = units_[u].grad;
  // Synchronous, so that the update issued after this call reads the sum.
  if (!host.is_same(grad)) grad.copy_(host);
}

void ResidentState::ToHost() {
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!resident(u)) continue;
    streams_[owner(u)]->HostWait(updated(u));
    Unit& unit = units_[u];
    const int64_t sb = state_->shard_begin(u), se = state_->shard_end(u);
    for (const auto& [host, device] : ShardPairs(u)) at::Tensor(host).copy_(device.narrow(0, sb, se - sb));
    // The streamed copy follows the master: refreshed from it on one host; over several
    // the replica's copy is the whole unit's (the same bits on every host).
    if (hosts_ == nullptr) {
      state_->RefreshParams(u, 0, unit.master.numel());
    } else {
      state_->unit(u).params.copy_(unit.params);
    }
  }
}

absl::Status ResidentState::FromHost() {
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!resident(u)) continue;
    streams_[owner(u)]->HostWait(updated(u));
    Unit& unit = units_[u];
    const int64_t n = unit.master.numel();
    const int64_t sb = state_->shard_begin(u), se = state_->shard_end(u);
    for (const auto& [host, device] : ShardPairs(u)) {
      if (hosts_ == nullptr) {
        at::Tensor(device).copy_(host);
        continue;
      }
      // Several hosts: each holds its shard; every host gathers the whole unit.
      at::Tensor whole = at::zeros({n}, at::kFloat);
      whole.narrow(0, sb, se - sb).copy_(host);
      if (absl::Status s = hosts_->AllGather(whole); !s.ok()) return s;
      at::Tensor(device).copy_(whole);
    }
    unit.params.copy_(unit.master);
  }
  return absl::OkStatus();
}

#if !defined(SLIDEDP_TORCH_CUDA)
void RunDeviceAdamW(const at::Tensor&, const AdamWHyper&, const std::vector<float>&,
                    const std::vector<std::pair<int64_t, int64_t>>&, const at::Tensor&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&) {
  throw std::runtime_error("resident units on a GPU: this build has no CUDA kernels");
}
#endif

}  // namespace slidedp
