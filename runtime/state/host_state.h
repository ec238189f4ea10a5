// HostState: the one authoritative training state of a job, in host memory, whatever
// the number of workers: per unit the fp32 master weights, AdamW moments m and v (fp32,
// bf16 or 8-bit with block scales: optimizer.state_dtype, moment_codec.h), the
// copy that is streamed to the devices (compute dtype) and the fp32 gradient that the
// workers' reductions land in. Buffers are allocated once.
// Threads: workers read `params` and write `grad` of a unit only in the phases the
// update pipeline allows (see runtime/engine/update_pipeline.h); the update thread
// writes master, m, v and params.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

// FNV-1a over the bytes of `tensors` in order, 16 hex digits (HostState::MasterDigest).
std::string MasterDigestOf(const std::vector<at::Tensor>& tensors);

struct UnitState;
// The stored moments in `s` (m, v and, for int8, the scales) as a MomentView of `dtype`
// from their element 0: the host state's, and a resident unit's buffers (which hold the
// same tensors on a device).
MomentView MomentsOf(MomentDtype dtype, const UnitState& s);

struct UnitState {
  at::Tensor master;  // fp32 [shard]: elements [shard_begin, shard_end) of the unit
  at::Tensor m;       // [numel] as stored: fp32, bf16, or int8 codes
  at::Tensor v;       // [numel] as stored: fp32, bf16, or uint8 codes
  at::Tensor m_scale; // int8 moments: fp32 [blocks of kMomentBlock]; otherwise undefined
  at::Tensor v_scale;
  at::Tensor params;  // compute dtype [numel]: what is streamed to the devices
  at::Tensor grad;    // fp32 [numel]: the reduced gradient of the current step; undefined
                      // when gradients land in `params` (HostState::fp32_grad() false)
};

// A contiguous range of one unit's flat buffer; chunks are the pipeline's granularity.
struct Chunk {
  int unit = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

class HostState {
 public:
  // Allocates zeroed buffers for every unit. `pin` asks for page-locked memory
  // (needs a CUDA-enabled LibTorch). `chunk_elems` 0 means one chunk per unit.
  // `fp32_grad` false: no fp32 gradient buffer; each unit's reduced gradient lands in
  // bf16 in its streamed copy `params` (free between the unit's last fetch of a step
  // and its update, which rewrites it), so the state is 14 bytes per parameter
  // (needs compute dtype bf16). `moments`: how m and v are stored; with bf16 or int8,
  // `chunk_elems` must be a multiple of kMomentBlock (validation says so).
  // `shard` of `shards` (a job over several hosts, issue 24): this host holds the
  // master, m and v of its slice [shard_begin(u), shard_end(u)) of every unit
  // (HostShardOf(numel, shards, shard), runtime/state/host_shards.h: whole int8 blocks),
  // the streamed copy and the gradient (fp32 or bf16 landing) whole.
  HostState(const ModelConfig& config, at::ScalarType compute_dtype, int64_t chunk_elems, bool pin,
            bool fp32_grad = true, MomentDtype moments = MomentDtype::kFp32, int shard = 0, int shards = 1);

  // Seeded random initialization as Hugging Face does it: weights ~ N(0, 0.02), norm
  // weights 1, biases 0. Identical for a seed on every machine (own generator).
  // CANCELLED (the buffers partly filled) when `stop` asks to stop: checked between
  // tensors.
  absl::Status InitRandom(uint64_t seed, const StopToken* stop = nullptr);

  // Loads the weights of a Hugging Face model directory (shapes checked). CANCELLED
  // between tensors once `stop` (may be null) is set.
  absl::Status LoadHf(const std::string& model_dir, const StopToken* stop = nullptr);

  // Rewrites the streamed copy of `unit` in [begin, end) (unit offsets, within this
  // host's shard) from the master weights.
  void RefreshParams(int unit, int64_t begin, int64_t end);
  // Every unit's shard: with several shards the rest of the copy comes from the others.
  void RefreshAllParams();

  // FNV-1a over every unit's master bytes (this host's shards), 16 hex digits.
  std::string MasterDigest() const;

  // This host's shard of unit `u`: its master, m and v hold elements [begin, end) of the
  // unit, at master index i - begin. One shard: [0, numel).
  int shard() const { return shard_; }
  int shards() const { return shards_; }
  int64_t shard_begin(int u) const { return shard_ranges_[u].first; }
  int64_t shard_end(int u) const { return shard_ranges_[u].second; }

  const ModelConfig& config() const { return config_; }
  const ModelLayout& layout() const { return layout_; }
  int num_units() const { return layout_.num_units(); }
  UnitState& unit(int u) { return units_[u]; }
  const UnitState& unit(int u) const { return units_[u]; }
  const std::vector<Chunk>& chunks(int u) const { return chunks_[u]; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  bool fp32_grad() const { return fp32_grad_; }
  // The streamed copies and fp32 gradients are page-locked (`pin`): copies to and from
  // the devices may be asynchronous. (LibTorch's is_pinned() does not always recognize
  // views into the slab they come from.)
  bool pinned() const { return pinned_; }
  MomentDtype moment_dtype() const { return moment_dtype_; }
  // Unit `u`'s stored moments from its element 0.
  MomentView moments(int u);
  // Bytes of host memory held by the state (all units, all buffers).
  int64_t bytes() const;

 private:
  // Buffers for whole units' fp32 weights: the masters themselves with one shard, else
  // temporaries; KeepShards then takes each unit's shard and the whole streamed copy.
  std::vector<at::Tensor> WholeMasters();
  void KeepShards(const std::vector<at::Tensor>& whole);

  ModelConfig config_;
  ModelLayout layout_;
  at::ScalarType compute_dtype_;
  bool fp32_grad_;
  bool pinned_;
  MomentDtype moment_dtype_;
  int shard_ = 0;
  int shards_ = 1;
  std::vector<std::pair<int64_t, int64_t>> shard_ranges_;  // per unit
  std::vector<UnitState> units_;
  std::vector<std::vector<Chunk>> chunks_;
};

}  // namespace slidedp
