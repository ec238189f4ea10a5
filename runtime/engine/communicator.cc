// HostCommunicator: collectives over shared host memory, see communicator.h. Each
// collective posts this rank's tensor, meets the others at a barrier, does this rank's
// share of the work reading the posted tensors, and meets them again so that no rank
// reuses a buffer another is still reading.
#include "runtime/engine/communicator.h"

#include <stdexcept>

#include "absl/strings/match.h"

namespace slidedp {

int64_t SliceLength(int64_t n, int world) { return (n + world - 1) / world; }

std::pair<int64_t, int64_t> SliceOf(int64_t n, int world, int rank) {
  // Equal slices of ceil(n / world), the last ones short or empty: NCCL's all-gather and
  // reduce-scatter move equal counts per rank over a buffer padded to world * slice.
  const int64_t slice = SliceLength(n, world);
  return {std::min(n, rank * slice), std::min(n, (rank + 1) * slice)};
}

int FailureToReport(const std::vector<absl::Status>& per_rank) {
  auto order = [](const absl::Status& s) {
    if (absl::IsResourceExhausted(s)) return 0;
    return absl::StrContains(s.message(), kPeerAbortedMessage) ? 2 : 1;
  };
  int failed = -1;
  for (int r = 0; r < static_cast<int>(per_rank.size()); ++r) {
    if (per_rank[r].ok()) continue;
    if (failed < 0 || order(per_rank[r]) < order(per_rank[failed])) failed = r;
  }
  return failed;
}

HostCommunicator::HostCommunicator(int world) : world_(world), posted_(world) {}

void HostCommunicator::Barrier(int rank) {
  absl::MutexLock lock(&mu_);
  if (aborted_) throw std::runtime_error(kPeerAbortedMessage);
  const int64_t gen = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++generation_;
    return;
  }
  auto passed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return generation_ != gen || aborted_; };
  mu_.Await(absl::Condition(&passed));
  if (generation_ == gen) throw std::runtime_error(kPeerAbortedMessage);
}

void HostCommunicator::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
}

void HostCommunicator::AllGather(int rank, at::Tensor buf) {
  posted_[rank] = buf;
  Barrier(rank);
  const int64_t n = buf.numel();
  for (int r = 0; r < world_; ++r) {
    if (r == rank) continue;
    auto [b, e] = SliceOf(n, world_, r);
    if (e > b) buf.narrow(0, b, e - b).copy_(posted_[r].narrow(0, b, e - b));
  }
  Barrier(rank);
  posted_[rank] = at::Tensor();
}

void HostCommunicator::ReduceScatter(int rank, const at::Tensor& in, at::Tensor out) {
  posted_[rank] = in;
  Barrier(rank);
  auto [b, e] = SliceOf(in.numel(), world_, rank);
  if (e > b) {
    at::Tensor acc = posted_[0].narrow(0, b, e - b).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    for (int r = 1; r < world_; ++r) acc.add_(posted_[r].narrow(0, b, e - b).to(acc.device()));
    out.copy_(acc);
  }
  Barrier(rank);
  posted_[rank] = at::Tensor();
}

void HostCommunicator::Reduce(int rank, const at::Tensor& in, at::Tensor out, int root) {
  posted_[rank] = in;
  Barrier(rank);
  if (rank == root) {
    at::Tensor acc = posted_[0].to(at::kFloat, false, true);
    for (int r = 1; r < world_; ++r) acc.add_(posted_[r].to(acc.device()));
    out.copy_(acc);
  }
  Barrier(rank);
  posted_[rank] = at::Tensor();
}

void HostCommunicator::Broadcast(int rank, at::Tensor buf, int root) {
  posted_[rank] = buf;
  Barrier(rank);
  if (rank != root) buf.copy_(posted_[root]);
  Barrier(rank);
  posted_[rank] = at::Tensor();
}

}  // namespace slidedp
