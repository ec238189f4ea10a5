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
namespace {

// A host buffer of the state as a tensor (the moments are raw pointers).
at::Tensor HostTensor(void* p, int64_t n, at::ScalarType t) { return at::from_blob(p, {n}, at::TensorOptions().dtype(t)); }

// The element types of stored m and v (moment_codec.h).
at::ScalarType MType(MomentDtype d) {
  return d == MomentDtype::kFp32 ? at::kFloat : d == MomentDtype::kBf16 ? at::kBFloat16 : at::kChar;
}
at::ScalarType VType(MomentDtype d) {
  return d == MomentDtype::kFp32 ? at::kFloat : d == MomentDtype::kBf16 ? at::kBFloat16 : at::kByte;
}
int64_t Blocks(int64_t n) { return (n + kMomentBlock - 1) / kMomentBlock; }

}  // namespace

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
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    const MomentDtype moments = state_->moment_dtype();
    Unit& unit = units_[u];
    unit.master = at::empty({n}, f32);
    unit.m = at::empty({n}, f32.dtype(MType(moments)));
    unit.v = at::empty({n}, f32.dtype(VType(moments)));
    if (moments == MomentDtype::kInt8) {
      unit.m_scale = at::empty({Blocks(n)}, f32);
      unit.v_scale = at::empty({Blocks(n)}, f32);
    }
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
      RunDeviceAdamW(unit.master, h, decay, spans, unit.grad, unit.m, unit.v, unit.m_scale, unit.v_scale,
                     unit.params);
    } else if (state_->moment_dtype() != MomentDtype::kFp32) {
      // The CPU device with compact moments: the host path's call (update_pipeline.cc)
      // on the unit's own buffers, the whole unit at once (its element 0 is index 0).
      std::vector<DecaySpan> spans;
      for (size_t i = 0; i < layout.params.size(); ++i) {
        const ParamSpec& p = layout.params[i];
        spans.push_back({p.offset, p.offset + p.numel, decay[i]});
      }
      MomentView mv;
      mv.dtype = state_->moment_dtype();
      mv.m = unit.m.data_ptr();
      mv.v = unit.v.data_ptr();
      if (unit.m_scale.defined()) {
        mv.m_scale = unit.m_scale.data_ptr<float>();
        mv.v_scale = unit.v_scale.data_ptr<float>();
      }
      AdamWUpdateStored(h, spans, unit.master.numel(), unit.master.data_ptr<float>(), unit.grad.data_ptr<float>(),
                        nullptr, mv, /*first_index=*/0, threads);
      unit.params.copy_(unit.master);
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

std::vector<ResidentState::StatePair> ResidentState::StatePairs(int u) {
  const int64_t sb = state_->shard_begin(u), n = state_->shard_end(u) - sb;
  const MomentView mv = state_->moments(u);
  const MomentDtype d = state_->moment_dtype();
  Unit& unit = units_[u];
  std::vector<StatePair> pairs = {{state_->unit(u).master, unit.master, sb, n},
                                  {HostTensor(mv.m, n, MType(d)), unit.m, sb, n},
                                  {HostTensor(mv.v, n, VType(d)), unit.v, sb, n}};
  if (d == MomentDtype::kInt8) {  // one host (Create): the shard is the unit
    pairs.push_back({HostTensor(mv.m_scale, Blocks(n), at::kFloat), unit.m_scale, 0, Blocks(n)});
    pairs.push_back({HostTensor(mv.v_scale, Blocks(n), at::kFloat), unit.v_scale, 0, Blocks(n)});
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
    for (const StatePair& pair : StatePairs(u)) at::Tensor(pair.host).copy_(pair.device.narrow(0, pair.begin, pair.length));
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
    unit.params.copy_(unit.master);
  }
  return absl::OkStatus();
}

#if !defined(SLIDEDP_TORCH_CUDA)
void RunDeviceAdamW(const at::Tensor&, const AdamWHyper&, const std::vector<float>&,
                    const std::vector<std::pair<int64_t, int64_t>>&, const at::Tensor&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw std::runtime_error("resident units on a GPU: this build has no CUDA kernels");
}
#endif

}  // namespace slidedp
