// ModelConfig: see model_config.h. Parsing follows the defaults of the Hugging Face
// transformers config classes (LlamaConfig, Qwen2Config, Qwen3Config) for the fields
// this engine uses; unrelated fields are ignored, and fields that would change the math
// in ways the engine does not implement (another activation, sliding-window attention,
// another RoPE scaling) are refused. Plain functions; no threads.
#include "runtime/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

using nlohmann::json;

namespace {

// Limits that keep every size product of the layout far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxParams = int64_t{1} << 46;
constexpr size_t kMaxConfigBytes = 16 << 20;
constexpr int kMaxConfigNesting = 64;


class Reader {
 public:
  Reader(const json& j, absl::string_view source) : j_(j), source_(EchoPath(std::string_view(source.data(), source.size()))) {}

  absl::Status Error(absl::string_view field, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", field, "': ", msg));
  }

  // The value of `key`, or nullptr if absent or null.
  const json* Get(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::StatusOr<std::optional<int64_t>> OptInt(const json& obj, const std::string& key,
                                                absl::string_view field) const {
    const json* v = Get(obj, key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(kMaxParams)) return Error(field, "integer too large");
      return std::optional<int64_t>(static_cast<int64_t>(v->get<uint64_t>()));
    }
    if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
    return Error(field, absl::StrCat("expected an integer, got ", v->type_name()));
  }

  // A positive integer size; `def` if absent (required when def is nullopt).
  absl::StatusOr<int64_t> Size(const std::string& key, std::optional<int64_t> def, int64_t max = kMaxDim) const {
    absl::StatusOr<std::optional<int64_t>> v = OptInt(j_, key, key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) {
      if (!def.has_value()) return Error(key, "required field is missing");
      return *def;
    }
    if (**v <= 0) return Error(key, absl::StrCat("must be positive, got ", **v));
    if (**v > max) return Error(key, absl::StrCat("too large: ", **v, " (limit ", max, ")"));
    return **v;
  }

  absl::StatusOr<double> Number(const json& obj, const std::string& key, absl::string_view field, double def) const {
    const json* v = Get(obj, key);
    if (v == nullptr) return def;
    if (!v->is_number()) return Error(field, absl::StrCat("expected a number, got ", v->type_name()));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d <= 0) return Error(field, absl::StrCat("must be a positive finite number"));
    return d;
  }

  absl::StatusOr<bool> Bool(const std::string& key, bool def) const {
    const json* v = Get(j_, key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) return Error(key, absl::StrCat("expected a boolean, got ", v->type_name()));
    return v->get<bool>();
  }

  // A token id: integer, or a list of integers (the first is taken); -1 for null, `def`
  // when absent.
  absl::StatusOr<int64_t> TokenId(const std::string& key, int64_t def) const {
    if (!j_.contains(key)) return def;
    const json* v = Get(j_, key);
    if (v == nullptr) return int64_t{-1};
    if (v->is_array()) {
      if (v->empty()) return int64_t{-1};
      json first = json::object({{"id", (*v)[0]}});
      absl::StatusOr<std::optional<int64_t>> id = OptInt(first, "id", key);
      if (!id.ok()) return id.status();
      return std::max<int64_t>(-1, id->value_or(-1));
    }
    absl::StatusOr<std::optional<int64_t>> id = OptInt(j_, key, key);
    if (!id.ok()) return id.status();
    return std::max<int64_t>(-1, id->value_or(-1));  // any negative id means none
  }

  const json& root() const { return j_; }

 private:
  const json& j_;
  std::string source_;  // as echoed in messages
};

absl::StatusOr<ModelFamily> ParseFamily(const Reader& r) {
  const json* t = r.Get(r.root(), "model_type");
  if (t == nullptr) return r.Error("model_type", "required field is missing");
  if (!t->is_string()) return r.Error("model_type", "expected a string");
  const std::string& s = t->get_ref<const std::string&>();
  if (s == "llama") return ModelFamily::kLlama;
  if (s == "qwen2") return ModelFamily::kQwen2;
  if (s == "qwen3") return ModelFamily::kQwen3;
  if (s == "mistral") return ModelFamily::kMistral;
  return r.Error("model_type",
                 absl::StrCat("unsupported model type '", Echo(s), "' (llama, mistral, qwen2, qwen3)"));
}

