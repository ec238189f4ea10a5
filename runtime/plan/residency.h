// Residency: which units' training state lives on a GPU instead of host memory
// (policy.resident_units), on which GPU, and the GPU memory it takes there. The one
// definition the engine (runtime/engine/resident_state.h), the step model and the
// policy share. A resident unit's GPU holds its fp32 master and gradient and its m and
// v as optimizer.state_dtype stores them; it is not streamed: the worker casts its
// master into a parameter slot when the unit is used (no compute copy kept between
// uses), its gradient is reduced to that GPU and updated there, and the other GPUs
// receive its parameters from it.
// Pure C++ (no LibTorch); stateless, any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/train_config.h"

namespace slidedp {

struct Residency {
  int64_t units = 0;            // the first `units` units (forward order) are resident
  std::vector<int> owner;       // per unit: the rank whose GPU holds it; -1: streamed
  std::vector<int64_t> bytes;   // per rank: GPU bytes of the resident units it holds

  bool resident(int u) const { return u >= 0 && u < static_cast<int>(owner.size()) && owner[u] >= 0; }
  int64_t max_bytes() const;    // the rank holding most
};

// GPU bytes a resident unit of `params` parameters takes: fp32 master and gradient (8 a
// parameter) and m and v as `moments` stores them (moment_codec.h's MomentBytes: 8, 4,
// or 2 and the 8-bit blocks' scales): 16 a parameter with fp32 moments, 12 with bf16,
// about 10 with int8. Its parameters in the compute dtype take a slot of the step's
// (memory_estimate.h counts the slots), as a streamed unit's do.
int64_t ResidentUnitBytes(int64_t params, MomentDtype moments = MomentDtype::kFp32);

// The first min(n, units) of `unit_params` (parameters per unit, forward order) resident,
// each on the rank holding the fewest bytes so far (ties: the lowest rank), so that the
// embedding and the blocks after it spread over the W GPUs. n <= 0: none.
Residency PlaceResident(const std::vector<int64_t>& unit_params, int64_t n, int workers,
                        MomentDtype moments = MomentDtype::kFp32);

// The largest n whose PlaceResident keeps every rank within `bytes_per_rank`.
int64_t ResidentUnitsWithin(const std::vector<int64_t>& unit_params, int workers, int64_t bytes_per_rank,
                            MomentDtype moments = MomentDtype::kFp32);

// Staged updates (policy.staged_updates, runtime/engine/staged_updates.h): the streamed
// units whose AdamW a GPU runs, their state copied in and out in chunks of
// kStagedChunkElems (a multiple of the 8-bit moments' blocks) through two chunks'
// buffers on each GPU.
inline constexpr int64_t kStagedChunkElems = int64_t{64} << 20;
struct Staging {
  std::vector<int> lane;       // per unit: the rank whose GPU updates it; -1: the CPU (or resident)
  int64_t chunk_elems = 0;     // elements of one staging buffer (0: none staged)
  int64_t bytes_per_rank = 0;  // GPU bytes of the two buffers on each rank with a staged unit
};
// The last `n` units of `unit_params` that `resident` leaves streamed (the head first,
// then the blocks before it), taken in turn by the W ranks; chunks of `chunk_elems`
// (policy.chunk_elems; 0: kStagedChunkElems) rounded up to the 8-bit moments' blocks, or
// the largest staged unit's size when smaller. Each of the
// two buffers: fp32 master and gradient, m and v as `moments` stores them (and the 8-bit
// scales), and the streamed copy (`compute_bytes`: the bf16 gradient in, the new
// parameters out).
Staging PlaceStaged(const std::vector<int64_t>& unit_params, const Residency& resident, int64_t n, int workers,
                    int compute_bytes, MomentDtype moments = MomentDtype::kFp32, int64_t chunk_elems = 0);

}  // namespace slidedp
