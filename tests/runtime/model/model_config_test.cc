// Tests of ModelConfig parsing (Hugging Face config.json of Llama, Qwen2, Qwen3, in the
// transformers 4.x and 5.x forms), its errors, serialization and the presets.
#include "runtime/model/model_config.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slidedp {
namespace {

// Llama-3.1-8B's config.json as published (transformers 4.43).
constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// Qwen2.5-0.5B's config.json as published.
constexpr const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false,
  "use_sliding_window": false, "vocab_size": 151936})";

// A Qwen3 config in the transformers 5.x form (rope_parameters, dtype, eos list).
constexpr const char* kQwen3v5 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "dtype": "float32",
  "eos_token_id": [7, 8], "head_dim": 32, "hidden_size": 64, "intermediate_size": 112,
  "layer_types": ["full_attention", "full_attention"], "model_type": "qwen3",
  "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 96})";

ModelConfig MustParse(const std::string& text) {
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(text, "config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b, const std::string& what) {
  EXPECT_EQ(a.family, b.family) << what;
  EXPECT_EQ(a.vocab_size, b.vocab_size) << what;
  EXPECT_EQ(a.hidden_size, b.hidden_size) << what;
  EXPECT_EQ(a.intermediate_size, b.intermediate_size) << what;
  EXPECT_EQ(a.num_layers, b.num_layers) << what;
  EXPECT_EQ(a.num_heads, b.num_heads) << what;
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings) << what;
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps) << what;
  EXPECT_EQ(a.rope_theta, b.rope_theta) << what;
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type) << what;
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor) << what;
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor) << what;
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor) << what;
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings) << what;
  EXPECT_EQ(a.qkv_bias, b.qkv_bias) << what;
  EXPECT_EQ(a.o_bias, b.o_bias) << what;
  EXPECT_EQ(a.mlp_bias, b.mlp_bias) << what;
  EXPECT_EQ(a.qk_norm, b.qk_norm) << what;
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings) << what;
  EXPECT_EQ(a.bos_token_id, b.bos_token_id) << what;
  EXPECT_EQ(a.eos_token_id, b.eos_token_id) << what;
  EXPECT_EQ(a.sliding_window, b.sliding_window) << what;
}

TEST(ModelConfigTest, ParsesLlama31) {
  ModelConfig c = MustParse(kLlama31);
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm || c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  ExpectSameConfig(c, *PresetConfig("llama-3.1-8b"), "preset matches the published config");
}

// Mistral-7B-v0.1's config.json as published: the Llama layout, no biases, a window.
constexpr const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

TEST(ModelConfigTest, ParsesMistralAndItsSlidingWindow) {
  ModelConfig c = MustParse(kMistral7B);
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm || c.tie_word_embeddings);
  EXPECT_TRUE(CheckSequenceLength(c, 4096).ok());
  absl::Status too_long = CheckSequenceLength(c, 8192);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("8192"), std::string::npos) << too_long;
  EXPECT_NE(too_long.message().find("sliding_window 4096"), std::string::npos) << too_long;

  nlohmann::json j = nlohmann::json::parse(kMistral7B);
  j["sliding_window"] = nullptr;  // Mistral 7B v0.2 and later: full attention
  c = MustParse(j.dump());
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(CheckSequenceLength(c, 1 << 20).ok());
  j.erase("sliding_window");  // MistralConfig's default
  EXPECT_EQ(MustParse(j.dump()).sliding_window, 4096);
  j["sliding_window"] = -1;
  EXPECT_FALSE(ParseModelConfigJson(j.dump(), "config.json").ok());

  // Written back as a Mistral config that keeps the window.
  const nlohmann::json out = nlohmann::json::parse(ModelConfigToJson(MustParse(kMistral7B)));
  EXPECT_EQ(out["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(out["model_type"], "mistral");
  EXPECT_EQ(out["sliding_window"], 4096);
  ExpectSameConfig(MustParse(out.dump()), MustParse(kMistral7B), "round trip");
}

TEST(ModelConfigTest, ParsesQwen25) {
  ModelConfig c = MustParse(kQwen25);
  EXPECT_EQ(c.family, ModelFamily::kQwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_theta, 1e6);
  ExpectSameConfig(c, *PresetConfig("qwen2.5-0.5b"), "preset matches the published config");
}

TEST(ModelConfigTest, ParsesQwen3TransformersV5Form) {
  ModelConfig c = MustParse(kQwen3v5);
  EXPECT_EQ(c.family, ModelFamily::kQwen3);
  EXPECT_EQ(c.head_dim, 32);  // explicit, differs from hidden / heads
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_id, 7);  // first of the list
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.max_position_embeddings, 32768);  // Qwen3Config default
}

