// AdamW on a GPU, for the units whose training state lives there (policy.resident_units,
// runtime/engine/resident_state.h): one fused kernel over a range of flat fp32 buffers
// (master, gradient, m, v) that also writes the new parameters in the compute dtype, with
// exactly AdamWReference's arithmetic (adamw.h: the same scalars, fused multiply-adds
// where torch's CPU kernels have them, every other op rounded on its own), so that a
// resident unit's update equals the CPU's bit for bit. The kernel lives in
// adamw_device.cu (built with a CUDA LibTorch); no LibTorch here.
// Threads: LaunchAdamW from any thread whose current device is the buffers' GPU; the
// kernel runs on the given stream.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_kernels.h"

namespace slidedp {

// The per-call scalars of AdamWHyper (h.weight_decay included), those the CPU kernels
// compute (adamw_kernels.h's Coeffs).
using AdamWDeviceCoeffs = adamw_internal::Coeffs;
AdamWDeviceCoeffs DeviceCoeffs(const AdamWHyper& h);

// Elements [0, n) of device buffers. `out` receives the new parameters: bf16 bits
// (rounded to nearest even, as LibTorch converts) when out_bf16, else fp32.
struct AdamWDeviceArgs {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* out;
  bool out_bf16;
  int64_t n;
};

// Launches the update on `stream` (a cudaStream_t). Returns "" or the launch error,
// naming the kernel and CUDA's error. Defined only in builds with a CUDA LibTorch
// (SLIDEDP_TORCH_CUDA).
std::string LaunchAdamW(const AdamWDeviceCoeffs& c, const AdamWDeviceArgs& a, void* stream);

}  // namespace slidedp
