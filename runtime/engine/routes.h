// Routes: how a unit's parameters reach a worker's device and how its gradient gets
// back into the host state (DESIGN.md, "Routes"), over the worker's streams. The host
// layout is the same for every route. Every worker calls the same route functions for
// the same unit in the same order (they meet inside the communicator); the landing
// side (CompleteGradLanding) runs on each worker's landing thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/engine/communicator.h"
#include "runtime/engine/device_streams.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config_enums.h"

namespace slidedp {

// ParamRoute, GradRoute and DeviceReducesGradient: runtime/train_config_enums.h.

// State the workers of one job share for the routes.
struct RouteShared {
  // `device_comm`: the collectives among the workers' devices (NCCL on GPUs, host
  // memory on the CPU device); null when world is 1.
  RouteShared(int world, int64_t max_unit_numel, int units, bool pin, bool host_sum,
              std::unique_ptr<Communicator> device_comm);
  const int world;
  std::unique_ptr<Communicator> comm;  // worker threads' collectives
  // The units whose state lives on a GPU (null: none): their parameters come from the
  // owner's copy (broadcast to the other ranks), their gradients reduce to the owner.
  ResidentState* resident = nullptr;
  HostCommunicator land_comm;          // landing threads' barriers (gather_host sums)
  std::vector<at::Tensor> landing;     // gather_host, world > 1: fp32 [max] per rank
  std::vector<double> partial_sumsq;   // gather_host: rank r's slice, between barriers

  // Partial norms of the device-reduced routes, per unit: the last rank to land a
  // unit adds them up and tells the pipeline.
  absl::Mutex mu;
  std::vector<int> arrived ABSL_GUARDED_BY(mu);
  std::vector<double> sumsq ABSL_GUARDED_BY(mu);
};

struct TransferCounters {
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
};

// Copies unit `u`'s streamed parameters into `slot` ([numel] of the compute dtype on the
// worker's device): the H2D stream waits for `slot_free`, copies (this rank's 1/W for
// scatter_allgather, then the all-gather on the collective stream). Returns the event
// after which `slot` holds the unit. A resident unit (shared.resident) is not copied
// over the link: its owner casts its master into `slot` on the H2D stream after the
// unit's last update, and with several ranks broadcasts it from there on the
// collective stream to the others' slots.
Event FetchUnit(ParamRoute route, int rank, RouteShared& shared, HostState& state, int u,
                at::Tensor slot, DeviceStreams& streams, const Event& slot_free,
                TransferCounters& counters);

// Device buffers one gradient landing uses, allocated once by the worker.
struct LandingBuffers {
  at::Tensor down;        // compute dtype [max numel]: the bf16 values copied down
  at::Tensor slice;       // fp32 [ceil(max numel / W)]: this rank's reduce-scatter slice
  at::Tensor reduced;     // fp32 [max numel] on rank 0 for reduce_one (world > 1)
  at::Tensor sumsq_dev;   // fp64 [units] on the device
  at::Tensor sumsq_host;  // fp64 [units], pinned
};

// What the landing thread finishes for one unit.
struct Landing {
  int unit = 0;
  int64_t step = 0;
  Event copied;   // the copies down (and the norm) are in host memory after this
  bool lands = true;  // false: this rank sends nothing down (reduce_one, rank > 0)
  bool resident = false;  // the unit's gradient stays on its owner's GPU; only its norm lands
};

// Issues the device part of unit `u`'s gradient route: `grad` ([numel] fp32 on the
// device, this worker's sum over its micro-batches) is complete at `ready` (compute).
// Reduces across devices if the route does, computes the squared norm on the device,
// converts to the landing dtype and copies down on the D2H stream. A resident unit's
// gradient goes to its owner's resident buffer instead (a copy, or a reduce to the
// owner whatever the route; `grad` may be that buffer itself on the owner, as a
// resident kept block's is, then no copy and an in-place reduce), and only its squared
// norm is copied down.
Landing IssueGradLanding(GradRoute route, int rank, RouteShared& shared, HostState& state, int u,
                         int64_t step, const at::Tensor& grad, const Event& ready,
                         LandingBuffers& bufs, DeviceStreams& streams, TransferCounters& counters);

// Landing thread: waits for the copies, does the host part of the route (gather_host
// sums with the other ranks) and, once every rank's part is in, tells the pipeline.
absl::Status CompleteGradLanding(GradRoute route, int rank, RouteShared& shared, HostState& state,
                                 const Landing& l, const LandingBuffers& bufs, DeviceStreams& streams,
                                 UpdatePipeline& pipeline);

}  // namespace slidedp
