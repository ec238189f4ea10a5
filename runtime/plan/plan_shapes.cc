// PlanShapes: see plan_shapes.h.
#include "runtime/plan/plan_shapes.h"

#include <algorithm>

#include "runtime/model/param_layout.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {

int64_t ModelShape::total_params() const {
  int64_t n = 0;
  for (int64_t p : unit_params) n += p;
  return n;
}

ModelShape ShapeOf(const ModelConfig& config) {
  ModelShape s;
  s.layers = config.num_layers;
  s.hidden = config.hidden_size;
  s.ffn = config.intermediate_size;
  s.heads = config.num_heads;
  s.kv_heads = config.num_kv_heads;
  s.head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size / std::max<int64_t>(1, config.num_heads);
  s.vocab = config.vocab_size;
  s.tied = config.tie_word_embeddings;
  s.qk_norm = config.qk_norm;
  for (const UnitLayout& u : BuildLayout(config).units) s.unit_params.push_back(u.numel);
  return s;
}

double BlockForwardFlopsPerToken(const ModelShape& shape, int64_t seq_len) {
  const double block_params = shape.layers > 0 ? static_cast<double>(shape.unit_params.at(1)) : 0.0;
  // Matmuls: 2 FLOPs a weight; causal attention: QK^T and AV over seq/2 keys on average.
  return 2.0 * block_params + 2.0 * static_cast<double>(seq_len) * shape.heads * shape.head_dim;
}

Rates DefaultRates(const ModelShape& shape, const JobShape& job) {
  Rates r;
  const double fwd_flops = BlockForwardFlopsPerToken(shape, job.seq_len);
  const double head_flops = 6.0 * shape.hidden * shape.vocab;  // logits forward and backward
  if (job.cuda) {
    // The block and head rates are this engine's (fused kernels, the recompute without
    // the MLP's down projection, weight gradients into their fp32 accumulators), read
    // from the traces of qwen2.5-7b at 16 x 4096 on an H100 (tests/bench/RESULTS.md,
    // 2026-12-06, ninth session; the H200's GPU is the same chip): a block and micro-batch
    // of 16K tokens forward 12.5 ms, its recompute 9.6 ms, its backward without recompute
    // 26.6 ms; the head 5.5 us a token. The matmuls' efficiency grows with the hidden
    // size, hidden / (hidden + 1024) of these rates (the 3.09B's H200 blocks, forward
    // 4.7-4.9 and backward 10.7 ms, within 6% of them). The per-parameter gradient work
    // (zeroing, fp32 accumulation, the bf16 landing copy, the norm) and the per-pass
    // overhead are fitted to the plan sweeps of 2026-12-03 (StepModel.MatchesTheH200Sweeps).
    const double eff = static_cast<double>(shape.hidden) / static_cast<double>(shape.hidden + 1024);
    r.forward_s = fwd_flops / (838e12 * eff);
    r.recompute_s = fwd_flops / (1080e12 * eff);
    r.backward_s = 2.0 * fwd_flops / (786e12 * eff);
    r.head_s = head_flops / (764e12 * eff);
    r.embed_s = 4.0 * shape.hidden / 1e12;
    r.grad_s_per_param = 2e-11;
    r.launch_s = 3e-4;
    r.adamw_params_per_s *= 28.0 / job.update_bytes_per_param;  // memory-bound: fp32's rate scaled
    // The resident units' update moves 12 bytes a parameter (master read and written, the
    // gradient read) and m and v read and written as stored: 28 with fp32 moments, the
    // default's; compact moments' kernels are as memory-bound.
    r.gpu_update_params_per_s *= 28.0 / (12.0 + 2.0 * MomentBytesPerParam(job.moments));
    return r;
  }
  // The CPU device: memcpy for transfers, one core's worth of FLOPs per worker.
  r.h2d_gbps = r.d2h_gbps = 8.0;
  r.duplex_gbps = 8.0;
  r.collective_gbps = 8.0;
  r.forward_s = fwd_flops / 20e9;
  r.recompute_s = r.forward_s;
  r.backward_s = 2.0 * r.forward_s;
  r.head_s = head_flops / 20e9;
  r.embed_s = 4.0 * shape.hidden / 1e9;
  r.grad_s_per_param = 1e-9;
  r.launch_s = 2e-5;
  r.adamw_params_per_s = 3e8 * 28.0 / job.update_bytes_per_param;
  r.gpu_update_params_per_s = r.adamw_params_per_s;  // the same AdamW, on the update thread
  r.host_memory_gbps = 10.0;
  r.cross_host_gbps = 5.0;  // loopback TCP
  r.cross_host_latency_s = 5e-5;
  return r;
}

int64_t MlpTile(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs) {
  return ChooseMlpTile(knobs.policy, knobs.micro_batch_size, job.seq_len, shape.ffn, job.param_bytes);
}

double MlpShare(const ModelShape& shape, int64_t seq_len) {
  const double block = BlockForwardFlopsPerToken(shape, seq_len);
  return block > 0 ? std::min(1.0, 6.0 * static_cast<double>(shape.hidden) * shape.ffn / block) : 0.0;
}

bool Bf16Landing(const JobShape& job, const PolicyConfig& policy) {
  return LandsInBf16(policy.grad_landing, policy.grad_route, job.cuda, job.workers);
}

StepSizes SizesOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  StepSizes s;
  s.tokens_micro = k.micro_batch_size * job.seq_len;
  s.tokens_worker = s.tokens_micro * k.grad_accum;
  for (int u = 0; u < shape.num_units(); ++u) {
    s.max_numel = std::max(s.max_numel, shape.unit_params[u]);
    if (u > 0) s.max_rest = std::max(s.max_rest, shape.unit_params[u]);
  }
  return s;
}

}  // namespace slidedp
