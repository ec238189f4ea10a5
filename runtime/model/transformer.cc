// Transformer math: see transformer.h. Matches Hugging Face's Llama/Qwen2/Qwen3 eager
// implementations (tests/runtime/model/hf_reference_test.cc checks it against saved
// fixtures).
#include "runtime/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include "runtime/io/env_switch.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/ignore_index.h"
#include "runtime/model/tiled_mlp.h"

namespace slidedp {
namespace {

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// With `leaves`, each parameter becomes its own autograd leaf (a detached view that
// requires grad, kept in (*leaves)[index]): its gradient then lands in that leaf alone,
// where views of one flat leaf would each build and sum a zero-filled gradient of the
// whole unit.
at::Tensor View(const UnitLayout& unit, const at::Tensor& flat, const char* name,
                std::vector<at::Tensor>* leaves) {
  const int i = unit.Find(name);
  if (i < 0) return at::Tensor();
  if (leaves == nullptr) return ParamView(unit, flat, i);
  if (leaves->size() < unit.params.size()) leaves->resize(unit.params.size());
  at::Tensor& leaf = (*leaves)[i];
  if (!leaf.defined()) leaf = ParamView(unit, flat, i).detach().requires_grad_(true);
  return leaf;
}

// rotate_half: [x1, x2] -> [-x2, x1] over the last dimension.
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [B, heads, T, D]; cos/sin [T, D] or [B, 1, T, D] in x's dtype.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

// Inverse frequencies [D/2] in fp64 then fp32, with Llama 3.1 scaling when asked.
std::vector<double> InverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<double> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1 / theta ** (arange(0, D, 2).float() / D), computed in fp32.
    const float e = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), e);
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "llama3") {
    const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

// Causal softmax attention, q [B, h, T, D], k/v [B, h, T, D] (already expanded for GQA).
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, scale);
  }
#endif
  const int64_t T = q.size(2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  at::Tensor mask = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, v);
}

// SDPA's own GQA (LibTorch >= 2.5) unless SLIDEDP_SDPA_GQA=0, the switch that
// tests/bench/RESULTS.md's A/B runs use.
[[maybe_unused]] bool SdpaGqa() {
  static const bool on = !EnvIs("SLIDEDP_SDPA_GQA", "0");
  return on;
}

at::Tensor RepeatKv(const at::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const int64_t B = x.size(0), h = x.size(1), T = x.size(2), D = x.size(3);
  return x.unsqueeze(2).expand({B, h, groups, T, D}).reshape({B, h * groups, T, D});
}

// Causal attention with grouped K/V heads: q [B, nh, T, D], k/v [B, nkv, T, D].
at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const int64_t groups = q.size(1) / k.size(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  if (q.is_cuda() && groups != 1 && SdpaGqa()) {
    // Fused attention reads the shared K/V heads itself: no expanded copies, and no
    // sum over the groups in backward.
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            scale, /*enable_gqa=*/true);
  }
#endif
  return Attention(q, RepeatKv(k, groups), RepeatKv(v, groups), scale);
}

// GroupedAttention inside each document of each row (TokenLayout::doc_starts): the
// block-diagonal causal mask, as one call per document slice.
at::Tensor DocumentAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::vector<std::vector<int64_t>>& doc_starts, double scale) {
  const int64_t B = q.size(0), T = q.size(2);
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& starts = doc_starts[b];
    std::vector<at::Tensor> docs;
    for (size_t d = 0; d < starts.size(); ++d) {
      const int64_t begin = starts[d], end = d + 1 < starts.size() ? starts[d + 1] : T;
      auto doc = [&](const at::Tensor& t) { return t.narrow(0, b, 1).narrow(2, begin, end - begin); };
      docs.push_back(GroupedAttention(doc(q), doc(k), doc(v), scale));
    }
    rows.push_back(docs.size() == 1 ? docs[0] : at::cat(docs, 2));
  }
  return B == 1 ? rows[0] : at::cat(rows, 0);
}

}  // namespace

at::Tensor ParamView(const UnitLayout& unit, const at::Tensor& flat, int index) {
  const ParamSpec& p = unit.params[index];
  return flat.narrow(0, p.offset, p.numel).view(p.shape);
}

