// ResidentState: the training state of the units that live on a GPU instead of host
// memory (policy.resident_units; which units and which GPU: runtime/plan/residency.h).
// Per resident unit, on its owner's device: the fp32 master and gradient, and m and v as
// optimizer.state_dtype stores them (fp32, bf16, or 8 bits with the blocks' scales); no
// compute copy: the worker casts the master into a parameter slot when it uses the unit
// (routes.h's FetchUnit), the bits a streamed unit's copy would have. Its AdamW runs
// there, on an update stream of its own, as soon as the update pipeline issues it: the
// GPU kernels of runtime/state/adamw_device.h, or on the CPU device the CPU AdamW over
// buffers of their own (the same code path, so CI proves it); both give the bits of the
// unit's update in host memory. Events order it: after the unit's gradient is complete
// (SetGradReady), before the next read of its master (updated). The host state stays
// the authority for durability: ToHost before checkpoints, export and the digest,
// FromHost after a restore.
// Over several hosts (issue 24) every host keeps the same resident units whole on its
// own GPU (replicas): the host state holds only this host's shard of their master, m
// and v, so FromHost gathers the other hosts' shards; each step the owner's gradient is
// summed over the hosts (GradToHost, the update pipeline's link, GradFromHost) and every
// host applies the same AdamW, so the replicas stay bit-identical without gathering
// weights.
// Threads: Create/ToHost/FromHost on the job's thread between steps (updates drained),
// on every host together; SetGradReady and updated from worker threads; Update from the
// pipeline's thread; GradToHost/GradFromHost from the pipeline's link thread.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/engine/device_streams.h"
#include "runtime/plan/residency.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"

namespace slidedp {

class HostGroup;

class ResidentState {
 public:
  // Allocates the resident units of `placement` on `devices[owner]` (one device per
  // rank) and copies their state from `state`. RESOURCE_EXHAUSTED when a GPU cannot
  // hold them; INVALID_ARGUMENT for compact moments over several hosts (their shards
  // are fp32's) or a unit of more parameters than the GPU kernel takes
  // (kMaxDeviceSpans). `hosts` (the trainer's group; null: one host): every host must
  // place the same units (FAILED_PRECONDITION otherwise, and
  // when any host's GPU cannot hold them, this host's included: no host shrinks alone),
  // and their state is gathered from every host's shard.
  static absl::StatusOr<std::unique_ptr<ResidentState>> Create(HostState* state, const Residency& placement,
                                                               const std::vector<at::Device>& devices,
                                                               HostGroup* hosts = nullptr);
  ~ResidentState();

  const Residency& placement() const { return placement_; }
  bool resident(int u) const { return placement_.resident(u); }
  int owner(int u) const { return placement_.owner[u]; }
  // On the owner's device: the fp32 master and gradient ([numel]) of resident unit `u`.
  const at::Tensor& master(int u) const { return units_[u].state.master; }
  const at::Tensor& grad(int u) const { return units_[u].state.grad; }

  // Owner's worker: this step's gradient of `u` is complete in grad(u) at `e`.
  void SetGradReady(int u, const Event& e);
  // Work that reads master(u) and waits for this starts after its last update.
  Event updated(int u);

  // Update pipeline: AdamW of unit `u` with `h` (its weight_decay unused: each
  // parameter's range gets `decay[i]`), after the gradient SetGradReady gave; the CPU
  // device runs it here with `threads` threads, a GPU on its update stream.
  void Update(int u, const AdamWHyper& h, const std::vector<float>& decay, int threads);

  // Several hosts, the update pipeline's link: the owner's gradient of `u`, complete
  // (waits for SetGradReady's event), in a host fp32 buffer of the unit's size (on the
  // CPU device grad(u) itself), to be summed over the hosts in place; GradFromHost then
  // makes the sum the gradient that Update reads. One unit at a time.
  at::Tensor GradToHost(int u);
  void GradFromHost(int u, const at::Tensor& host);

  // The host state's master, m and v of every resident unit (this host's shard) := the
  // device's, and its streamed copy := the master cast to the compute dtype; waits for
  // their updates.
  void ToHost();
  // The device's state of every resident unit := the host state's (several hosts: every
  // host's shard, gathered; all hosts call it together).
  absl::Status FromHost();

 private:
  struct Unit {
    // master, m, v (and the 8-bit scales) and grad, as the host state's types; params
    // undefined (no compute copy).
    UnitState state;
    Event grad_ready, updated;
  };
  // One buffer of a unit's state: this host's part in the host state, beside the
  // device's whole buffer, and where the part lies in it.
  struct StatePair {
    at::Tensor host, device;
    int64_t begin, length;
  };
  ResidentState(HostState* state, const Residency& placement, HostGroup* hosts)
      : state_(state), placement_(placement), hosts_(hosts) {}
  // Allocates the units' buffers (and, over several hosts on a GPU, the gradient's host
  // buffer).
  absl::Status Allocate(const std::vector<at::Device>& devices);
  // Unit u's master, m and v (and the 8-bit moments' scales): this host's shard in the
  // host state (all of the unit on one host) beside the device's buffers.
  std::vector<StatePair> StatePairs(int u);

  HostState* const state_;
  const Residency placement_;
  HostGroup* const hosts_;   // null: one host
  at::Tensor host_grad_;     // several hosts on a GPU: GradToHost's buffer (pinned)
  std::vector<Unit> units_;
  std::vector<std::unique_ptr<DeviceStreams>> streams_;  // per rank; its compute stream runs the updates
  absl::Mutex mu_;  // the events of units_
};

// Runs the GPU AdamW (adamw_device.h) over a resident unit's buffers `s` on the current
// stream of their device, each parameter range of `spans` with its weight decay, the
// moments' kind told by m's dtype (float, bfloat16, or int8 with the scales). The
// buffers' element 0 is element `first_index` of the unit (a multiple of kMomentBlock:
// the 8-bit codes' rounding follows the unit's indices); `out`, when defined, receives
// the new parameters in its dtype (bf16 or fp32; s.params is not read):
// resident_state_cuda.cc with a CUDA LibTorch; elsewhere it throws.
void RunDeviceAdamW(const UnitState& s, const AdamWHyper& h, const std::vector<DecaySpan>& spans,
                    int64_t first_index = 0, const at::Tensor& out = at::Tensor());

}  // namespace slidedp
