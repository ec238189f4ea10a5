// MemoryEstimate: a plan's GPU memory on one worker, and the counts that memory decides:
// the decoder blocks that keep their autograd graph (policy.kept_blocks) and where the
// resident units lie. Pure C++ (no LibTorch); stateless functions, any thread.
#pragma once

#include <cstdint>

#include "runtime/plan/plan_shapes.h"
#include "runtime/plan/residency.h"

namespace slidedp {

// Predicted GPU memory of a plan on one worker, in bytes. The same for every
// JobShape::hosts but for the bf16 landing buffers, which several hosts do not use.
struct MemoryEstimate {
  int64_t slots = 0;         // prefetch_depth + 2 parameter slots of the largest unit (the
                             // kept blocks' own count with them, in activations)
  int64_t grad_buffers = 0;  // fp32 accumulators, landing buffers
  int64_t activations = 0;   // saved block inputs (device placement) or those in flight, and
                             // the graphs of the blocks that keep them (KeptBlockBytes each)
  int64_t working = 0;       // one micro-batch through one block, hidden states, their grads
  int64_t loss_chunk = 0;    // logits of one loss chunk, the LM head's gradient (transient,
                             // as working: the total counts the larger of the two)
  int64_t margin = 0;        // CUDA context, allocator
  int64_t resident = 0;      // resident units' state on the rank holding most (ResidentUnitBytes)
  int64_t staged = 0;        // policy.staged_updates' two buffers (residency.h's PlaceStaged)
  int64_t total = 0;
};

// policy.resident_units -1 counts as none here too (as in PredictStep, step_model.h).
MemoryEstimate EstimateMemory(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// GPU bytes a decoder block adds when it keeps its graph (policy.kept_blocks): the graph
// of one micro-batch (the kept blocks run micro-batch-major with the head,
// runtime/plan/step_schedule.h), as the CUDA device's fused path saves it: the block's
// input, the two norms' outputs, q and k after RoPE (and before their norm, where the
// model norms them), v, attention's output, the residual sum, and the MLP's gate and
// up (its product is recomputed in backward; only the MLP's input when it runs in
// tiles), in the compute dtype; the norms' and attention's fp32 statistics. And the
// block's own parameter slot (compute dtype) and fp32 gradient accumulator, the size of
// the largest block.
int64_t KeptBlockBytes(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// What the last `kept` blocks do not take of KeptBlockBytes because they are also
// resident (knobs.policy.resident_units): a kept block resident on a rank has no fp32
// accumulator of its own there (runtime/engine/worker.cc accumulates into its resident
// gradient), 0.9 GB a block of the 7.62B; its slot holds its parameters cast from the
// resident master. Over W ranks, the rank owning fewest such blocks sets it
// (EstimateMemory is the rank needing most).
int64_t KeptResidentSaving(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t kept);

// What the auto counts (kept blocks, resident units) may fill of `memory_bytes` by
// EstimateMemory: all but a tenth, and at most 6 GiB left free. The estimate covered the
// caching allocator's reserved peak (fragmentation included) by 1.8-10 GiB in every run
// measured (20 on H100s, 4 on an H200: tests/runtime/plan/memory_estimate_test.cc); a
// tenth of an H200 (13.8 GiB) on top of that left three kept blocks of the 7.62B unused.
int64_t AutoCountsBytes(int64_t memory_bytes);

// The number of decoder blocks that keep their graph for `knobs` (the last ones):
// policy.kept_blocks when >= 0 (at most the layers). For -1 (auto): none on the cpu
// device (its activations are host memory); on cuda the most whose EstimateMemory fits
// in AutoCountsBytes(`memory_bytes`), all of them when `memory_bytes` is 0 (no limit
// known).
// EstimateMemory counts the resident units of knobs.policy.resident_units, so kept
// blocks get what they leave (-1 counts as none: resolve it first, ResidentUnits).
int64_t KeptBlocks(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes);

// The resident units of `knobs` (policy.resident_units; -1 counts as none) placed on
// the job's workers (runtime/plan/residency.h's PlaceResident).
Residency ResidencyOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

}  // namespace slidedp
