// PlanShapes: what the step model reads: a model's shape with the engine's unit split,
// the job's batch and engine facts, the knobs a plan sets, and the rates (measured or
// assumed) it runs at; the default rates and the FLOP counts they scale by. Used by the
// step model (step_model.h), the memory estimate (memory_estimate.h), the policy and
// calibration. Pure C++ (no LibTorch); plain data and stateless functions, any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

namespace slidedp {

struct ModelShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t ffn = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool tied = false;
  bool qk_norm = false;  // q and k normed per head (Qwen3): a kept block saves their inputs too
  std::vector<int64_t> unit_params;  // [embedding, block 0..L-1, head]: the engine's units

  int64_t total_params() const;
  int num_units() const { return static_cast<int>(unit_params.size()); }
};

// The shape of `config` with the engine's unit split (runtime/model/param_layout.h).
ModelShape ShapeOf(const ModelConfig& config);

// The job's batch and the fixed facts of its engine, on one host.
struct JobShape {
  int64_t sequences = 0;  // this host's batch, sequences a step (the job's: hosts times it)
  int64_t seq_len = 0;
  int workers = 1;
  bool clip = true;       // optimizer.max_grad_norm > 0
  bool cuda = true;       // false: the CPU device (compute and copies on the worker's thread)
  int param_bytes = 2;    // bytes of the streamed copy per parameter (2: bf16, 4: fp32)
  // Host bytes the CPU update moves per parameter: the master and the streamed copy
  // (gradient in, parameter out) read and written, 12, and m and v as
  // optimizer.state_dtype stores them, read and written: 28 (fp32), 20 (bf16), ~16 (int8).
  double update_bytes_per_param = 28.0;
  // optimizer.state_dtype: how m and v are stored, on the host and by resident units.
  MomentDtype moments = MomentDtype::kFp32;
  // Hosts of the job (hosts.count), each running this shape on its own rows and holding
  // 1/hosts of the master, m and v (the CPU update's work and its host traffic divided).
  int hosts = 1;
};

// The knobs a plan sets.
struct PlanKnobs {
  int64_t micro_batch_size = 1;
  int64_t grad_accum = 1;
  PolicyConfig policy;  // chunk_elems, prefetch_depth, routes, activations, loss chunk, ...
};

// Measured (or assumed) rates. GPU times are per token per decoder layer at the job's
// seq_len; transfer rates per GPU in GB/s (1e9 bytes).
struct Rates {
  double h2d_gbps = 54.5;          // pinned host -> device, alone
  double d2h_gbps = 55.1;          // pinned device -> host, alone
  double duplex_gbps = 78.5;       // both directions at once, the two together
  double collective_gbps = 150.0;  // NCCL bus bandwidth per GPU
  double forward_s = 0.0;          // per token per layer
  double recompute_s = 0.0;
  double backward_s = 0.0;         // backward only (recompute excluded)
  double head_s = 0.0;             // per token: final norm, logits, loss, and their backward
  double embed_s = 0.0;            // per token: embedding forward + its scatter-add backward
  double grad_s_per_param = 0.0;   // per unit and step: zeroing, fp32 accumulation, landing
  double launch_s = 0.0;           // per micro-batch per unit pass: launches, small kernels
  // CPU AdamW on the update thread, all its threads: the one-pass fp32 update at 16
  // threads on the H200 host (adamw_bench, 5150 Mparam/s; the H100 host's engine trace
  // 5.2e9).
  double adamw_params_per_s = 5.15e9;
  double host_memory_gbps = 150.0;    // read + write bytes per second
  // AdamW of resident units on their GPU's update stream, parameters per second: a fused
  // kernel moving 28 bytes a parameter (fp32 master, m, v read and written, the fp32
  // gradient read; no compute copy) at HBM bandwidth. On the cpu device the CPU AdamW
  // rate.
  double gpu_update_params_per_s = 1.285e11;
  // Between hosts (JobShape::hosts > 1): one host's network bandwidth, each direction at
  // once, GB/s (50: 400 Gb/s; on the cpu device 5, loopback), and the latency of one
  // exchange (one Gloo collective: a unit's reduce-scatter takes two, its norm's sum).
  double cross_host_gbps = 50.0;
  double cross_host_latency_s = 1e-4;
};

// Rates without measurements: for cuda this engine's on the H200 host and its H100
// sibling (../GPU_HOST.md, tests/bench/RESULTS.md; the GPU update: 28 bytes a parameter
// at about 3.6 TB/s of the H200's HBM), GPU times scaled by FLOPs per token from a
// traced qwen2.5-7b step; rough figures for the CPU device. With policy.auto,
// calibration replaces them at job start; without it the worker resolves auto kept
// blocks and resident units (activation_policy.h) with these.
Rates DefaultRates(const ModelShape& shape, const JobShape& job);

// Forward FLOPs per token of one decoder block at `seq_len` (causal attention).
double BlockForwardFlopsPerToken(const ModelShape& shape, int64_t seq_len);

// Sequence positions per MLP tile the engine will use for `knobs` (job.seq_len or more:
// whole): runtime/plan/activation_policy.h's ChooseMlpTile.
int64_t MlpTile(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// The MLP's share of one block's forward FLOPs at `seq_len` (what tiles recompute).
double MlpShare(const ModelShape& shape, int64_t seq_len);

// Whether gradients land in bf16 in the streamed copy with these knobs (grad_landing
// "auto" resolved as runtime/engine/trainer.cc does; never over several hosts).
bool Bf16Landing(const JobShape& job, const PolicyConfig& policy);

// Token counts of a step and the largest units, as the memory estimate and the replay
// use them.
struct StepSizes {
  int64_t tokens_worker = 0;  // tokens a worker computes a step
  int64_t tokens_micro = 0;   // tokens of one micro-batch
  int64_t max_numel = 0;
  int64_t max_rest = 0;       // largest unit but the embedding
};
StepSizes SizesOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

}  // namespace slidedp
