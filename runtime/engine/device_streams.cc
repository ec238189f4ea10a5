// DeviceStreams for the CPU device, and the factory; see device_streams.h.
#include "runtime/engine/device_streams.h"

#include "absl/status/status.h"
#include "runtime/engine/nccl_communicator.h"

namespace slidedp {
namespace {

class CpuStreams final : public DeviceStreams {
 public:
  bool is_cuda() const override { return false; }
  std::unique_ptr<StreamUse> Use(StreamKind) override { return std::make_unique<StreamUse>(); }
  Event Record(StreamKind) override { return Event(); }
  void Wait(StreamKind, const Event&) override {}
  void KeepFor(const at::Tensor&, StreamKind) override {}
  void HostWait(const Event&) override {}
  void MarkOrigin() override {}
  double MillisSinceOrigin(const Event&) override { return 0.0; }
  int64_t MemoryAllocated() override { return 0; }
  int64_t MemoryPeak() override { return 0; }
  int64_t MemoryReservedPeak() override { return 0; }
  int64_t MemoryTotal() override { return 0; }
  int64_t MemoryAvailable() override { return 0; }
  void ResetPeak() override {}
};

}  // namespace

const char* StreamName(StreamKind k) {
  switch (k) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kH2D: return "h2d";
    case StreamKind::kD2H: return "d2h";
    case StreamKind::kCollective: return "collective";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<DeviceStreams>> DeviceStreams::Create(const at::Device& device, bool timing) {
  if (device.is_cpu()) return std::unique_ptr<DeviceStreams>(new CpuStreams());
  if (device.is_cuda()) return CreateCudaStreams(device, timing);
  return absl::InvalidArgumentError("device: only cpu and cuda devices have streams");
}

#ifndef SLIDEDP_TORCH_CUDA
absl::StatusOr<std::unique_ptr<DeviceStreams>> CreateCudaStreams(const at::Device&, bool) {
  return absl::FailedPreconditionError("device: cuda needs a CUDA-enabled LibTorch; this build has none");
}
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int, double) {
  return absl::FailedPreconditionError("several GPUs need a CUDA-enabled LibTorch and NCCL; this build has neither");
}
#endif

}  // namespace slidedp
