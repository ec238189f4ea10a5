// StagedUpdates: the AdamW of the streamed units that policy.staged_updates names
// (runtime/plan/residency.h's PlaceStaged: the last ones that are not resident) on a
// GPU instead of the CPU, beside the CPU's updates of the others. Chunk by chunk through
// two staging buffers per GPU: the unit's fp32 master, m and v (and the 8-bit scales)
// and its landed gradient (fp32, or bf16 in the streamed copy) are copied from the host
// state on the GPU's H2D stream, updated on its compute stream by the resident units'
// kernels (RunDeviceAdamW: the CPU's arithmetic, bit for bit), and copied back with the
// new streamed copy on its D2H stream; the next chunk's copies in overlap the last
// one's copies out. The host state stays where the unit lives: nothing of it stays on
// the GPU. On a GPU the host buffers of the staged units are page-locked while this
// object lives (cudaHostRegister), so that the copies are asynchronous. On the CPU
// device the same path runs over buffers of its own with the CPU AdamW (CI proves it).
// Threads: Create and the destructor on the job's thread between steps (updates
// drained); Issue from the update pipeline's thread; `done` on a completion thread of
// this object's (inline on the CPU device).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/engine/device_streams.h"
#include "runtime/engine/serial_executor.h"
#include "runtime/plan/residency.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"

namespace slidedp {

class StagedUpdates {
 public:
  // Allocates the staging buffers on each rank's device (`devices`, one per rank) that
  // `staging` gives a unit, and page-locks the staged units' host buffers on a GPU.
  // RESOURCE_EXHAUSTED when a GPU cannot hold the buffers; INVALID_ARGUMENT when the
  // host state is a shard (several hosts) or a staged unit has more parameters than
  // the GPU kernel takes (kMaxDeviceSpans).
  static absl::StatusOr<std::unique_ptr<StagedUpdates>> Create(HostState* state, const Staging& staging,
                                                               const std::vector<at::Device>& devices);
  ~StagedUpdates();  // waits for the updates in flight

  bool staged(int u) const { return u >= 0 && u < static_cast<int>(staging_.lane.size()) && staging_.lane[u] >= 0; }
  const Staging& staging() const { return staging_; }

  // Issues unit u's AdamW with `h` (its weight_decay unused: each parameter's range gets
  // decay[i]) on its GPU; `done` gets OK once the host state holds the update (master, m,
  // v, the streamed copy), or the error. A CUDA launch error throws here instead.
  void Issue(int u, const AdamWHyper& h, const std::vector<float>& decay, std::function<void(absl::Status)> done);

 private:
  // One staging buffer: a chunk's state on the device, and when its last copy out ends.
  struct Buffer {
    UnitState state;  // master, grad (fp32), m, v (and scales) as stored; params: the
                      // streamed copy's dtype (the bf16 gradient in, the new copy out)
    Event free;
  };
  struct Lane {
    std::unique_ptr<DeviceStreams> streams;
    Buffer buffers[2];
    int next = 0;
  };
  StagedUpdates(HostState* state, const Staging& staging) : state_(state), staging_(staging) {}
  absl::Status Allocate(const std::vector<at::Device>& devices);
  // One chunk [b, e) of unit u through the lane's next buffer; returns its copies out.
  Event Chunk(Lane& lane, int u, int64_t b, int64_t e, const AdamWHyper& h, const std::vector<float>& decay);

  HostState* const state_;
  const Staging staging_;
  std::vector<Lane> lanes_;                          // per rank (no streams: no staged unit)
  std::vector<std::shared_ptr<void>> page_locks_;    // the host buffers registered on a GPU
  std::unique_ptr<SerialExecutor> completions_;
};

}  // namespace slidedp
