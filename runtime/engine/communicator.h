// Communicator: the collectives the routes need among the W workers of one job, each
// called by every worker's thread with its own buffers. HostCommunicator implements
// them for the CPU device with shared host memory and barriers; an NCCL communicator
// implements the same contract on GPUs. Thread-safe for exactly `world` callers.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace slidedp {

// The [begin, end) range of `n` elements that rank `rank` of `world` owns: slices of
// SliceLength(n, world) = ceil(n / world) elements, the last ones short or empty.
int64_t SliceLength(int64_t n, int world);
std::pair<int64_t, int64_t> SliceOf(int64_t n, int world, int rank);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int world() const = 0;

  // Every rank's `buf` ([n], same n) holds valid data in its own SliceOf range; on
  // return every rank's `buf` holds all slices.
  virtual void AllGather(int rank, at::Tensor buf) = 0;

  // out ([slice length] of this rank) = sum over ranks of in[SliceOf(rank)]; fp32 sum.
  virtual void ReduceScatter(int rank, const at::Tensor& in, at::Tensor out) = 0;

  // On `root`: out ([n]) = sum over ranks of in. `out` is ignored on other ranks.
  virtual void Reduce(int rank, const at::Tensor& in, at::Tensor out, int root) = 0;

  // Every rank's `buf` ([n], same n and dtype) receives `root`'s.
  virtual void Broadcast(int rank, at::Tensor buf, int root) = 0;

  // Returns once every rank has called it.
  virtual void Barrier(int rank) = 0;

  // A rank that failed and will make no more calls: every rank's waiting and later calls
  // throw std::runtime_error with kPeerAbortedMessage instead of waiting for it. Any
  // thread, any time; the communicator stays aborted (the trainer builds a new one).
  virtual void Abort() = 0;

  // OK, or the error that failed the collectives (an asynchronous NCCL error, a
  // timeout, an abort): a landing checks it after its copy, since an aborted
  // collective returns with its output incomplete.
  virtual absl::Status Health() { return absl::OkStatus(); }
};

// The message of a collective that another rank aborted (Communicator::Abort): the
// failure is that rank's, so the trainer reports that rank's error before these.
inline constexpr const char* kPeerAbortedMessage = "collective aborted: another worker failed";

// Of the W ranks' results, the index of the one to report, or -1 if all are OK: an
// out-of-memory first (the policy shrinks the plan on it), then the first rank's own
// failure, and only then a collective that another rank aborted.
int FailureToReport(const std::vector<absl::Status>& per_rank);

class HostCommunicator final : public Communicator {
 public:
  explicit HostCommunicator(int world);
  int world() const override { return world_; }
  void AllGather(int rank, at::Tensor buf) override;
  void ReduceScatter(int rank, const at::Tensor& in, at::Tensor out) override;
  void Reduce(int rank, const at::Tensor& in, at::Tensor out, int root) override;
  void Broadcast(int rank, at::Tensor buf, int root) override;
  void Barrier(int rank) override;
  void Abort() override;

 private:
  const int world_;
  std::vector<at::Tensor> posted_;  // one per rank, written before and read between barriers
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace slidedp