TEST(ModelConfigTest, DefaultsFollowTransformers) {
  ModelConfig c = MustParse(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
                                "num_hidden_layers":1,"num_attention_heads":2,"attention_bias":true,"mlp_bias":true})");
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.rope_scaling.type.empty());
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  ModelConfig q3 = MustParse(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":4,
                                 "num_hidden_layers":1,"num_attention_heads":2})");
  EXPECT_EQ(q3.head_dim, 128);  // Qwen3Config's default head_dim
  ModelConfig q2 = MustParse(R"({"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":4,
                                 "num_hidden_layers":1,"num_attention_heads":2,"attention_bias":false,
                                 "mlp_bias":true})");
  EXPECT_TRUE(q2.qkv_bias);  // Qwen2 always has q/k/v biases, whatever attention_bias says
  EXPECT_FALSE(q2.mlp_bias);
  ModelConfig null_ids = MustParse(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
      "num_hidden_layers":1,"num_attention_heads":2,"bos_token_id":null,"eos_token_id":[]})");
  EXPECT_EQ(null_ids.bos_token_id, -1);  // an explicit null overrides LlamaConfig's default
  EXPECT_EQ(null_ids.eos_token_id, -1);
  ExpectSameConfig(MustParse(ModelConfigToJson(null_ids)), null_ids, "null token ids");
}

TEST(ModelConfigTest, RopeScalingWinsOverRopeParametersAsInTransformers) {
  ModelConfig c = MustParse(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
      "num_hidden_layers":1,"num_attention_heads":2,"rope_theta":1234.0,
      "rope_scaling":{"type":"llama3","factor":2,"low_freq_factor":1,"high_freq_factor":4,
                      "original_max_position_embeddings":64},
      "rope_parameters":{"rope_type":"default","rope_theta":99.0}})");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_EQ(c.rope_theta, 1234.0);
  ModelConfig v5 = MustParse(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
      "num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":null,
      "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,"low_freq_factor":1.0,
                         "high_freq_factor":4.0,"original_max_position_embeddings":8}})");
  EXPECT_EQ(v5.rope_scaling.type, "llama3");
  EXPECT_EQ(v5.rope_theta, 500000.0);
  EXPECT_EQ(v5.rope_scaling.original_max_position_embeddings, 8);
}

struct BadConfig {
  const char* what;
  std::string text;
  const char* expect;  // substring of the error: the field at fault
};

std::string Base(const std::string& extra, const std::string& type = "llama") {
  return R"({"model_type":")" + type + R"(","vocab_size":10,"intermediate_size":4,"num_hidden_layers":1)" + extra + "}";
}

TEST(ModelConfigTest, BadConfigsNameTheField) {
  const std::string hh = R"(,"hidden_size":8,"num_attention_heads":2)";
  const BadConfig cases[] = {
      {"not json", "{\"model_type\": ", "not valid JSON"},
      {"not object", "[1, 2]", "not an object"},
      {"deep", std::string(5000, '[') + std::string(5000, ']'), "nested"},
      {"no model_type", R"({"hidden_size": 8})", "model_type"},
      {"unknown model_type", Base(hh, "gemma"), "gemma"},  // (mistral was the example until it was supported)
      {"missing hidden_size", Base(R"(,"num_attention_heads":2)"), "hidden_size"},
      {"hidden_size string", Base(R"(,"hidden_size":"8","num_attention_heads":2)"), "hidden_size"},
      {"hidden_size float", Base(R"(,"hidden_size":8.0,"num_attention_heads":2)"), "hidden_size"},
      {"hidden_size zero", Base(R"(,"hidden_size":0,"num_attention_heads":2)"), "hidden_size"},
      {"hidden_size huge", Base(R"(,"hidden_size":1000000000000,"num_attention_heads":2)"), "hidden_size"},
      {"layers negative", R"({"model_type":"llama","vocab_size":10,"intermediate_size":4,"num_hidden_layers":-3,"hidden_size":8,"num_attention_heads":2})",
       "num_hidden_layers"},
      {"kv not dividing", Base(R"(,"hidden_size":12,"num_attention_heads":6,"num_key_value_heads":4)"),
       "num_key_value_heads"},
      {"heads not dividing hidden", Base(R"(,"hidden_size":10,"num_attention_heads":4,"num_key_value_heads":2)"),
       "num_attention_heads"},
      {"rope type unknown", Base(hh + R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})"), "rope_scaling.rope_type"},
      {"rope legacy type unknown", Base(hh + R"(,"rope_scaling":{"type":"linear","factor":4.0})"), "rope_scaling.type"},
      {"rope v5 unknown", Base(hh + R"(,"rope_parameters":{"rope_type":"dynamic","factor":4.0})"),
       "rope_parameters.rope_type"},
      {"rope not object", Base(hh + R"(,"rope_scaling":"llama3")"), "rope_scaling"},
      {"llama3 without factor", Base(hh + R"(,"rope_scaling":{"rope_type":"llama3","low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8})"),
       "rope_scaling.factor"},
      {"rope_theta negative", Base(hh + R"(,"rope_theta":-1)"), "rope_theta"},
      {"eps string", Base(hh + R"(,"rms_norm_eps":"small")"), "rms_norm_eps"},
      {"tie string", Base(hh + R"(,"tie_word_embeddings":"true")"), "tie_word_embeddings"},
      {"gelu", Base(hh + R"(,"hidden_act":"gelu")"), "hidden_act"},
      {"sliding window", Base(hh + R"(,"use_sliding_window":true)", "qwen2"), "use_sliding_window"},
      {"eos string", Base(hh + R"(,"eos_token_id":"</s>")"), "eos_token_id"},
      {"too large", Base(R"(,"hidden_size":16000000,"num_attention_heads":2,"vocab_size":16000000)"), "too large"},
  };
  for (const BadConfig& b : cases) {
    absl::StatusOr<ModelConfig> c = ParseModelConfigJson(b.text, "/m/config.json");
    ASSERT_FALSE(c.ok()) << b.what;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << b.what;
    EXPECT_NE(c.status().message().find("/m/config.json"), absl::string_view::npos) << b.what << ": " << c.status();
    EXPECT_NE(c.status().message().find(b.expect), absl::string_view::npos) << b.what << ": " << c.status();
  }
}

