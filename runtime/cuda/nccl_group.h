// NcclGroup: the NCCL communicators of one job's GPUs in this process (one rank per
// GPU, one thread per rank), the collectives the routes need on raw device buffers and
// streams, and a watchdog: an asynchronous NCCL error, or a collective that has not
// finished within the timeout, aborts every communicator so that no stream and no
// thread waits forever, and the error is kept for the job. Needs the CUDA toolkit and
// NCCL only (no LibTorch).
// Threads: rank r's collectives from rank r's thread; health() from any thread; the
// watchdog on its own thread.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace slidedp {

// "NCCL error at FILE:LINE in CALL: ncclGetErrorString(...)".
absl::Status NcclError(ncclResult_t r, const char* call, const char* file, int line);

class NcclGroup {
 public:
  // Communicators for GPUs 0..world-1. `timeout_seconds` bounds each collective.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(int world, double timeout_seconds);
  // Stops the watchdog; destroys the communicators, or aborts them after an error or
  // while a collective is stuck.
  ~NcclGroup();

  int world() const { return world_; }

  // In place: `buf` holds world * count elements; rank r's own are at r * count.
  absl::Status AllGather(int rank, void* buf, size_t count, ncclDataType_t type, cudaStream_t stream);
  // out (count elements) = sum over ranks of in[rank * count, (rank + 1) * count).
  absl::Status ReduceScatter(int rank, const void* in, void* out, size_t count, ncclDataType_t type,
                             cudaStream_t stream);
  // On root: out (count elements) = sum over ranks of in.
  absl::Status Reduce(int rank, const void* in, void* out, size_t count, ncclDataType_t type, int root,
                      cudaStream_t stream);
  // In place: every rank's `buf` (count elements) receives root's.
  absl::Status Broadcast(int rank, void* buf, size_t count, ncclDataType_t type, int root, cudaStream_t stream);

  // OK, or the first asynchronous error / timeout the watchdog saw, or Abort's reason.
  absl::Status health() const;

  // Aborts every communicator (as the watchdog does on an error): pending collectives
  // return, later calls fail with `why`. For a rank that failed and will issue no more.
  void Abort(absl::Status why) { Fail(std::move(why)); }

 private:
  NcclGroup(int world, double timeout_seconds);
  // Records an event after rank's latest collective, for the watchdog.
  absl::Status Issued(int rank, cudaStream_t stream);
  void Watch();
  void Fail(absl::Status s);

  const int world_;
  const double timeout_seconds_;
  std::vector<ncclComm_t> comms_;

  struct Pending {
    cudaEvent_t event = nullptr;
    double issued_at = 0.0;  // MonotonicSeconds
    bool active = false;
  };
  mutable absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace slidedp

#define SLIDEDP_NCCL_RETURN_IF_ERROR(call)                                     \
  do {                                                                         \
    const ncclResult_t slidedp_nccl_ = (call);                                 \
    if (slidedp_nccl_ != ncclSuccess)                                          \
      return ::slidedp::NcclError(slidedp_nccl_, #call, __FILE__, __LINE__);   \
  } while (0)
