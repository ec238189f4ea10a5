// PCIe probe: pinned host <-> device copy rates of one GPU, each direction alone and both
// at once on two streams, and the GPU's free memory, for the step-time model's
// calibration (runtime/engine/calibration.h). Needs only the CUDA toolkit (no LibTorch).
// Called from the job's thread before the workers exist; allocates and frees its own
// buffers.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace slidedp {

struct PcieRates {
  double h2d_gbps = 0.0;     // pinned host -> device alone
  double d2h_gbps = 0.0;     // pinned device -> host alone
  double duplex_gbps = 0.0;  // both at once, the two directions together
};

// Copies `bytes` (e.g. 256 MiB) each way `repeats` times on `device` and times them with
// events. FAILED_PRECONDITION when no GPU is present.
absl::StatusOr<PcieRates> MeasurePcie(int device, int64_t bytes, int repeats);

// Free and total memory of `device` (cudaMemGetInfo).
struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device);

}  // namespace slidedp
