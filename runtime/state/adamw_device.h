// AdamW on a GPU, for the units whose training state lives there (policy.resident_units,
// runtime/engine/resident_state.h): fused kernels over a unit's flat buffers (fp32
// master and gradient; m and v as optimizer.state_dtype stores them) that can also write
// the new parameters in the compute dtype, with exactly the CPU's arithmetic (adamw.h: the
// same scalars, fused multiply-adds where torch's CPU kernels have them, every other op
// rounded on its own; the stored moments' codes of moment_codes.h), so that a resident
// unit's update equals the CPU's bit for bit. The kernels live in adamw_device.cu (built
// with a CUDA LibTorch; tests also run them on the CPU through
// tests/runtime/model/cuda_emulation.h); no LibTorch here.
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
// (rounded to nearest even, as LibTorch converts) when out_bf16, else fp32; null: none
// written (so in AdamWStoredDeviceArgs).
struct AdamWDeviceArgs {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* out;
  bool out_bf16;
  int64_t n;
};

// A unit's update with bf16 or 8-bit moments (moment_codec.h's layouts: int8 m, uint8 v
// and one fp32 scale each per block of kMomentBlock elements from element 0; bf16 bits).
// The weight decay differs by parameter range: `span_end` ascending (the last at n),
// each span's Coeffs::decay in `span_decay`; the other coefficients are the call's.
// The 8-bit codes are rounded with the random bits of each element's index in the unit
// and `step`: element 0 is element `first` of its unit (0 for a resident unit, whole on
// its GPU; a staged chunk's start, a multiple of kMomentBlock).
inline constexpr int kMaxDeviceSpans = 64;
struct AdamWStoredDeviceArgs {
  float* param;
  const float* grad;
  MomentDtype dtype;  // kBf16 or kInt8
  void* m;            // uint16_t* (bf16 bits) or int8_t*
  void* v;            // uint16_t* or uint8_t*
  float* m_scale;     // int8: [blocks]; otherwise null
  float* v_scale;
  void* out;
  bool out_bf16;
  int64_t n;
  int64_t step;
  int64_t first;
  int spans;
  int64_t span_end[kMaxDeviceSpans];
  float span_decay[kMaxDeviceSpans];
};

// Sets a's span table from `spans` (ascending, covering the unit) with each span's decay
// as the CPU update computes it for `h` (adamw_internal::MakeCoeffs). false (the table
// left unset): more spans than kMaxDeviceSpans.
bool SetDecaySpans(const AdamWHyper& h, const std::vector<DecaySpan>& spans, AdamWStoredDeviceArgs* a);

// Launches the update on `stream` (a cudaStream_t). Returns "" or the launch error,
// naming the kernel and CUDA's error. Defined only in builds with a CUDA LibTorch
// (SLIDEDP_TORCH_CUDA).
std::string LaunchAdamW(const AdamWDeviceCoeffs& c, const AdamWDeviceArgs& a, void* stream);
std::string LaunchAdamWStored(const AdamWDeviceCoeffs& c, const AdamWStoredDeviceArgs& a, void* stream);

}  // namespace slidedp
