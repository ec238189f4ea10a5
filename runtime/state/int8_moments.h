// The 8-bit moments' decode and encode of a tile, private to runtime/state: the bodies
// behind DecodeMoments and EncodeMoments (moment_codec.cc) for MomentDtype::kInt8. The
// one-pass update of 8-bit moments, AdamWInt8Tile, is declared in adamw_kernels.h and
// defined beside these in int8_moments.cc, where the three share one kernel table per
// instruction set. Requires IsaSupported(isa).
// Threads: pure functions of their arguments; any thread.
#pragma once

#include <cstdint>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {
namespace adamw_internal {

// `n` elements of an 8-bit view (whole blocks from its start, the last one partial) into
// fp32 m and v.
void DecodeInt8(Isa isa, const MomentView& mv, int64_t n, float* m, float* v);

// The codes and block scales of `n` elements from fp32 m, v and sqrt(v) (the correctly
// rounded roots of v), stochastically rounded with `seed`'s bits.
void EncodeInt8(Isa isa, const MomentView& mv, int64_t n, const float* m, const float* v, const float* sqrt_v,
                const RoundingSeed& seed);

}  // namespace adamw_internal
}  // namespace slidedp
