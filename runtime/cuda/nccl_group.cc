// NcclGroup: see nccl_group.h.
#include "runtime/cuda/nccl_group.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_check.h"

namespace slidedp {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::Status NcclError(ncclResult_t r, const char* call, const char* file, int line) {
  return absl::InternalError(absl::StrCat("NCCL error at ", file, ":", line, " in ", call, ": ",
                                          ncclGetErrorString(r)));
}

NcclGroup::NcclGroup(int world, double timeout_seconds)
    : world_(world), timeout_seconds_(timeout_seconds), comms_(world, nullptr), pending_(world) {}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(int world, double timeout_seconds) {
  int visible = 0;
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&visible));
  if (world < 1 || world > visible) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL: ", world, " ranks need as many GPUs; ", visible, " visible"));
  }
  std::unique_ptr<NcclGroup> g(new NcclGroup(world, timeout_seconds));
  std::vector<int> devices(world);
  for (int r = 0; r < world; ++r) devices[r] = r;
  // Connect every peer at init (NCCL >= 2.22 otherwise connects at the first collective,
  // which then blocks on the host until all ranks arrive, before the watchdog can time
  // it). A user's own setting wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  int current = 0;
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  SLIDEDP_NCCL_RETURN_IF_ERROR(ncclCommInitAll(g->comms_.data(), world, devices.data()));
  for (int r = 0; r < world; ++r) {
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaSetDevice(r));
    absl::MutexLock lock(&g->mu_);
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&g->pending_[r].event, cudaEventDisableTiming));
  }
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaSetDevice(current));  // the caller's device, as it was
  g->watchdog_ = std::thread([p = g.get()] { p->Watch(); });
  return g;
}

NcclGroup::~NcclGroup() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  absl::MutexLock lock(&mu_);
  // A collective still running (a peer that never joined it) would block
  // ncclCommDestroy forever: abort the communicators then.
  bool stuck = false;
  for (const Pending& p : pending_) {
    if (p.active && p.event != nullptr && cudaEventQuery(p.event) == cudaErrorNotReady) stuck = true;
  }
  for (ncclComm_t c : comms_) {
    if (c == nullptr) continue;
    if (aborted_) continue;  // already aborted by the watchdog
    if (stuck) {
      ncclCommAbort(c);
    } else {
      ncclCommDestroy(c);
    }
  }
  for (Pending& p : pending_) {
    if (p.event != nullptr) cudaEventDestroy(p.event);
  }
}

absl::Status NcclGroup::health() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status NcclGroup::Issued(int rank, cudaStream_t stream) {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(pending_[rank].event, stream));
  pending_[rank].issued_at = Now();
  pending_[rank].active = true;
  return absl::OkStatus();
}

absl::Status NcclGroup::AllGather(int rank, void* buf, size_t count, ncclDataType_t type, cudaStream_t stream) {
  if (absl::Status h = health(); !h.ok()) return h;
  size_t elem = type == ncclFloat32 ? 4 : 2;
  const void* send = static_cast<const char*>(buf) + static_cast<size_t>(rank) * count * elem;
  SLIDEDP_NCCL_RETURN_IF_ERROR(ncclAllGather(send, buf, count, type, comms_[rank], stream));
  return Issued(rank, stream);
}

absl::Status NcclGroup::ReduceScatter(int rank, const void* in, void* out, size_t count, ncclDataType_t type,
                                      cudaStream_t stream) {
  if (absl::Status h = health(); !h.ok()) return h;
  SLIDEDP_NCCL_RETURN_IF_ERROR(ncclReduceScatter(in, out, count, type, ncclSum, comms_[rank], stream));
  return Issued(rank, stream);
}

absl::Status NcclGroup::Broadcast(int rank, void* buf, size_t count, ncclDataType_t type, int root,
                                  cudaStream_t stream) {
  if (absl::Status h = health(); !h.ok()) return h;
  SLIDEDP_NCCL_RETURN_IF_ERROR(ncclBroadcast(buf, buf, count, type, root, comms_[rank], stream));
  return Issued(rank, stream);
}
absl::Status NcclGroup::Reduce(int rank, const void* in, void* out, size_t count, ncclDataType_t type, int root,
                               cudaStream_t stream) {
  if (absl::Status h = health(); !h.ok()) return h;
  SLIDEDP_NCCL_RETURN_IF_ERROR(ncclReduce(in, out, count, type, ncclSum, root, comms_[rank], stream));
  return Issued(rank, stream);
}

void NcclGroup::Fail(absl::Status s) {
  // Aborting makes every pending NCCL kernel return, so streams and host waits move on.
  absl::MutexLock lock(&mu_);
  if (aborted_) return;
  error_ = std::move(s);
  aborted_ = true;
  for (ncclComm_t c : comms_) {
    if (c != nullptr) ncclCommAbort(c);
  }
}

void NcclGroup::Watch() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int r = 0; r < world_; ++r) {
      ncclResult_t async = ncclSuccess;
      {
        absl::MutexLock lock(&mu_);
        if (aborted_) return;
        if (ncclCommGetAsyncError(comms_[r], &async) == ncclSuccess && async != ncclSuccess) {
          // fallthrough to Fail outside the lock
        } else {
          async = ncclSuccess;
        }
      }
      if (async != ncclSuccess) {
        Fail(absl::InternalError(absl::StrCat("NCCL asynchronous error on rank ", r, ": ", ncclGetErrorString(async))));
        return;
      }
      double waited = 0.0;
      {
        absl::MutexLock lock(&mu_);
        Pending& p = pending_[r];
        if (!p.active) continue;
        const cudaError_t q = cudaEventQuery(p.event);
        if (q == cudaSuccess) {
          p.active = false;
          continue;
        }
        if (q != cudaErrorNotReady) {
          waited = -1.0;
        } else {
          waited = Now() - p.issued_at;
        }
      }
      if (waited < 0.0) {
        Fail(absl::InternalError(absl::StrCat("NCCL: a CUDA error on rank ", r, "'s collective stream")));
        return;
      }
      if (waited > timeout_seconds_) {
        Fail(absl::DeadlineExceededError(absl::StrCat("NCCL: a collective on rank ", r, " did not finish within ",
                                                      timeout_seconds_, " s (a peer is stuck or dead); aborted")));
        return;
      }
    }
  }
}

}  // namespace slidedp