BlockParams ViewBlock(const UnitLayout& u, const at::Tensor& f, std::vector<at::Tensor>* leaves) {
  BlockParams p;
  p.input_norm = View(u, f, "input_layernorm.weight", leaves);
  p.q_w = View(u, f, "self_attn.q_proj.weight", leaves);
  p.q_b = View(u, f, "self_attn.q_proj.bias", leaves);
  p.k_w = View(u, f, "self_attn.k_proj.weight", leaves);
  p.k_b = View(u, f, "self_attn.k_proj.bias", leaves);
  p.v_w = View(u, f, "self_attn.v_proj.weight", leaves);
  p.v_b = View(u, f, "self_attn.v_proj.bias", leaves);
  p.o_w = View(u, f, "self_attn.o_proj.weight", leaves);
  p.o_b = View(u, f, "self_attn.o_proj.bias", leaves);
  p.q_norm = View(u, f, "self_attn.q_norm.weight", leaves);
  p.k_norm = View(u, f, "self_attn.k_norm.weight", leaves);
  p.post_norm = View(u, f, "post_attention_layernorm.weight", leaves);
  p.gate_w = View(u, f, "mlp.gate_proj.weight", leaves);
  p.gate_b = View(u, f, "mlp.gate_proj.bias", leaves);
  p.up_w = View(u, f, "mlp.up_proj.weight", leaves);
  p.up_b = View(u, f, "mlp.up_proj.bias", leaves);
  p.down_w = View(u, f, "mlp.down_proj.weight", leaves);
  p.down_b = View(u, f, "mlp.down_proj.bias", leaves);
  return p;
}

void SinkWeights(const UnitLayout& u, const at::Tensor& acc, BlockParams* p) {
  TORCH_CHECK(acc.scalar_type() == at::kFloat && acc.dim() == 1 && acc.numel() >= u.numel,
              "SinkWeights: an fp32 accumulator of the unit's ", u.numel, " parameters expected, got ", acc.sizes(),
              " ", acc.scalar_type());
  WeightSinks& s = p->sinks;
  s.q = View(u, acc, "self_attn.q_proj.weight", nullptr);
  s.k = View(u, acc, "self_attn.k_proj.weight", nullptr);
  s.v = View(u, acc, "self_attn.v_proj.weight", nullptr);
  s.o = View(u, acc, "self_attn.o_proj.weight", nullptr);
  s.gate = View(u, acc, "mlp.gate_proj.weight", nullptr);
  s.up = View(u, acc, "mlp.up_proj.weight", nullptr);
  s.down = View(u, acc, "mlp.down_proj.weight", nullptr);
}

HeadParams ViewHead(const ModelLayout& layout, const at::Tensor& head, const at::Tensor& embedding) {
  const UnitLayout& h = layout.units.back();
  HeadParams p;
  p.norm = ParamView(h, head, h.Find("model.norm.weight"));
  p.lm_head = h.uses_tied_embedding ? ParamView(layout.units[0], embedding, 0)
                                    : ParamView(h, head, h.Find("lm_head.weight"));
  return p;
}

RopeTables MakeRope(const ModelConfig& c, int64_t seq_len, const at::Device& device) {
  std::vector<double> inv = InverseFrequencies(c);
  std::vector<float> inv_f(inv.begin(), inv.end());
  at::Tensor inv_t = at::tensor(at::ArrayRef<float>(inv_f));
  at::Tensor pos = at::arange(seq_len, at::kFloat);
  at::Tensor freqs = at::outer(pos, inv_t);            // [T, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);         // [T, D]
  return {emb.cos().to(device), emb.sin().to(device)};
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (UseFusedOps(x) && weight.scalar_type() == at::kBFloat16) return FusedRmsNorm(x, weight, eps);
  at::Tensor h = x.to(at::kFloat);
  at::Tensor var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(var + eps);
  return weight * h.to(x.scalar_type());
}

at::Tensor EmbeddingForward(const at::Tensor& table, const at::Tensor& ids) {
  return at::embedding(table, ids);
}

TokenLayout DocumentLayout(const ModelConfig& c, const at::Tensor& positions, const at::Tensor& on_device,
                           RopeTables* table) {
  const int64_t B = positions.size(0), T = positions.size(1);
  const at::Tensor pos = positions.contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  TokenLayout layout;
  layout.doc_starts.resize(B);
  int64_t max_pos = 0;
  for (int64_t b = 0; b < B; ++b) {
    layout.doc_starts[b].push_back(0);
    for (int64_t t = 0; t < T; ++t) {
      max_pos = std::max(max_pos, p[b * T + t]);
      if (t > 0 && p[b * T + t] == 0) layout.doc_starts[b].push_back(t);
    }
  }
  if (max_pos >= table->cos.size(0)) {
    *table = MakeRope(c, std::max(max_pos + 1, 2 * table->cos.size(0)), table->cos.device());
  }
  const at::Tensor flat = on_device.reshape({-1});
  layout.rope.cos = table->cos.index_select(0, flat).view({B, 1, T, -1});
  layout.rope.sin = table->sin.index_select(0, flat).view({B, 1, T, -1});
  return layout;
}