// rope_scaling (legacy) wins over rope_parameters (transformers 5), as in transformers.
absl::Status ParseRope(const Reader& r, ModelConfig& c) {
  std::string field = "rope_scaling";
  const json* rope = r.Get(r.root(), field);
  if (rope == nullptr) {
    field = "rope_parameters";
    rope = r.Get(r.root(), field);
  }
  if (rope != nullptr && !rope->is_object()) return r.Error(field, "expected an object or null");
  absl::StatusOr<double> theta = r.Number(r.root(), "rope_theta", "rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  c.rope_theta = *theta;
  if (rope == nullptr) return absl::OkStatus();

  theta = r.Number(*rope, "rope_theta", field + ".rope_theta", c.rope_theta);
  if (!theta.ok()) return theta.status();
  c.rope_theta = *theta;
  std::string type_key = rope->contains("rope_type") ? "rope_type" : "type";
  const json* type = r.Get(*rope, type_key);
  if (type == nullptr) return absl::OkStatus();
  if (!type->is_string()) return r.Error(field + "." + type_key, "expected a string");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "default") return absl::OkStatus();
  if (t != "llama3") {
    return r.Error(field + "." + type_key, absl::StrCat("unsupported RoPE type '", Echo(t), "' (default, llama3)"));
  }
  RopeScaling& s = c.rope_scaling;
  s.type = "llama3";
  for (auto [key, dst] : {std::pair<const char*, double*>{"factor", &s.factor},
                          {"low_freq_factor", &s.low_freq_factor},
                          {"high_freq_factor", &s.high_freq_factor}}) {
    if (r.Get(*rope, key) == nullptr) return r.Error(field + "." + key, "required for llama3 RoPE");
    absl::StatusOr<double> v = r.Number(*rope, key, field + "." + key, 1.0);
    if (!v.ok()) return v.status();
    *dst = *v;
  }
  if (s.high_freq_factor <= s.low_freq_factor) {
    return r.Error(field + ".high_freq_factor", "must be larger than low_freq_factor");
  }
  absl::StatusOr<std::optional<int64_t>> orig =
      r.OptInt(*rope, "original_max_position_embeddings", field + ".original_max_position_embeddings");
  if (!orig.ok()) return orig.status();
  if (!orig->has_value() || **orig <= 0) {
    return r.Error(field + ".original_max_position_embeddings", "required positive integer for llama3 RoPE");
  }
  s.original_max_position_embeddings = **orig;
  return absl::OkStatus();
}

absl::Status ParseSizes(const Reader& r, ModelConfig& c) {
  const bool llama = c.family == ModelFamily::kLlama;
  // MistralConfig's default is 4096 * 32.
  const int64_t max_pos = llama ? 2048 : c.family == ModelFamily::kMistral ? 131072 : 32768;
  struct Field {
    const char* key;
    int64_t* dst;
    std::optional<int64_t> def;
    int64_t max;
  };
  const Field fields[] = {
      {"vocab_size", &c.vocab_size, std::nullopt, kMaxDim},
      {"hidden_size", &c.hidden_size, std::nullopt, kMaxDim},
      {"intermediate_size", &c.intermediate_size, std::nullopt, kMaxDim},
      {"num_hidden_layers", &c.num_layers, std::nullopt, kMaxLayers},
      {"num_attention_heads", &c.num_heads, std::nullopt, kMaxDim},
      {"max_position_embeddings", &c.max_position_embeddings, max_pos, kMaxParams},
  };
  for (const Field& f : fields) {
    absl::StatusOr<int64_t> v = r.Size(f.key, f.def, f.max);
    if (!v.ok()) return v.status();
    *f.dst = *v;
  }
  absl::StatusOr<int64_t> kv = r.Size("num_key_value_heads", c.num_heads);
  if (!kv.ok()) return kv.status();
  c.num_kv_heads = *kv;
  if (c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads", absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads (",
                                                       c.num_heads, ")"));
  }
  // Qwen3Config defaults head_dim to 128; the others to hidden_size / num_attention_heads.
  const bool has_head_dim = r.Get(r.root(), "head_dim") != nullptr;
  if (!has_head_dim && c.family != ModelFamily::kQwen3 && c.hidden_size % c.num_heads != 0) {
    return r.Error("num_attention_heads", absl::StrCat(c.num_heads, " does not divide hidden_size (",
                                                       c.hidden_size, ") and head_dim is absent"));
  }
  const int64_t def_head = c.family == ModelFamily::kQwen3 ? 128 : c.hidden_size / c.num_heads;
  absl::StatusOr<int64_t> hd = r.Size("head_dim", def_head);
  if (!hd.ok()) return hd.status();
  c.head_dim = *hd;
  return absl::OkStatus();
}