TEST(ModelConfigTest, ToJsonRoundTripsEveryPresetAndNamesTheArchitecture) {
  ASSERT_EQ(PresetNames().size(), 9u);
  for (const std::string& name : PresetNames()) {
    absl::StatusOr<ModelConfig> p = PresetConfig(name);
    ASSERT_TRUE(p.ok()) << name;
    const std::string text = ModelConfigToJson(*p);
    ExpectSameConfig(MustParse(text), *p, name);
    nlohmann::json j = nlohmann::json::parse(text);
    const char* arch = p->family == ModelFamily::kLlama   ? "LlamaForCausalLM"
                       : p->family == ModelFamily::kQwen2 ? "Qwen2ForCausalLM"
                                                          : "Qwen3ForCausalLM";
    EXPECT_EQ(j["architectures"][0], arch) << name;
    EXPECT_EQ(j["model_type"], std::string(FamilyName(p->family))) << name;
    EXPECT_EQ(j["torch_dtype"], "float32") << name;
  }
  ModelConfig odd = MustParse(kQwen3v5);
  ExpectSameConfig(MustParse(ModelConfigToJson(odd)), odd, "qwen3 with head_dim != hidden/heads");
}

TEST(ModelConfigTest, PresetParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen2.5-0.5b")), 494032768);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen2.5-1.5b")), 1543714304);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen2.5-3b")), 3085938688);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen2.5-7b")), 7615616512);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-8b")), 8190735360);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-14b")), 14768307200);
  EXPECT_EQ(ParameterCount(*PresetConfig("llama-3.1-8b")), 8030261248);
  ModelConfig tiny = *PresetConfig("tiny");
  EXPECT_TRUE(tiny.tie_word_embeddings);
  EXPECT_LT(ParameterCount(tiny), 200000);  // trains in seconds on two cores
  EXPECT_EQ(PresetConfig("gpt-5").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(PresetConfig("gpt-5").status().message().find("qwen3-8b"), absl::string_view::npos);
}

TEST(ModelConfigTest, LoadsTheReferenceFixtures) {
  const std::string root = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/";
  if (!std::filesystem::exists(root + "llama/config.json")) GTEST_SKIP() << "no fixtures under " << root;
  absl::StatusOr<ModelConfig> llama = LoadModelConfig(root + "llama");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->rope_scaling.type, "llama3");
  EXPECT_EQ(llama->rope_theta, 500000.0);
  EXPECT_TRUE(llama->qkv_bias && llama->o_bias && llama->mlp_bias);
  absl::StatusOr<ModelConfig> qwen2 = LoadModelConfig(root + "qwen2");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_TRUE(qwen2->tie_word_embeddings);
  absl::StatusOr<ModelConfig> qwen3 = LoadModelConfig(root + "qwen3");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->head_dim, 32);
}

TEST(ModelConfigTest, LoadModelConfigOfMissingFolder) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(::testing::TempDir() + "/no_such_model");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("no_such_model/config.json"), absl::string_view::npos);
}

}  // namespace
}  // namespace slidedp
