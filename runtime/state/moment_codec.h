// How the AdamW moments m and v are stored in host memory (optimizer.state_dtype): fp32
// (today's bits), bf16, or 8 bits with one fp32 scale per block of kMomentBlock elements
// (block-wise dynamic quantization in the manner of 8-bit Adam), and the kernels that
// turn one tile of stored moments into fp32 and back. The update does its fp32 AdamW math
// between a decode and an encode of each quantization block, in one pass over memory
// (runtime/state/adamw.h; the kernels, AdamWInt8Tile, DecodeMoments and EncodeMoments,
// are declared in adamw_kernels.h).
//
// The 8-bit maps: each block is scaled by its largest magnitude (`absmax`, an fp32 scale
// per block), and the scaled value x in [0, 1] is kept as a small float: a 4-bit
// exponent (2^0 down to 2^-14, then subnormals) and K mantissa bits, rounded
// stochastically (below), so that every magnitude has about the same relative precision,
// as the dynamic map of 8-bit Adam gives it:
//   m (signed):       sign and x = |m| / absmax with K = 3 (steps of 1/8 relative;
//                     down to absmax * 2^-17, smaller magnitudes become 0)
//   v (non-negative): x = sqrt(v) * (1 / sqrt(absmax)) with K = 4 (steps of 1/16
//                     relative in sqrt(v), the quantity the update divides by, whose
//                     root the update has already taken; a nonzero v never becomes 0:
//                     at least absmax * 2^-36)
// Precision where the values are matters more than the range: with a coarse map a
// moment that changes by less than half a step per update stays where it is.
// Stochastic rounding: x goes to the code above it with the probability of its distance
// from the code below, so that the stored moment is the true one on average and keeps
// moving under small changes. (Rounding to nearest let m stop at 0.62-0.75 of a steady
// gradient's momentum, and v not fall at all where sqrt(v) lies in the lowest quarter of
// a binade, since 0.05 v a step is less than half a code step there; tests/bench/RESULTS.md.)
// The random bits are a hash of the element's index in its unit, the step and the
// moment (RoundingBits), so the codes are the same for every kernel, thread count and
// split of a unit into calls, and a run repeats bit for bit. The decode does not change.
// Scaled values above 1 (the scale's reciprocal rounds; a subnormal scale's is infinite)
// encode as 1, the block's largest magnitude; NaNs encode as 0 (the engine does not
// update on a non-finite step).
// bf16: round to nearest even, as LibTorch converts.
//
// Every instruction set's kernel does the same IEEE operations (divisions and square
// roots are correctly rounded, absmax is order-free), so all are bit-identical to the
// scalar one, which is the reference.
// Threads: pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/state/moment_codes.h"
#include "runtime/train_config.h"


namespace slidedp {

// MomentDtype and its names ("fp32", "bf16", "int8": NameOf, EnumFromName) are the
// config's (runtime/train_config_enums.h).

// Elements per quantization block of the 8-bit moments; blocks start at element 0 of a
// unit, so update calls start at multiples of it.
inline constexpr int64_t kMomentBlock = kInt8MomentBlock;
static_assert(kMomentBlock == moment_codes::kBlock);

// Bytes of one stored element of m (or v), scales not counted: 4, 2, 1.
int64_t MomentWidth(MomentDtype dtype);
// Host bytes of m and v together for `n` parameters, scales included.
int64_t MomentBytes(MomentDtype dtype, int64_t n);

// The same per parameter of a large unit (partial blocks not counted): 8, 4, 2 + 8/256.
double MomentBytesPerParam(MomentDtype dtype);

// One range of stored moments, pointers at its first element (for int8, at the first
// element of a block, and the scales at that block's).
struct MomentView {
  MomentDtype dtype = MomentDtype::kFp32;
  void* m = nullptr;          // float*, uint16_t* (bf16 bits) or int8_t*
  void* v = nullptr;          // float*, uint16_t* (bf16 bits) or uint8_t*
  float* m_scale = nullptr;   // int8: one absmax per block; otherwise null
  float* v_scale = nullptr;
};

// The view of elements from `b` on; for int8, b must be a multiple of kMomentBlock.
MomentView OffsetMoments(const MomentView& mv, int64_t b);

// The byte ranges of the stored moments of `n` elements (view at element 0), in the
// order a checkpoint holds them: m, v, then (int8) m's scales, v's scales.
struct MomentBuffer {
  void* data;
  size_t bytes;
};
std::vector<MomentBuffer> MomentBuffers(const MomentView& mv, int64_t n);

namespace adamw_internal {

// Where an 8-bit encode's random bits come from: the index of the call's element 0 in
// its unit, and the step.
struct RoundingSeed {
  int64_t first_index = 0;
  int64_t step = 0;
};

// The single values (moment_codes.h: one definition for the CPU and the GPU): the random
// bits of an element, one 8-bit code and back.
using moment_codes::DecodeSigned8;
using moment_codes::DecodeUnsigned8;
using moment_codes::EncodeSigned8;
using moment_codes::EncodeUnsigned8;
using moment_codes::Mix32;
using moment_codes::RoundingBits;
using moment_codes::RoundingKey;
using moment_codes::VBits;
using moment_codes::kIndexMix;
using moment_codes::kMixMul1;
using moment_codes::kMixMul2;

}  // namespace adamw_internal
}  // namespace slidedp
