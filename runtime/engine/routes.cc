// Routes over a worker's streams; see routes.h. On the CPU device every stream is the
// calling thread and every copy is done when issued, so the same code is synchronous.
#include "runtime/engine/routes.h"

#include "absl/status/status.h"
#include "runtime/state/adamw.h"

namespace slidedp {
namespace {

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Copies are asynchronous (on the current stream) between pinned host memory and a GPU.
bool Async(const at::Tensor& host, const at::Tensor& dev) { return host.is_pinned() && dev.is_cuda(); }
// The same for the host state's streamed copy and gradient (HostState::pinned()).
bool Async(const HostState& state, const at::Tensor& dev) { return state.pinned() && dev.is_cuda(); }

}  // namespace

RouteShared::RouteShared(int w, int64_t max_unit_numel, int units, bool pin, bool host_sum,
                         std::unique_ptr<Communicator> device_comm)
    : world(w), comm(std::move(device_comm)), land_comm(w), partial_sumsq(w, 0.0),
      arrived(units, 0), sumsq(static_cast<size_t>(units) * w, 0.0) {
  if (host_sum) {
    for (int r = 0; r < w; ++r) {
      landing.push_back(at::empty({max_unit_numel}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pin)));
    }
  }
}

namespace {

// FetchUnit of a resident unit: its owner casts the master into the slot after the
// unit's last update (a kernel on the H2D stream, no link traffic: the bits of the
// streamed copy, which is the master cast the same way) and broadcasts it from there to
// the other ranks, which receive it in theirs. Every rank's compute stream waits for
// the broadcast, so that no rank reuses the slot while it is being sent.
Event FetchResident(int rank, RouteShared& shared, int u, at::Tensor slot, DeviceStreams& streams,
                    const Event& slot_free) {
  ResidentState& resident = *shared.resident;
  const int owner = resident.owner(u);
  streams.Wait(StreamKind::kH2D, slot_free);
  if (rank == owner) {
    streams.Wait(StreamKind::kH2D, resident.updated(u));
    auto use = streams.Use(StreamKind::kH2D);
    slot.copy_(resident.master(u));
  }
  const Event cast = streams.Record(StreamKind::kH2D);
  if (shared.world == 1) return cast;
  // The H2D stream carries the slot's previous use (the caller's wait for it, or
  // slot_free above) to the collective stream.
  streams.Wait(StreamKind::kCollective, cast);
  {
    auto use = streams.Use(StreamKind::kCollective);
    shared.comm->Broadcast(rank, slot, owner);
  }
  return streams.Record(StreamKind::kCollective);
}

}  // namespace

Event FetchUnit(ParamRoute route, int rank, RouteShared& shared, HostState& state, int u,
                at::Tensor slot, DeviceStreams& streams, const Event& slot_free,
                TransferCounters& counters) {
  if (shared.resident != nullptr && shared.resident->resident(u)) {
    return FetchResident(rank, shared, u, slot, streams, slot_free);
  }
  const at::Tensor& host = state.unit(u).params;
  const bool async = Async(state, slot);
  streams.Wait(StreamKind::kH2D, slot_free);
  if (route == ParamRoute::kReplicate || shared.world == 1) {
    // Each worker copies the whole unit over its own link, chunk by chunk.
    auto use = streams.Use(StreamKind::kH2D);
    for (const Chunk& c : state.chunks(u)) {
      if (c.end > c.begin) slot.narrow(0, c.begin, c.end - c.begin).copy_(host.narrow(0, c.begin, c.end - c.begin), async);
    }
    counters.h2d_bytes += Bytes(host);
    return streams.Record(StreamKind::kH2D);
  }
  // scatter_allgather: this rank copies its 1/W, the all-gather brings the rest.
  auto [b, e] = SliceOf(host.numel(), shared.world, rank);
  {
    auto use = streams.Use(StreamKind::kH2D);
    if (e > b) slot.narrow(0, b, e - b).copy_(host.narrow(0, b, e - b), async);
  }
  counters.h2d_bytes += (e - b) * static_cast<int64_t>(host.element_size());
  streams.Wait(StreamKind::kCollective, streams.Record(StreamKind::kH2D));
  {
    auto use = streams.Use(StreamKind::kCollective);
    shared.comm->AllGather(rank, slot);
  }
  return streams.Record(StreamKind::kCollective);
}

