// PCIe probe: see pcie_probe.h.
#include "runtime/cuda/pcie_probe.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_check.h"

namespace slidedp {
namespace {

absl::Status SelectDevice(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    cudaGetLastError();  // clear the sticky "no device" error
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device, " (", count, " visible)"));
  }
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}

// Buffers of one probe, freed however it ends.
struct ProbeBuffers {
  void* host_up = nullptr;
  void* host_down = nullptr;
  void* dev_up = nullptr;
  void* dev_down = nullptr;
  cudaStream_t up = nullptr, down = nullptr;
  cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};
  ~ProbeBuffers() {
    for (cudaEvent_t e : events) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (up != nullptr) cudaStreamDestroy(up);
    if (down != nullptr) cudaStreamDestroy(down);
    if (dev_up != nullptr) cudaFree(dev_up);
    if (dev_down != nullptr) cudaFree(dev_down);
    if (host_up != nullptr) cudaFreeHost(host_up);
    if (host_down != nullptr) cudaFreeHost(host_down);
  }
};

// Seconds between events a and b.
absl::StatusOr<double> Elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, a, b));
  return ms / 1e3;
}

}  // namespace

absl::StatusOr<PcieRates> MeasurePcie(int device, int64_t bytes, int repeats) {
  if (absl::Status s = SelectDevice(device); !s.ok()) return s;
  ProbeBuffers b;
  const size_t n = static_cast<size_t>(bytes);
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&b.host_up, n));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&b.host_down, n));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.dev_up, n));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.dev_down, n));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b.up, cudaStreamNonBlocking));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b.down, cudaStreamNonBlocking));
  for (cudaEvent_t& e : b.events) SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  // Warm up both directions (first touches map the pinned pages).
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.dev_up, b.host_up, n, cudaMemcpyHostToDevice, b.up));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.host_down, b.dev_down, n, cudaMemcpyDeviceToHost, b.down));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());

  const double total = static_cast<double>(bytes) * repeats;
  PcieRates r;
  // Alone: one direction at a time.
  for (int dir = 0; dir < 2; ++dir) {
    cudaStream_t s = dir == 0 ? b.up : b.down;
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[0], s));
    for (int i = 0; i < repeats; ++i) {
      if (dir == 0) {
        SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.dev_up, b.host_up, n, cudaMemcpyHostToDevice, s));
      } else {
        SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.host_down, b.dev_down, n, cudaMemcpyDeviceToHost, s));
      }
    }
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[1], s));
    absl::StatusOr<double> t = Elapsed(b.events[0], b.events[1]);
    if (!t.ok()) return t.status();
    (dir == 0 ? r.h2d_gbps : r.d2h_gbps) = total / *t / 1e9;
  }
  // Both at once: the down stream starts when the up stream does.
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[0], b.up));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(b.down, b.events[0], 0));
  for (int i = 0; i < repeats; ++i) {
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.dev_up, b.host_up, n, cudaMemcpyHostToDevice, b.up));
    SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.host_down, b.dev_down, n, cudaMemcpyDeviceToHost, b.down));
  }
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[1], b.up));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[2], b.down));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(b.up, b.events[2], 0));
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.events[3], b.up));
  absl::StatusOr<double> both = Elapsed(b.events[0], b.events[3]);
  if (!both.ok()) return both.status();
  r.duplex_gbps = 2 * total / *both / 1e9;
  return r;
}

absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device) {
  if (absl::Status s = SelectDevice(device); !s.ok()) return s;
  size_t free = 0, total = 0;
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
  return DeviceMemory{static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

}  // namespace slidedp
