// MemoryEstimate: see memory_estimate.h.
#include "runtime/plan/memory_estimate.h"

#include <algorithm>
#include <vector>

#include "runtime/plan/step_schedule.h"

namespace slidedp {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest block in W equal slices (the worker's buffers), elements.
int64_t MaxBlockPadded(const ModelShape& shape, const JobShape& job) {
  const int W = std::max(1, job.workers);
  int64_t max_block = 0;
  for (int u = 1; u + 1 < shape.num_units(); ++u) max_block = std::max(max_block, shape.unit_params[u]);
  return W * CeilDiv(std::max<int64_t>(max_block, 1), W);
}

// A kept block's own parameter slot (compute dtype) and fp32 accumulator.
int64_t KeptBlockOwnBytes(const ModelShape& shape, const JobShape& job) {
  return MaxBlockPadded(shape, job) * (job.param_bytes + 4);
}

// KeptResidentSaving for kept = 0, 1, ..., most, placing the resident units once: the
// kept blocks are the last before the head, so each more kept block adds the one before.
std::vector<int64_t> KeptResidentSavings(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs,
                                         int64_t most) {
  std::vector<int64_t> saving(static_cast<size_t>(std::max<int64_t>(most, 0)) + 1, 0);
  const Residency r = ResidencyOf(shape, job, knobs);
  if (r.units == 0) return saving;
  const int W = std::max(1, job.workers);
  const int head = shape.num_units() - 1;
  const int64_t own = MaxBlockPadded(shape, job) * 4;  // the fp32 accumulator
  std::vector<int64_t> owned(W, 0);
  for (int64_t kept = 1; kept < static_cast<int64_t>(saving.size()); ++kept) {
    const int64_t u = head - kept;
    if (u >= 1 && r.resident(static_cast<int>(u))) ++owned[r.owner[u]];
    saving[kept] = *std::min_element(owned.begin(), owned.end()) * own;
  }
  return saving;
}

}  // namespace

int64_t KeptBlockBytes(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  const StepSizes s = SizesOf(shape, job, k);
  const int64_t q = shape.heads * shape.head_dim, kv = shape.kv_heads * shape.head_dim;
  const bool tiled = MlpTile(shape, job, k) < job.seq_len;
  // x, h, x1, h2; q and k after RoPE, v, attention's output (o_proj reads it in place:
  // RoPE lays q out as attention's output comes); the q/k norms' inputs; the MLP keeps
  // gate and up, not their product (fused_ops.h's lean FusedSwigluDown).
  const int64_t elements =
      4 * shape.hidden + 2 * q + 2 * kv + (shape.qk_norm ? q + kv : 0) + (tiled ? 0 : 2 * shape.ffn);
  const int64_t fp32_stats = (2 + shape.heads) * 4;
  return s.tokens_micro * (elements * job.param_bytes + fp32_stats) + KeptBlockOwnBytes(shape, job);
}

int64_t KeptResidentSaving(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t kept) {
  // More kept blocks than the model has keeps them all (a count from a caller, unbounded),
  // bounded as KeptBlocks bounds its count.
  return kept <= 0 ? 0 : KeptResidentSavings(shape, job, knobs, std::min(kept, shape.layers)).back();
}

int64_t AutoCountsBytes(int64_t memory_bytes) {
  constexpr int64_t kMostLeftFree = int64_t{6} << 30;
  return memory_bytes - std::min(memory_bytes / 10, kMostLeftFree);
}

int64_t KeptBlocks(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes) {
  const int64_t requested = knobs.policy.kept_blocks;
  if (requested >= 0) return std::min(requested, shape.layers);
  if (!job.cuda) return 0;
  if (memory_bytes <= 0) return shape.layers;
  PlanKnobs none = knobs;
  none.policy.kept_blocks = 0;
  const int64_t base = EstimateMemory(shape, job, none).total;
  // Each kept block adds its graph and, with inputs on the device, no longer keeps its input apart.
  const int64_t act_unit = SizesOf(shape, job, knobs).tokens_worker * shape.hidden * job.param_bytes;
  const int64_t per_block = std::max<int64_t>(
      1, KeptBlockBytes(shape, job, knobs) - (knobs.policy.activations == ActivationPlacement::kHost ? 0 : act_unit));
  const int64_t usable = AutoCountsBytes(memory_bytes);
  // The most that fit; a kept block that is also resident takes less (KeptResidentSaving).
  const std::vector<int64_t> saving = KeptResidentSavings(shape, job, knobs, shape.layers);
  int64_t kept = 0;
  while (kept < shape.layers && base + (kept + 1) * per_block - saving[kept + 1] <= usable) {
    ++kept;
  }
  return kept;
}

MemoryEstimate EstimateMemory(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  const StepSizes s = SizesOf(shape, job, k);
  const int W = std::max(1, job.workers);
  const int64_t pb = job.param_bytes;
  auto padded = [&](int64_t n) { return W * CeilDiv(std::max<int64_t>(n, 1), W); };
  MemoryEstimate m;
  m.slots = StepSchedule::SlotsFor(k.policy.prefetch_depth) * padded(s.max_numel) * pb;
  const int64_t emb = shape.unit_params.empty() ? 0 : shape.unit_params[0];
  m.grad_buffers = 2 * padded(s.max_rest) * 4 + padded(emb) * 4;
  const int64_t ring[3] = {s.max_rest, s.max_rest, emb};
  for (int64_t n : ring) {
    if (Bf16Landing(job, k.policy)) m.grad_buffers += padded(n) * pb;
    if (W > 1 && k.policy.grad_route == GradRoute::kReduceScatter) m.grad_buffers += CeilDiv(n, W) * 4;
    if (W > 1 && k.policy.grad_route == GradRoute::kReduceOne) m.grad_buffers += n * 4;
  }
  const int64_t act_unit = s.tokens_worker * shape.hidden * pb;
  // Kept blocks hold their graph (their input in it) and are never offloaded.
  const int64_t kept = KeptBlocks(shape, job, k, 0);
  m.activations = (k.policy.activations == ActivationPlacement::kHost ? 2 * act_unit : (shape.layers - kept) * act_unit) +
                  kept * KeptBlockBytes(shape, job, k) - KeptResidentSaving(shape, job, k, kept);
  // A micro-batch through a block with autograd (q, k, v, attention, the MLP's gate, up
  // and product, norms, residuals, and their gradients), the hidden states and their
  // gradients of every micro-batch, and the block's parameter gradients.
  const int64_t block_act = (7 * shape.hidden + 4 * shape.ffn) * pb;
  m.working = 2 * s.tokens_micro * block_act + 2 * act_unit + s.max_rest * pb;
  const int64_t chunk_tokens = std::min(k.policy.loss_chunk_tokens, s.tokens_micro);
  m.loss_chunk = chunk_tokens * shape.vocab * 12 + shape.vocab * shape.hidden * pb;
  m.margin = job.cuda ? 2 * kGiB : 0;
  const Residency residency = ResidencyOf(shape, job, k);
  m.resident = residency.max_bytes();
  if (k.policy.staged_updates > 0) {
    m.staged = PlaceStaged(shape.unit_params, residency, k.policy.staged_updates, job.workers,
                           job.param_bytes, job.moments, k.policy.chunk_elems)
                   .bytes_per_rank;
  }
  // A block's working set and the loss head's chunk are transient and never held at
  // once (one compute stream runs them in turn; each frees before the next unit), so the
  // larger of the two counts. The trace's memory counters (2026-12-06, H100, 7.62B at
  // 32 x 4096 and 3.09B at 16 x 4096, loss chunks of 4096 tokens): the peak rose 1.8-4.1
  // GiB over the persistent bytes, where working plus loss chunk had added 11.7 and 16.9
  // (memory_estimate_test.cc pins the estimate against the reserved peaks measured).
  m.total = m.slots + m.grad_buffers + m.activations + std::max(m.working, m.loss_chunk) + m.margin + m.resident +
            m.staged;
  return m;
}

Residency ResidencyOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs) {
  return PlaceResident(shape.unit_params, std::max<int64_t>(0, knobs.policy.resident_units), job.workers,
                       job.moments);
}

}  // namespace slidedp