Landing IssueGradLanding(GradRoute route, int rank, RouteShared& shared, HostState& state, int u,
                         int64_t step, const at::Tensor& grad, const Event& ready,
                         LandingBuffers& bufs, DeviceStreams& streams, TransferCounters& counters) {
  Landing l;
  l.unit = u;
  l.step = step;
  const int world = shared.world;
  const int64_t n = grad.numel();
  if (shared.resident != nullptr && shared.resident->resident(u)) {
    // The sum goes to the owner's resident gradient; the owner's norm goes down.
    ResidentState& resident = *shared.resident;
    const int owner = resident.owner(u);
    l.resident = true;
    l.lands = rank == owner;
    const StreamKind on = world > 1 ? StreamKind::kCollective : StreamKind::kCompute;
    streams.Wait(on, ready);
    {
      auto use = streams.Use(on);
      if (world > 1) {
        shared.comm->Reduce(rank, grad, l.lands ? resident.grad(u) : at::Tensor(), owner);
      } else if (!grad.is_same(resident.grad(u))) {  // a kept block accumulates there itself
        resident.grad(u).copy_(grad);
      }
      if (l.lands) {
        at::Tensor norm = at::linalg_vector_norm(resident.grad(u), 2, c10::nullopt, false, at::kDouble);
        bufs.sumsq_dev.narrow(0, u, 1).copy_(norm.square().reshape({1}));
      }
    }
    const Event reduced = streams.Record(on);
    if (!l.lands) {
      l.copied = reduced;
      return l;
    }
    resident.SetGradReady(u, reduced);
    streams.Wait(StreamKind::kD2H, reduced);
    {
      auto use = streams.Use(StreamKind::kD2H);
      bufs.sumsq_host.narrow(0, u, 1).copy_(bufs.sumsq_dev.narrow(0, u, 1), Async(bufs.sumsq_host, bufs.sumsq_dev));
    }
    l.copied = streams.Record(StreamKind::kD2H);
    return l;
  }
  UnitState& hs = state.unit(u);
  if (!DeviceReducesGradient(route, world)) {
    // gather_host: every worker copies its whole fp32 gradient down; the landing
    // threads sum the W buffers.
    streams.Wait(StreamKind::kD2H, ready);
    auto use = streams.Use(StreamKind::kD2H);
    at::Tensor dst = shared.landing[rank].narrow(0, 0, n);
    dst.copy_(grad, Async(dst, grad));
    counters.d2h_bytes += Bytes(dst);
    l.copied = streams.Record(StreamKind::kD2H);
    return l;
  }
  // The device holds the reduced gradient, or this rank's slice [b, e) of it.
  at::Tensor values = grad;
  int64_t b = 0, e = n;
  StreamKind on = StreamKind::kCompute;
  if (world > 1) {
    on = StreamKind::kCollective;
    streams.Wait(on, ready);
    auto use = streams.Use(on);
    if (route == GradRoute::kReduceScatter) {
      std::tie(b, e) = SliceOf(n, world, rank);
      values = bufs.slice.narrow(0, 0, e - b);
      shared.comm->ReduceScatter(rank, grad, values);
    } else {  // reduce_one: the sum on rank 0, which copies it down
      at::Tensor out = rank == 0 ? bufs.reduced.narrow(0, 0, n) : at::Tensor();
      shared.comm->Reduce(rank, grad, out, /*root=*/0);
      if (rank != 0) {
        l.lands = false;
        l.copied = streams.Record(on);
        return l;
      }
      values = out;
    }
  }
  const bool fp32 = state.fp32_grad();
  {
    // The squared norm on the device, in fp64, before any rounding to bf16.
    auto use = streams.Use(on);
    at::Tensor norm = at::linalg_vector_norm(values, 2, c10::nullopt, false, at::kDouble);
    bufs.sumsq_dev.narrow(0, u, 1).copy_(norm.square().reshape({1}));
    if (!fp32) bufs.down.narrow(0, 0, e - b).copy_(values);
  }
  streams.Wait(StreamKind::kD2H, streams.Record(on));
  {
    auto use = streams.Use(StreamKind::kD2H);
    at::Tensor dst = fp32 ? hs.grad.narrow(0, b, e - b) : hs.params.narrow(0, b, e - b);
    at::Tensor src = fp32 ? values : bufs.down.narrow(0, 0, e - b);
    dst.copy_(src, Async(state, src));
    bufs.sumsq_host.narrow(0, u, 1).copy_(bufs.sumsq_dev.narrow(0, u, 1), Async(bufs.sumsq_host, bufs.sumsq_dev));
    counters.d2h_bytes += Bytes(dst);
  }
  l.copied = streams.Record(StreamKind::kD2H);
  return l;
}

