// ParamLayout: see param_layout.h.
#include "runtime/model/param_layout.h"

#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

class UnitBuilder {
 public:
  UnitBuilder(UnitKind kind, int layer, std::string prefix) : prefix_(std::move(prefix)) {
    unit_.kind = kind;
    unit_.layer = layer;
  }
  void Add(const std::string& name, std::vector<int64_t> shape) {
    ParamSpec p;
    p.name = prefix_ + name;
    p.numel = 1;
    for (int64_t d : shape) p.numel *= d;
    p.shape = std::move(shape);
    p.offset = unit_.numel;
    p.decay = p.shape.size() >= 2;  // no decay for norms and biases
    unit_.numel += p.numel;
    unit_.params.push_back(std::move(p));
  }
  UnitLayout Take() { return std::move(unit_); }

 private:
  std::string prefix_;
  UnitLayout unit_;
};

}  // namespace

int UnitLayout::Find(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& full = params[i].name;
    if (full == name) return static_cast<int>(i);
    if (full.size() > name.size() && full.compare(full.size() - name.size(), name.size(), name) == 0 &&
        full[full.size() - name.size() - 1] == '.') {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::string UnitName(int unit, int num_units) {
  if (unit == 0) return "embedding";
  if (unit == num_units - 1) return "head";
  return absl::StrCat("block ", unit - 1);
}

ModelLayout BuildLayout(const ModelConfig& c) {
  ModelLayout layout;
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q_out = c.num_heads * D, kv_out = c.num_kv_heads * D;

  UnitBuilder emb(UnitKind::kEmbedding, -1, "model.");
  emb.Add("embed_tokens.weight", {c.vocab_size, H});
  layout.units.push_back(emb.Take());

  for (int64_t l = 0; l < c.num_layers; ++l) {
    UnitBuilder b(UnitKind::kBlock, static_cast<int>(l), absl::StrCat("model.layers.", l, "."));
    b.Add("input_layernorm.weight", {H});
    b.Add("self_attn.q_proj.weight", {q_out, H});
    if (c.qkv_bias) b.Add("self_attn.q_proj.bias", {q_out});
    b.Add("self_attn.k_proj.weight", {kv_out, H});
    if (c.qkv_bias) b.Add("self_attn.k_proj.bias", {kv_out});
    b.Add("self_attn.v_proj.weight", {kv_out, H});
    if (c.qkv_bias) b.Add("self_attn.v_proj.bias", {kv_out});
    b.Add("self_attn.o_proj.weight", {H, q_out});
    if (c.o_bias) b.Add("self_attn.o_proj.bias", {H});
    if (c.qk_norm) {
      b.Add("self_attn.q_norm.weight", {D});
      b.Add("self_attn.k_norm.weight", {D});
    }
    b.Add("post_attention_layernorm.weight", {H});
    b.Add("mlp.gate_proj.weight", {I, H});
    if (c.mlp_bias) b.Add("mlp.gate_proj.bias", {I});
    b.Add("mlp.up_proj.weight", {I, H});
    if (c.mlp_bias) b.Add("mlp.up_proj.bias", {I});
    b.Add("mlp.down_proj.weight", {H, I});
    if (c.mlp_bias) b.Add("mlp.down_proj.bias", {H});
    layout.units.push_back(b.Take());
  }

  UnitBuilder head(UnitKind::kHead, -1, "");
  head.Add("model.norm.weight", {H});
  if (!c.tie_word_embeddings) head.Add("lm_head.weight", {c.vocab_size, H});
  UnitLayout h = head.Take();
  h.uses_tied_embedding = c.tie_word_embeddings;
  layout.units.push_back(std::move(h));

  for (const UnitLayout& u : layout.units) layout.total_numel += u.numel;
  return layout;
}

}  // namespace slidedp
