// Routes on the CPU device (copies and host reductions); see routes.h.
#include "runtime/engine/routes.h"

#include "absl/status/status.h"
#include "runtime/state/adamw.h"

namespace slidedp {
namespace {

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Squared norm of a landed host gradient, on the shared AdamW pool (all cores).
double HostSumSquares(const at::Tensor& t) {
  return SumSquares(t.data_ptr<float>(), t.numel(), /*threads=*/0);
}

// The device gradient in fp32, so that the copy down lands in the host's dtype with
// no conversion on the CPU.
at::Tensor Fp32(const at::Tensor& grad) { return grad.to(at::kFloat); }

}  // namespace

absl::StatusOr<ParamRoute> ParseParamRoute(const std::string& name) {
  if (name == "replicate") return ParamRoute::kReplicate;
  if (name == "scatter_allgather") return ParamRoute::kScatterAllGather;
  return absl::InvalidArgumentError("policy.param_route: unknown route '" + name +
                                    "' (replicate, scatter_allgather)");
}

absl::StatusOr<GradRoute> ParseGradRoute(const std::string& name) {
  if (name == "gather_host") return GradRoute::kGatherHost;
  if (name == "reduce_scatter") return GradRoute::kReduceScatter;
  if (name == "reduce_one") return GradRoute::kReduceOne;
  return absl::InvalidArgumentError("policy.grad_route: unknown route '" + name +
                                    "' (gather_host, reduce_scatter, reduce_one)");
}

RouteShared::RouteShared(int world, int64_t max_unit_numel, bool pin)
    : comm(world), partial_sumsq(world, 0.0) {
  // Rank 0 lands straight in the host state's gradient; the others need a buffer.
  landing.resize(world);
  for (int r = 1; r < world; ++r) {
    landing[r] = at::empty({max_unit_numel}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pin));
  }
}

at::Tensor FetchUnit(ParamRoute route, int rank, RouteShared& shared, HostState& state, int u,
                     const at::Device& device, TransferCounters& counters) {
  const at::Tensor& host = state.unit(u).params;
  at::Tensor slot = at::empty({host.numel()}, host.options().device(device).pinned_memory(false));
  // From pinned memory the copy is asynchronous on the device's stream. The host copy is
  // not rewritten before it has run: the unit's update waits for its gradient, which
  // the same stream produces after this copy.
  const bool async = host.is_pinned() && device.is_cuda();
  if (route == ParamRoute::kReplicate) {
    for (const Chunk& c : state.chunks(u)) {
      if (c.end > c.begin) slot.narrow(0, c.begin, c.end - c.begin).copy_(host.narrow(0, c.begin, c.end - c.begin), async);
    }
    counters.h2d_bytes += Bytes(host);
    return slot;
  }
  // scatter_allgather: this rank copies its 1/W, the all-gather brings the rest.
  auto [b, e] = SliceOf(host.numel(), shared.comm.world(), rank);
  if (e > b) slot.narrow(0, b, e - b).copy_(host.narrow(0, b, e - b), async);
  counters.h2d_bytes += (e - b) * static_cast<int64_t>(host.element_size());
  shared.comm.AllGather(rank, slot);
  return slot;
}

void ReduceUnitGrad(GradRoute route, int rank, RouteShared& shared, HostState& state, int u,
                    int64_t step, const at::Tensor& grad, UpdatePipeline& pipeline,
                    TransferCounters& counters) {
  at::Tensor host_grad = state.unit(u).grad;
  const int64_t n = host_grad.numel();
  const int world = shared.comm.world();
  switch (route) {
    case GradRoute::kGatherHost: {
      // Each worker copies its whole gradient down; the CPU sums the W buffers, each
      // rank's thread summing its slice of them.
      at::Tensor mine = rank == 0 ? host_grad : shared.landing[rank].narrow(0, 0, n);
      mine.copy_(Fp32(grad));
      counters.d2h_bytes += Bytes(mine);
      shared.comm.Barrier(rank);
      auto [b, e] = SliceOf(n, world, rank);
      at::Tensor out = host_grad.narrow(0, b, e - b);
      for (int r = 1; r < world; ++r) out.add_(shared.landing[r].narrow(0, b, e - b));
      shared.partial_sumsq[rank] = HostSumSquares(out);
      break;
    }
    case GradRoute::kReduceScatter: {
      // The collective sums on the devices; each worker copies down 1/W of the sum.
      auto [b, e] = SliceOf(n, world, rank);
      at::Tensor slice = at::empty({e - b}, grad.options().dtype(at::kFloat));
      shared.comm.ReduceScatter(rank, grad, slice);
      host_grad.narrow(0, b, e - b).copy_(slice);
      counters.d2h_bytes += Bytes(slice);
      shared.partial_sumsq[rank] = HostSumSquares(host_grad.narrow(0, b, e - b));
      break;
    }
    case GradRoute::kReduceOne: {
      // The collective sums onto rank 0, which copies the whole sum down.
      at::Tensor sum = rank == 0 ? at::empty({n}, grad.options().dtype(at::kFloat)) : at::Tensor();
      shared.comm.Reduce(rank, grad, sum, /*root=*/0);
      if (rank == 0) {
        host_grad.copy_(sum);
        counters.d2h_bytes += Bytes(sum);
        pipeline.GradLanded(u, step, HostSumSquares(host_grad));
      }
      return;
    }
  }
  // gather_host and reduce_scatter: rank 0 totals the partial norms once all are in.
  shared.comm.Barrier(rank);
  if (rank == 0) {
    double total = 0.0;
    for (double s : shared.partial_sumsq) total += s;
    pipeline.GradLanded(u, step, total);
  }
}

}  // namespace slidedp
