// The single-threaded inner loops of the CPU optimizer, one per instruction set, over
// one tile of flat fp32 buffers. runtime/state/adamw.cc picks the best one the CPU
// supports and fans tiles out to its thread pool; tests call each one directly.
// Every kernel computes every element with exactly the same fp32 operations as
// AdamWElement, so all of them are bit-identical to AdamWReference.
// Threads: pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_element.h"

namespace slidedp {
namespace adamw_internal {

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* IsaName(Isa isa);
bool IsaSupported(Isa isa);  // by this build and this CPU
Isa BestIsa();               // the fastest supported one (computed once)

// The per-step scalars of AdamWHyper (adamw_element.h's Coeffs), computed once in double
// as torch does (its Python-side scalars are doubles) and rounded to fp32, the precision
// of its kernels.
Coeffs MakeCoeffs(const AdamWHyper& h);

// bf16 rounding (nearest even, NaN -> 0x7FC0, as LibTorch converts) and widening, inline
// for the update's hot loops (moment_codes.h; safetensors.h has out-of-line versions).
using moment_codes::Bf16Bits;
using moment_codes::WidenBf16;

// AdamW over elements [0, n) of the given buffers with kernel `isa`. With `sqrt_v`, also
// stores there the square root of each new v that the update computes anyway (the 8-bit
// encode's input, EncodeMoments). Requires IsaSupported(isa).
void AdamWTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, float* m,
               float* v, float* sqrt_v = nullptr);

// AdamW over elements [0, n) in one pass, each element's operands read once and its
// results written once: the moments `m` and `v` fp32, or bf16 bits widened before and
// narrowed (Bf16Bits) after AdamWElement; the gradient `grad` (fp32) or, when `grad` is
// null, the bf16 bits in `gp`, which then receive the new parameters narrowed (the
// streamed copy); `gp` is not touched otherwise. The same bits as widening the gradient
// and the moments, AdamWTile, and narrowing the moments and the parameters one after the
// other. Requires IsaSupported(isa).
void AdamWOnePassTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, uint16_t* gp, float* m,
                      float* v);
void AdamWOnePassTile(Isa isa, const Coeffs& c, int64_t n, float* param, const float* grad, uint16_t* gp,
                      uint16_t* m, uint16_t* v);

// Sum of squares of x[0, n) in double with kernel `isa`; the order of additions depends
// only on `isa` and `n`. Requires IsaSupported(isa).
double SumSquaresTile(Isa isa, const float* x, int64_t n);

// The stored moments (moment_codec.h) of elements [0, n) of `mv` into fp32 `m` and `v`
// with kernel `isa` (moment_codec.cc; the 8-bit kernels int8_moments.cc). Requires
// IsaSupported(isa).
void DecodeMoments(Isa isa, const MomentView& mv, int64_t n, float* m, float* v);
// bf16 bits -> fp32 (exact), and fp32 -> bf16 rounded to nearest even (NaN: 0x7FC0, as
// LibTorch converts), n elements, with kernel `isa` (moment_codec.cc).
void WidenBf16(Isa isa, const uint16_t* in, int64_t n, float* out);
void NarrowBf16(Isa isa, const float* in, int64_t n, uint16_t* out);

// fp32 `m` and `v` [0, n) into the storage of `mv` (int8: the blocks' scales too; the
// last block may be partial; the codes rounded with the random bits of `seed`'s element
// indices and step). int8 encodes v from its square roots: `sqrt_v` [0, n) when the
// update has them (AdamWTile's), else computed here (the same bits).
void EncodeMoments(Isa isa, const MomentView& mv, int64_t n, const float* m, const float* v,
                   const RoundingSeed& seed, const float* sqrt_v = nullptr);

// The update of 8-bit moments over elements [b, e) of a call (pointers and `mv` at the
// call's element 0, whose unit index is seed.first_index; b a multiple of kMomentBlock;
// `spans`, with their `coeffs`, cover [b, e)) in one pass a quantization block: each
// element's codes, gradient and parameter read once, the new m and sqrt(v) kept in L1
// until the block's new scales are known, the codes and the parameters (and, when `grad`
// is null, the bf16 copy in `gp`, whose bits were the gradient) written once. The same
// bits as DecodeMoments, AdamWTile, EncodeMoments with the update's roots and NarrowBf16
// one after the other (int8_moments.cc). Requires IsaSupported(isa).
void AdamWInt8Tile(Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, int64_t b,
                   int64_t e, float* param, const float* grad, uint16_t* gp, const MomentView& mv,
                   const RoundingSeed& seed);

}  // namespace adamw_internal
}  // namespace slidedp