absl::Status ParseFlags(const Reader& r, ModelConfig& c) {
  absl::StatusOr<bool> attn_bias = r.Bool("attention_bias", false);
  absl::StatusOr<bool> mlp_bias = r.Bool("mlp_bias", false);
  absl::StatusOr<bool> tie = r.Bool("tie_word_embeddings", false);
  absl::StatusOr<bool> sliding = r.Bool("use_sliding_window", false);
  for (const auto* s : {&attn_bias, &mlp_bias, &tie, &sliding}) {
    if (!s->ok()) return s->status();
  }
  if (*sliding) return r.Error("use_sliding_window", "sliding-window attention is not supported");
  const json* act = r.Get(r.root(), "hidden_act");
  if (act != nullptr && (!act->is_string() || act->get_ref<const std::string&>() != "silu")) {
    return r.Error("hidden_act", absl::StrCat("only \"silu\" is supported, got ", Echo(act->dump(-1, ' ', false, json::error_handler_t::replace))));
  }
  c.tie_word_embeddings = *tie;
  switch (c.family) {
    case ModelFamily::kLlama:
      c.qkv_bias = c.o_bias = *attn_bias;
      c.mlp_bias = *mlp_bias;
      break;
    case ModelFamily::kQwen2:
      c.qkv_bias = true;
      break;
    case ModelFamily::kQwen3:
      c.qkv_bias = c.o_bias = *attn_bias;
      c.qk_norm = true;
      break;
    case ModelFamily::kMistral:
      break;  // MistralConfig has no biases
  }
  return absl::OkStatus();
}

// Mistral's sliding_window: absent means MistralConfig's default 4096, null none.
absl::Status ParseSlidingWindow(const Reader& r, ModelConfig& c) {
  if (c.family != ModelFamily::kMistral) return absl::OkStatus();
  if (!r.root().contains("sliding_window")) {
    c.sliding_window = 4096;
    return absl::OkStatus();
  }
  if (r.Get(r.root(), "sliding_window") == nullptr) {
    c.sliding_window = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> w = r.Size("sliding_window", std::nullopt, kMaxParams);
  if (!w.ok()) return w.status();
  c.sliding_window = *w;
  return absl::OkStatus();
}

absl::Status ParseScalars(const Reader& r, ModelConfig& c) {
  absl::StatusOr<double> eps = r.Number(r.root(), "rms_norm_eps", "rms_norm_eps", 1e-6);
  if (!eps.ok()) return eps.status();
  c.rms_norm_eps = *eps;
  const bool llama = c.family == ModelFamily::kLlama || c.family == ModelFamily::kMistral;
  absl::StatusOr<int64_t> bos = r.TokenId("bos_token_id", llama ? 1 : -1);
  if (!bos.ok()) return bos.status();
  absl::StatusOr<int64_t> eos = r.TokenId("eos_token_id", llama ? 2 : -1);
  if (!eos.ok()) return eos.status();
  c.bos_token_id = *bos;
  c.eos_token_id = *eos;
  return absl::OkStatus();
}

// Total parameters with overflow-safe arithmetic; false when beyond kMaxParams.
bool ParamCountFits(const ModelConfig& c) {
  const __int128 H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const __int128 q = c.num_heads * D, kv = c.num_kv_heads * D;
  const __int128 block = 2 * H + q * H + 2 * kv * H + H * q + 3 * I * H + 2 * D + q + 2 * kv + H + 2 * I;
  const __int128 total = c.vocab_size * H * 2 + H + c.num_layers * block;
  return total <= kMaxParams;
}

json RopeJson(const ModelConfig& c, bool with_theta) {
  json r = json::object();
  if (c.rope_scaling.type == "llama3") {
    r = {{"rope_type", "llama3"},
         {"factor", c.rope_scaling.factor},
         {"low_freq_factor", c.rope_scaling.low_freq_factor},
         {"high_freq_factor", c.rope_scaling.high_freq_factor},
         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    r["rope_type"] = "default";
  }
  if (with_theta) r["rope_theta"] = c.rope_theta;
  return r;
}

json TokenJson(int64_t id) { return id < 0 ? json(nullptr) : json(id); }

}  // namespace

std::string_view FamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kQwen3: return "qwen3";
    case ModelFamily::kMistral: return "mistral";
  }
  return "unknown";
}

absl::Status CheckSequenceLength(const ModelConfig& config, int64_t seq_len) {
  if (config.sliding_window > 0 && seq_len > config.sliding_window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq_len ", seq_len, " is longer than the model's sliding_window ", config.sliding_window,
        ": only full attention is implemented, which equals the model's sliding-window "
        "attention only for sequences within the window; use seq_len <= ",
        config.sliding_window));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfigJson(std::string_view text, std::string_view source_name) {
  const std::string source = EchoPath(source_name);
  // Refuse absurd nesting before the JSON library sees it (its destructor recurses).
  if (const int line = JsonNestingExceeded(text, kMaxConfigNesting); line != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ": JSON nested deeper than ", kMaxConfigNesting));
  }
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", Echo(e.what(), 400)));
  }
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": JSON is not an object"));
  Reader r(j, source);
  ModelConfig c;
  absl::StatusOr<ModelFamily> family = ParseFamily(r);
  if (!family.ok()) return family.status();
  c.family = *family;
  for (auto step : {ParseSizes, ParseRope, ParseFlags, ParseSlidingWindow, ParseScalars}) {
    absl::Status s = step(r, c);
    if (!s.ok()) return s;
  }
  if (!ParamCountFits(c)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model too large (over 2^46 parameters)"));
  }
  return c;
}