namespace {

// A block's output as the two terms of its last residual add: y = x1 + mlp.
struct BlockTerms {
  at::Tensor x1, mlp;
};

// The fused kernels (fused_ops.h), the same math: RMSNorm, the residual add before the
// post-attention norm, RoPE and SwiGLU each one kernel; q/k/v one GEMM and gate/up one
// GEMM (FusedLinears). RoPE reads q and k in place as views of the QKV output and writes
// attention's [B, heads, T, D], so no transposed copies are made.
//
// What autograd keeps per token between forward and backward (bf16 unless said): x, its
// rstd (fp32), h (the QKV GEMM's input), q and k after RoPE, v, attention's output (also
// o_proj's input; plus attention's fp32 logsumexp per head), x1 and its rstd, h2 (the
// gate/up GEMM's input), gate | up (2 x FFN). Not the SwiGLU product (FusedSwigluDown
// recomputes it), nor the QKV output: v is copied out of it (kv_heads x D a token) so
// that attention's saved v does not hold q's and k's columns too; with q/k norms (Qwen3)
// those norms read a contiguous copy of q and k, which they keep in place of the GEMM's
// output.
//
// `mlp_unread`: the caller only back-propagates through mlp (TiledMlp's output_unread).
BlockTerms FusedBlockTerms(const ModelConfig& c, const BlockParams& p, const at::Tensor& x, const TokenLayout& layout,
                           int64_t mlp_tile, bool mlp_unread) {
  const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
  const int64_t nh = c.num_heads, nkv = c.num_kv_heads;

  at::Tensor h = FusedRmsNorm(x, p.input_norm, c.rms_norm_eps);
  // Views of one [B, T, (nh + 2 nkv) D] output. split_with_sizes, not three narrows:
  // its backward puts the three gradients into one tensor in one copy.
  const WeightSinks& s = p.sinks;
  const std::vector<at::Tensor> qkv = at::split_with_sizes(
      FusedLinears(h, {p.q_w, p.k_w, p.v_w}, {p.q_b, p.k_b, p.v_b}, {s.q, s.k, s.v}), {nh * D, nkv * D, nkv * D}, -1);
  at::Tensor q = qkv[0].view({B, T, nh, D});
  at::Tensor k = qkv[1].view({B, T, nkv, D});
  at::Tensor v = qkv[2].contiguous().view({B, T, nkv, D}).transpose(1, 2);
  if (c.qk_norm) {
    q = FusedRmsNorm(q, p.q_norm, c.rms_norm_eps);
    k = FusedRmsNorm(k, p.k_norm, c.rms_norm_eps);
  }
  // fp32 tables, [T', D] shared or [B, 1, T, D] per token.
  q = FusedRope(q, layout.rope.cos, layout.rope.sin);
  k = FusedRope(k, layout.rope.cos, layout.rope.sin);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor a = layout.doc_starts.empty() ? GroupedAttention(q, k, v, scale)
                                           : DocumentAttention(q, k, v, layout.doc_starts, scale);
  a = a.transpose(1, 2).reshape({B, T, nh * D});
  // o_proj through FusedLinears only for its sink: at::linear is the same GEMM.
  const at::Tensor attn_out = s.o.defined() ? FusedLinears(a, {p.o_w}, {p.o_b}, {s.o}) : Linear(a, p.o_w, p.o_b);
  auto [x1, h2] = FusedAddRmsNorm(x, attn_out, p.post_norm, c.rms_norm_eps);
  const MlpWeights mlp{p.gate_w, p.gate_b, p.up_w, p.up_b, p.down_w, p.down_b};
  return {x1, TiledMlp(mlp, h2, mlp_tile, /*fused=*/true, mlp_unread, MlpSinks{s.gate, s.up, s.down})};
}

// ATen's composition, the reference.
BlockTerms AtenBlockTerms(const ModelConfig& c, const BlockParams& p, const at::Tensor& x, const TokenLayout& layout,
                          int64_t mlp_tile) {
  const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
  const int64_t nh = c.num_heads, nkv = c.num_kv_heads;

  at::Tensor h = RmsNorm(x, p.input_norm, c.rms_norm_eps);
  at::Tensor q = Linear(h, p.q_w, p.q_b).view({B, T, nh, D});
  at::Tensor k = Linear(h, p.k_w, p.k_b).view({B, T, nkv, D});
  at::Tensor v = Linear(h, p.v_w, p.v_b).view({B, T, nkv, D});
  if (c.qk_norm) {
    q = RmsNorm(q, p.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, p.k_norm, c.rms_norm_eps);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  v = v.transpose(1, 2);
  // Shared [T', D] tables, or [B, 1, T, D] gathered per token: both broadcast over heads.
  const RopeTables& rope = layout.rope;
  const bool shared = rope.cos.dim() == 2;
  const at::Tensor cos = (shared ? rope.cos.narrow(0, 0, T) : rope.cos).to(x.scalar_type());
  const at::Tensor sin = (shared ? rope.sin.narrow(0, 0, T) : rope.sin).to(x.scalar_type());
  q = ApplyRope(q, cos, sin);
  k = ApplyRope(k, cos, sin);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor a = layout.doc_starts.empty() ? GroupedAttention(q, k, v, scale)
                                           : DocumentAttention(q, k, v, layout.doc_starts, scale);
  a = a.transpose(1, 2).reshape({B, T, nh * D});
  at::Tensor x1 = x + Linear(a, p.o_w, p.o_b);

  at::Tensor h2 = RmsNorm(x1, p.post_norm, c.rms_norm_eps);
  const MlpWeights mlp{p.gate_w, p.gate_b, p.up_w, p.up_b, p.down_w, p.down_b};
  return {x1, TiledMlp(mlp, h2, mlp_tile, /*fused=*/false)};
}

bool Fused(const BlockParams& p, const at::Tensor& x) {
  return UseFusedOps(x) && p.input_norm.scalar_type() == at::kBFloat16;
}

// SLIDEDP_RECOMPUTE_WHOLE=1 in the environment: recomputed blocks compute their MLP's
// output as well (the code before RecomputedBlockBackward skipped it; A/B runs).
bool RecomputeWhole() {
  static const bool whole = EnvIs("SLIDEDP_RECOMPUTE_WHOLE", "1");
  return whole;
}

void BackwardOfTerms(const BlockTerms& t, const at::Tensor& dy) { torch::autograd::backward({t.x1, t.mlp}, {dy, dy}); }

}  // namespace

at::Tensor FusedBlockForward(const ModelConfig& c, const BlockParams& p, const at::Tensor& x,
                             const TokenLayout& layout, int64_t mlp_tile) {
  const BlockTerms t = FusedBlockTerms(c, p, x, layout, mlp_tile, /*mlp_unread=*/false);
  return t.x1 + t.mlp;
}

at::Tensor BlockForward(const ModelConfig& c, const BlockParams& p, const at::Tensor& x,
                        const TokenLayout& layout, int64_t mlp_tile) {
  if (Fused(p, x)) return FusedBlockForward(c, p, x, layout, mlp_tile);
  const BlockTerms t = AtenBlockTerms(c, p, x, layout, mlp_tile);
  return t.x1 + t.mlp;
}

void FusedRecomputedBlockBackward(const ModelConfig& c, const BlockParams& p, const at::Tensor& x,
                                  const TokenLayout& layout, int64_t mlp_tile, const at::Tensor& dy) {
  BackwardOfTerms(FusedBlockTerms(c, p, x, layout, mlp_tile, /*mlp_unread=*/!RecomputeWhole()), dy);
}

void RecomputedBlockBackward(const ModelConfig& c, const BlockParams& p, const at::Tensor& x,
                             const TokenLayout& layout, int64_t mlp_tile, const at::Tensor& dy) {
  if (Fused(p, x)) return FusedRecomputedBlockBackward(c, p, x, layout, mlp_tile, dy);
  BackwardOfTerms(AtenBlockTerms(c, p, x, layout, mlp_tile), dy);
}

at::Tensor HeadLogits(const ModelConfig& c, const at::Tensor& norm_weight, const at::Tensor& lm_head,
                      const at::Tensor& hidden) {
  at::Tensor h = RmsNorm(hidden, norm_weight, c.rms_norm_eps);
  return at::linear(h, lm_head).to(at::kFloat);
}

at::Tensor FusedHeadBackward(const ModelConfig& config, const at::Tensor& norm_weight, const at::Tensor& lm_head,
                             const at::Tensor& hidden, const at::Tensor& targets, double scale,
                             const at::Tensor& lm_acc, bool sink) {
  at::Tensor h = RmsNorm(hidden, norm_weight, config.rms_norm_eps);
  const LinearCrossEntropy ce = FusedLinearCrossEntropy(h.detach().reshape({-1, config.hidden_size}),
                                                        lm_head.detach(), targets.reshape({-1}), scale,
                                                        sink ? lm_acc : at::Tensor());
  h.backward(ce.dh.view_as(h));
  if (ce.dw.defined()) lm_acc.add_(ce.dw);
  return ce.loss;
}

at::Tensor CrossEntropySum(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return at::cross_entropy_loss(logits.reshape({-1, V}), targets.reshape({-1}), /*weight=*/{},
                                at::Reduction::Sum, kIgnoreIndex);
}

}  // namespace slidedp