absl::Status CompleteGradLanding(GradRoute route, int rank, RouteShared& shared, HostState& state,
                                 const Landing& l, const LandingBuffers& bufs, DeviceStreams& streams,
                                 UpdatePipeline& pipeline) {
  streams.HostWait(l.copied);
  // An aborted or failed collective returns with its output incomplete: land nothing.
  if (shared.comm != nullptr) {
    if (absl::Status h = shared.comm->Health(); !h.ok()) return h;
  }
  const int world = shared.world;
  const int u = l.unit;
  if (l.resident) {
    if (l.lands) pipeline.GradLanded(u, l.step, bufs.sumsq_host.data_ptr<double>()[u]);
    return absl::OkStatus();
  }
  if (!DeviceReducesGradient(route, world)) {
    // Each landing thread sums its slice of the W buffers into the host gradient.
    at::Tensor host_grad = state.unit(u).grad;
    const int64_t n = host_grad.numel();
    shared.land_comm.Barrier(rank);
    auto [b, e] = SliceOf(n, world, rank);
    if (e > b) {
      at::Tensor out = host_grad.narrow(0, b, e - b);
      out.copy_(shared.landing[0].narrow(0, b, e - b));
      for (int r = 1; r < world; ++r) out.add_(shared.landing[r].narrow(0, b, e - b));
      shared.partial_sumsq[rank] = SumSquares(out.data_ptr<float>(), e - b, /*threads=*/0);
    } else {
      shared.partial_sumsq[rank] = 0.0;
    }
    shared.land_comm.Barrier(rank);
    if (rank == 0) {
      double total = 0.0;
      for (double s : shared.partial_sumsq) total += s;
      pipeline.GradLanded(u, l.step, total);
    }
    return absl::OkStatus();
  }
  if (!l.lands) return absl::OkStatus();
  // Partial norms are added in rank order, so the total does not depend on timing.
  const int expected = route == GradRoute::kReduceScatter ? world : 1;
  const double part = bufs.sumsq_host.data_ptr<double>()[u];
  double total = 0.0;
  bool last = false;
  {
    absl::MutexLock lock(&shared.mu);
    shared.sumsq[static_cast<size_t>(u) * world + rank] = part;
    if (++shared.arrived[u] == expected) {
      last = true;
      shared.arrived[u] = 0;
      for (int r = 0; r < world; ++r) total += shared.sumsq[static_cast<size_t>(u) * world + r];
    }
  }
  if (last) pipeline.GradLanded(u, l.step, total);
  return absl::OkStatus();
}

}  // namespace slidedp
