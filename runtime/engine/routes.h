// Routes: how a unit's parameters reach a worker's device and how its gradient gets
// back into the host state (DESIGN.md, "Routes"). The host layout is the same for
// every route. Each function is called by every worker's thread for the same unit in
// the same order (they meet inside the communicator).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/communicator.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/state/host_state.h"

namespace slidedp {

enum class ParamRoute { kReplicate, kScatterAllGather };
enum class GradRoute { kGatherHost, kReduceScatter, kReduceOne };

absl::StatusOr<ParamRoute> ParseParamRoute(const std::string& name);
absl::StatusOr<GradRoute> ParseGradRoute(const std::string& name);

// State the workers of one job share for the routes: the communicator, one gradient
// landing buffer per worker (gather_host) and per-rank partial squared norms.
struct RouteShared {
  RouteShared(int world, int64_t max_unit_numel, bool pin);
  HostCommunicator comm;
  std::vector<at::Tensor> landing;  // fp32 [max_unit_numel] per worker but rank 0
  std::vector<double> partial_sumsq;  // written by rank r, read by rank 0 between barriers
};

struct TransferCounters {
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
};

// Brings unit `u`'s streamed parameters into a new device tensor [numel] of the compute
// dtype on `device`, chunk by chunk.
at::Tensor FetchUnit(ParamRoute route, int rank, RouteShared& shared, HostState& state, int u,
                     const at::Device& device, TransferCounters& counters);

// Reduces every worker's gradient `grad` ([numel] of unit u) into state.unit(u).grad
// and tells the pipeline (exactly one rank calls GradLanded).
void ReduceUnitGrad(GradRoute route, int rank, RouteShared& shared, HostState& state, int u,
                    int64_t step, const at::Tensor& grad, UpdatePipeline& pipeline,
                    TransferCounters& counters);

}  // namespace slidedp