bool ModelIsDirectory(const std::string& model) {
  std::error_code ec;
  return !model.empty() && std::filesystem::is_regular_file(std::filesystem::path(model) / "config.json", ec);
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  // Never blocks, regular files only, inside the read roots (runtime/io/file_access.h).
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxConfigBytes);
  if (!text.ok()) return text.status();
  return ParseModelConfigJson(*text, path);
}

std::string ModelConfigToJson(const ModelConfig& c) {
  static constexpr const char* kArch[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                          "MistralForCausalLM"};
  json j = {
      {"architectures", json::array({kArch[static_cast<int>(c.family)]})},
      {"model_type", FamilyName(c.family)},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      // Legacy key for transformers 4.x; transformers 5.x reads it too and prefers it.
      {"rope_scaling", c.rope_scaling.type.empty() ? json(nullptr) : RopeJson(c, false)},
      {"rope_parameters", RopeJson(c, true)},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"bos_token_id", TokenJson(c.bos_token_id)},
      {"eos_token_id", TokenJson(c.eos_token_id)},
      {"torch_dtype", "float32"},
      {"dtype", "float32"},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
      {"use_cache", true},
  };
  // Llama and Qwen3 carry one attention_bias flag for q/k/v and o (o_bias follows qkv_bias).
  if (c.family == ModelFamily::kLlama || c.family == ModelFamily::kQwen3) {
    j["attention_bias"] = c.qkv_bias;
  }
  if (c.family == ModelFamily::kLlama) {
    j["mlp_bias"] = c.mlp_bias;
    j["pretraining_tp"] = 1;
  } else if (c.family == ModelFamily::kMistral) {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_layers;
  }
  return j.dump(2) + "\n";
}

namespace {

ModelConfig Qwen2(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                  bool tie, int64_t max_pos) {
  ModelConfig c;
  c.family = ModelFamily::kQwen2;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.qkv_bias = true;
  c.tie_word_embeddings = tie;
  return c;
}

ModelConfig WithTokens(ModelConfig c, int64_t bos, int64_t eos) {
  c.bos_token_id = bos;
  c.eos_token_id = eos;
  return c;
}

ModelConfig Qwen3(int64_t hidden, int64_t inter, int64_t layers, int64_t heads) {
  ModelConfig c = Qwen2(151936, hidden, inter, layers, heads, 8, false, 40960);
  c.family = ModelFamily::kQwen3;
  c.head_dim = 128;
  c.qkv_bias = false;
  c.qk_norm = true;
  return WithTokens(c, 151643, 151645);
}

ModelConfig Llama31_8B() {
  ModelConfig c = Qwen2(128256, 4096, 14336, 32, 32, 8, false, 131072);
  c.family = ModelFamily::kLlama;
  c.qkv_bias = false;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
  return WithTokens(c, 128000, 128001);
}

struct Preset {
  const char* name;
  ModelConfig (*make)();
};

// Shapes from the config.json of each Hugging Face model (base, not instruct).
const Preset kPresets[] = {
    {"tiny", [] { return Qwen2(512, 64, 176, 2, 4, 2, true, 4096); }},
    {"small", [] { return Qwen2(2048, 256, 688, 4, 8, 2, false, 4096); }},
    {"qwen2.5-0.5b", [] { return WithTokens(Qwen2(151936, 896, 4864, 24, 14, 2, true, 32768), 151643, 151643); }},
    {"qwen2.5-1.5b", [] { return WithTokens(Qwen2(151936, 1536, 8960, 28, 12, 2, true, 131072), 151643, 151643); }},
    {"qwen2.5-3b", [] { return WithTokens(Qwen2(151936, 2048, 11008, 36, 16, 2, true, 32768), 151643, 151643); }},
    {"qwen2.5-7b", [] { return WithTokens(Qwen2(152064, 3584, 18944, 28, 28, 4, false, 131072), 151643, 151643); }},
    {"qwen3-8b", [] { return Qwen3(4096, 12288, 36, 32); }},
    {"qwen3-14b", [] { return Qwen3(5120, 17408, 40, 40); }},
    {"llama-3.1-8b", Llama31_8B},
};

}  // namespace

absl::StatusOr<ModelConfig> PresetConfig(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
  }
  std::string names;
  for (const Preset& p : kPresets) absl::StrAppend(&names, names.empty() ? "" : ", ", p.name);
  return absl::NotFoundError(absl::StrCat("unknown model preset '", Echo(name), "' (", names, ")"));
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

int64_t ParameterCount(const ModelConfig& config) { return BuildLayout(config).total_numel; }

}  // namespace slidedp
