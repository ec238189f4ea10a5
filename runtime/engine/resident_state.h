// ResidentState: the training state of the units that live on a GPU instead of host
// memory (policy.resident_units; which units and which GPU: runtime/plan/residency.h).
// Per resident unit, on its owner's device: the fp32 master, m, v and gradient, and the
// compute copy that the forward and backward read in place of a streamed slot. Its
// AdamW runs there, on an update stream of its own, as soon as the update pipeline
// issues it: the GPU kernel of runtime/state/adamw_device.h, or on the CPU device the
// CPU AdamW over buffers of their own (the same code path, so CI proves it). Events
// order it: after the unit's gradient is complete (SetGradReady), before the next read
// of its parameters (updated). The host state stays the authority for durability:
// ToHost before checkpoints, export and the digest, FromHost after a restore.
// Threads: Create/ToHost/FromHost on the job's thread between steps (updates drained);
// SetGradReady and updated from worker threads; Update from the pipeline's thread.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/engine/device_streams.h"
#include "runtime/plan/residency.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"

namespace slidedp {

class ResidentState {
 public:
  // Allocates the resident units of `placement` on `devices[owner]` (one device per
  // rank) and copies their state from `state`, which must hold fp32 moments.
  // RESOURCE_EXHAUSTED when a GPU cannot hold them.
  static absl::StatusOr<std::unique_ptr<ResidentState>> Create(HostState* state, const Residency& placement,
                                                               const std::vector<at::Device>& devices);
  ~ResidentState();

  const Residency& placement() const { return placement_; }
  bool resident(int u) const { return placement_.resident(u); }
  int owner(int u) const { return placement_.owner[u]; }
  // On the owner's device: the compute copy ([numel], compute dtype) and the fp32
  // gradient ([numel]) of resident unit `u`.
  const at::Tensor& params(int u) const { return units_[u].params; }
  const at::Tensor& grad(int u) const { return units_[u].grad; }

  // Owner's worker: this step's gradient of `u` is complete in grad(u) at `e`.
  void SetGradReady(int u, const Event& e);
  // Work that reads params(u) and waits for this starts after its last update.
  Event updated(int u);

  // Update pipeline: AdamW of unit `u` with `h` (its weight_decay unused: each
  // parameter's range gets `decay[i]`), after the gradient SetGradReady gave; the CPU
  // device runs it here with `threads` threads, a GPU on its update stream.
  void Update(int u, const AdamWHyper& h, const std::vector<float>& decay, int threads);

  // The host state's master, m and v of every resident unit := the device's (and its
  // streamed copy refreshed from the master); waits for their updates.
  void ToHost();
  // The device's state of every resident unit := the host state's.
  void FromHost();

 private:
  struct Unit {
    at::Tensor master, m, v, grad, params;
    Event grad_ready, updated;
  };
  ResidentState(HostState* state, const Residency& placement) : state_(state), placement_(placement) {}
  // ToHost (`to_host`) or FromHost: master, m and v of every resident unit, then the
  // receiving side's compute copy from its master.
  void Copy(bool to_host);

  HostState* const state_;
  const Residency placement_;
  std::vector<Unit> units_;
  std::vector<std::unique_ptr<DeviceStreams>> streams_;  // per rank; its compute stream runs the updates
  absl::Mutex mu_;  // the events of units_
};

// Runs the GPU AdamW (adamw_device.h) on the current stream of the buffers' device:
// resident_state_cuda.cc with a CUDA LibTorch; elsewhere it throws.
void RunDeviceAdamW(const at::Tensor& master, const AdamWHyper& h, const std::vector<float>& decay,
                    const std::vector<std::pair<int64_t, int64_t>>& spans, const at::Tensor& grad,
                    const at::Tensor& m, const at::Tensor& v, const at::Tensor& params);

}  // namespace slidedp
