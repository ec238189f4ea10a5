// How the AdamW moments m and v are stored in host memory (optimizer.state_dtype): fp32
// (today's bits), bf16, or 8 bits with one fp32 scale per block of kMomentBlock elements
// (block-wise dynamic quantization in the manner of 8-bit Adam), and the kernels that
// turn one tile of stored moments into fp32 and back. The update does its fp32 AdamW math
// between a decode and an encode of the same tile (runtime/state/adamw.h; the tile kernels,
// DecodeMoments and EncodeMoments, are in adamw_kernels.h), so memory is walked once.
//
// The 8-bit maps (each block scaled by its largest magnitude, `absmax`):
//   m (signed):       code q in [-127, 127],  m = sign(q) * absmax * (|q| / 127)^2
//   v (non-negative): code q in [0, 255],     v = absmax * (q / 255)^4
// Encoding rounds to the nearest code in the map's own domain (sqrt(|m| / absmax) * 127,
// (v / absmax)^(1/4) * 255), ties to even. The maps give small values finer steps than a
// linear one: the smallest nonzero m is absmax / 16129, the smallest nonzero v absmax /
// 4.2e9 (its square root, which the update divides by, sqrt(absmax) / 65025). Non-finite
// inputs encode as 0 (the engine does not update on a non-finite step).
// bf16: round to nearest even, as LibTorch converts.
//
// Every instruction set's kernel does the same IEEE operations (divisions and square
// roots are correctly rounded, absmax is order-free), so all are bit-identical to the
// scalar one, which is the reference.
// Threads: pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <string_view>


namespace slidedp {

enum class MomentDtype { kFp32, kBf16, kInt8 };

// "fp32", "bf16", "int8": the job file's names.
const char* MomentDtypeName(MomentDtype dtype);
// False when `name` is none of them.
bool ParseMomentDtype(std::string_view name, MomentDtype* out);

// Elements per quantization block of the 8-bit moments; blocks start at element 0 of a
// unit, so update calls start at multiples of it.
inline constexpr int64_t kMomentBlock = 256;

// Host bytes of m and v together for `n` parameters, scales included.
int64_t MomentBytes(MomentDtype dtype, int64_t n);

// One range of stored moments, pointers at its first element (for int8, at the first
// element of a block, and the scales at that block's).
struct MomentView {
  MomentDtype dtype = MomentDtype::kFp32;
  void* m = nullptr;          // float*, uint16_t* (bf16 bits) or int8_t*
  void* v = nullptr;          // float*, uint16_t* (bf16 bits) or uint8_t*
  float* m_scale = nullptr;   // int8: one absmax per block; otherwise null
  float* v_scale = nullptr;
};

namespace adamw_internal {

// The single values, for tests and the reference: one 8-bit code and back.
int8_t EncodeSigned8(float x, float absmax);
float DecodeSigned8(int8_t q, float absmax);
uint8_t EncodeUnsigned8(float x, float absmax);
float DecodeUnsigned8(uint8_t q, float absmax);

}  // namespace adamw_internal
}  // namespace slidedp
