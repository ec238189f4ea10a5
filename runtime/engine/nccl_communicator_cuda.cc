// NCCL Communicator over LibTorch tensors; see nccl_communicator.h. Built with a
// CUDA-enabled LibTorch; without NCCL headers CreateNcclCommunicator says so.
#include "runtime/engine/nccl_communicator.h"

#include "absl/status/status.h"

#ifdef SLIDEDP_WITH_NCCL
#include <c10/cuda/CUDAStream.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/nccl_group.h"
#include "runtime/engine/exception_status.h"

namespace slidedp {
namespace {


ncclDataType_t Type(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return ncclFloat32;
  if (t.scalar_type() == at::kBFloat16) return ncclBfloat16;
  throw StatusException(absl::InvalidArgumentError(
      absl::StrCat("NCCL communicator: only fp32 and bf16 tensors, not ", std::string(c10::toString(t.scalar_type())))));
}

void CheckCapacity(const at::Tensor& t, int64_t elems) {
  const int64_t have = static_cast<int64_t>(t.storage().nbytes()) / t.element_size() - t.storage_offset();
  if (have < elems) {
    throw StatusException(absl::InternalError(absl::StrCat(
        "NCCL communicator: a buffer of ", have, " elements, not padded to world * slice = ", elems)));
  }
}

cudaStream_t Current(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// NcclGroup's statuses (file:line and the call in the message, the code of the failure:
// DEADLINE_EXCEEDED for a timeout, ABORTED for an abort) go up as they are, by
// ThrowIfError (exception_status.h).
class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<NcclGroup> g) : group_(std::move(g)), barrier_(group_->world()) {}
  int world() const override { return group_->world(); }

  void AllGather(int rank, at::Tensor buf) override {
    const int64_t slice = SliceLength(buf.numel(), world());
    CheckCapacity(buf, slice * world());
    ThrowIfError(group_->AllGather(rank, buf.data_ptr(), slice, Type(buf), Current(buf)));
  }

  void ReduceScatter(int rank, const at::Tensor& in, at::Tensor out) override {
    const int64_t slice = SliceLength(in.numel(), world());
    CheckCapacity(in, slice * world());
    CheckCapacity(out, slice);
    if (in.scalar_type() != out.scalar_type()) {
      throw StatusException(absl::InternalError("NCCL reduce-scatter: input and output dtypes differ"));
    }
    ThrowIfError(group_->ReduceScatter(rank, in.data_ptr(), out.data_ptr(), slice, Type(in), Current(in)));
  }

  void Reduce(int rank, const at::Tensor& in, at::Tensor out, int root) override {
    void* dst = rank == root ? out.data_ptr() : nullptr;
    ThrowIfError(group_->Reduce(rank, in.data_ptr(), dst, in.numel(), Type(in), root, Current(in)));
  }

  void Broadcast(int rank, at::Tensor buf, int root) override {
    ThrowIfError(group_->Broadcast(rank, buf.data_ptr(), buf.numel(), Type(buf), root, Current(buf)));
  }

  void Barrier(int rank) override { barrier_.Barrier(rank); }

  void Abort() override {
    barrier_.Abort();
    group_->Abort(absl::AbortedError(kPeerAbortedMessage));
  }

  absl::Status Health() override { return group_->health(); }

 private:
  std::unique_ptr<NcclGroup> group_;
  HostCommunicator barrier_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int world, double timeout_seconds) {
  absl::StatusOr<std::unique_ptr<NcclGroup>> g = NcclGroup::Create(world, timeout_seconds);
  if (!g.ok()) return g.status();
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(*g)));
}

}  // namespace slidedp
#else
namespace slidedp {
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int, double) {
  return absl::FailedPreconditionError("several GPUs need NCCL, and this build found no nccl.h / libnccl");
}
}  // namespace slidedp
#endif
