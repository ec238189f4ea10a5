// DeviceStreams on a CUDA GPU (built only with a CUDA-enabled LibTorch); see
// device_streams.h. Streams come from LibTorch's pool so that LibTorch kernels and the
// caching allocator run on them; events are plain CUDA events.
#include "runtime/engine/device_streams.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/io/env_switch.h"

namespace slidedp {
namespace {

// SLIDEDP_NVTX=1: the worker's units as NVTX ranges (DeviceStreams::RangeStart).
bool NvtxOn() {
  static const bool on = EnvIs("SLIDEDP_NVTX", "1");
  return on;
}

struct CudaEvent {
  cudaEvent_t ev = nullptr;
  ~CudaEvent() {
    if (ev != nullptr) cudaEventDestroy(ev);  // released once it has happened
  }
};

class CudaStreamUse final : public StreamUse {
 public:
  explicit CudaStreamUse(const c10::cuda::CUDAStream& s) : guard_(s) {}

 private:
  c10::cuda::CUDAStreamGuard guard_;
};

class CudaStreams final : public DeviceStreams {
 public:
  CudaStreams(const at::Device& device, bool timing)
      : device_(device.index()), timing_(timing),
        streams_{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_),
                 c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_),
                 c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_),
                 c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)} {
    // The caching allocator's statistics (Memory*) exist once LibTorch has initialized
    // CUDA, which its first allocation does; before it they throw "Invalid device
    // argument" (the policy asks for the free memory before anything is allocated).
    (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
  }

  bool is_cuda() const override { return true; }

  std::unique_ptr<StreamUse> Use(StreamKind k) override {
    return std::make_unique<CudaStreamUse>(streams_[static_cast<int>(k)]);
  }

  Event Record(StreamKind k) override {
    c10::cuda::CUDAGuard g(device_);
    auto e = std::make_shared<CudaEvent>();
    SLIDEDP_CUDA_CHECK(cudaEventCreateWithFlags(&e->ev, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    SLIDEDP_CUDA_CHECK(cudaEventRecord(e->ev, stream(k)));
    return Event(std::static_pointer_cast<void>(e));
  }

  void Wait(StreamKind k, const Event& e) override {
    if (!e.pending()) return;
    SLIDEDP_CUDA_CHECK(cudaStreamWaitEvent(stream(k), static_cast<CudaEvent*>(e.impl())->ev, 0));
  }

  void KeepFor(const at::Tensor& t, StreamKind k) override {
    if (t.defined() && t.is_cuda()) t.record_stream(streams_[static_cast<int>(k)].unwrap());
  }

  void HostWait(const Event& e) override {
    if (!e.pending()) return;
    SLIDEDP_CUDA_CHECK(cudaEventSynchronize(static_cast<CudaEvent*>(e.impl())->ev));
  }

  void MarkOrigin() override {
    if (timing_) origin_ = Record(StreamKind::kCompute);
  }

  double MillisSinceOrigin(const Event& e) override {
    if (!timing_ || !origin_.pending() || !e.pending()) return 0.0;
    float ms = 0.0f;
    SLIDEDP_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<CudaEvent*>(origin_.impl())->ev,
                                            static_cast<CudaEvent*>(e.impl())->ev));
    return ms;
  }

  int64_t MemoryAllocated() override { return Stat().allocated_bytes[kAggregate].current; }
  int64_t MemoryPeak() override { return Stat().allocated_bytes[kAggregate].peak; }
  int64_t MemoryReservedPeak() override { return Stat().reserved_bytes[kAggregate].peak; }
  int64_t MemoryTotal() override {
    c10::cuda::CUDAGuard g(device_);
    size_t free_b = 0, total_b = 0;
    SLIDEDP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return static_cast<int64_t>(total_b);
  }
  int64_t MemoryAvailable() override {
    c10::cuda::CUDAGuard g(device_);
    size_t free_b = 0, total_b = 0;
    SLIDEDP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const auto stats = Stat();
    return static_cast<int64_t>(free_b) + stats.reserved_bytes[kAggregate].current -
           stats.allocated_bytes[kAggregate].current;
  }
  void ResetPeak() override { c10::cuda::CUDACachingAllocator::resetPeakStats(device_); }
  void RangeStart(const std::string& name) override {
    if (NvtxOn()) ranges_.push_back(nvtxRangeStartA(name.c_str()));
  }
  void RangeEnd() override {
    if (!NvtxOn() || ranges_.empty()) return;
    nvtxRangeEnd(ranges_.back());
    ranges_.pop_back();
  }

 private:
  // StatType::AGGREGATE, the first entry of every statistic (the enum moved between
  // LibTorch versions; its value did not).
  static constexpr size_t kAggregate = 0;
  auto Stat() -> decltype(c10::cuda::CUDACachingAllocator::getDeviceStats(0)) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device_);
  }
  cudaStream_t stream(StreamKind k) const { return streams_[static_cast<int>(k)].stream(); }

  const c10::DeviceIndex device_;
  const bool timing_;
  const c10::cuda::CUDAStream streams_[kNumStreamKinds];
  Event origin_;
  std::vector<nvtxRangeId_t> ranges_;  // open NVTX ranges (the worker's thread only)
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceStreams>> CreateCudaStreams(const at::Device& device, bool timing) {
  if (!device.has_index()) return absl::InvalidArgumentError("device: a CUDA device needs an index");
  return std::unique_ptr<DeviceStreams>(new CudaStreams(device, timing));
}

}  // namespace slidedp
