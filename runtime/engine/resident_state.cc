// ResidentState: see resident_state.h.
#include "runtime/engine/resident_state.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/model/param_layout.h"

namespace slidedp {
namespace {

// An fp32 host buffer of the state as a tensor (the moments are raw pointers).
at::Tensor HostFloats(void* p, int64_t n) { return at::from_blob(p, {n}, at::TensorOptions().dtype(at::kFloat)); }

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentState>> ResidentState::Create(HostState* state, const Residency& placement,
                                                                     const std::vector<at::Device>& devices) {
  if (placement.units > 0 && state->moment_dtype() != MomentDtype::kFp32) {
    return absl::InvalidArgumentError("policy.resident_units: resident units need optimizer.state_dtype fp32");
  }
  std::unique_ptr<ResidentState> r(new ResidentState(state, placement));
  r->units_.resize(state->num_units());
  r->streams_.resize(devices.size());
  for (int u = 0; u < state->num_units(); ++u) {
    if (!placement.resident(u)) continue;
    const int owner = placement.owner[u];
    if (owner < 0 || owner >= static_cast<int>(devices.size())) {
      return absl::InternalError(absl::StrCat("resident unit ", u, " placed on rank ", owner, " of ", devices.size()));
    }
    const at::Device& device = devices[owner];
    if (r->streams_[owner] == nullptr) {
      absl::StatusOr<std::unique_ptr<DeviceStreams>> s = DeviceStreams::Create(device, /*timing=*/false);
      if (!s.ok()) return s.status();
      r->streams_[owner] = std::move(*s);
    }
    const int64_t n = state->layout().units[u].numel;
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    Unit& unit = r->units_[u];
    unit.master = at::empty({n}, f32);
    unit.m = at::empty({n}, f32);
    unit.v = at::empty({n}, f32);
    unit.grad = at::zeros({n}, f32);
    unit.params = at::empty({n}, f32.dtype(state->compute_dtype()));
  }
  r->FromHost();
  return r;
}

ResidentState::~ResidentState() {
  // The updates in flight read and write buffers freed with this object.
  for (size_t u = 0; u < units_.size(); ++u) {
    if (resident(static_cast<int>(u))) streams_[owner(static_cast<int>(u))]->HostWait(updated(static_cast<int>(u)));
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

void ResidentState::ToHost() { Copy(/*to_host=*/true); }

void ResidentState::FromHost() { Copy(/*to_host=*/false); }

void ResidentState::Copy(bool to_host) {
  for (int u = 0; u < state_->num_units(); ++u) {
    if (!resident(u)) continue;
    streams_[owner(u)]->HostWait(updated(u));
    Unit& unit = units_[u];
    const int64_t n = unit.master.numel();
    const MomentView mv = state_->moments(u);
    const std::pair<at::Tensor, at::Tensor> host_device[] = {
        {state_->unit(u).master, unit.master}, {HostFloats(mv.m, n), unit.m}, {HostFloats(mv.v, n), unit.v}};
    for (const auto& [host, device] : host_device) {
      if (to_host) {
        at::Tensor(host).copy_(device);
      } else {
        at::Tensor(device).copy_(host);
      }
    }
    // The compute copy follows the master on the side that received it.
    if (to_host) {
      state_->RefreshParams(u, 0, n);
    } else {
      unit.params.copy_(unit.master);
    }
  }
}

#if !defined(SLIDEDP_TORCH_CUDA)
void RunDeviceAdamW(const at::Tensor&, const AdamWHyper&, const std::vector<float>&,
                    const std::vector<std::pair<int64_t, int64_t>>&, const at::Tensor&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&) {
  throw std::runtime_error("resident units on a GPU: this build has no CUDA kernels");
}
#endif

}  // namespace slidedp
