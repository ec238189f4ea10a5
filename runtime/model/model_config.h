// ModelConfig: the shape of a decoder-only transformer (Llama, Mistral, Qwen2, Qwen3
// families; Mistral is the Llama layout without biases, with a sliding_window),
// read from a Hugging Face config.json or taken from a built-in preset.
// Plain data; no threads, no devices.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace slidedp {

enum class ModelFamily { kLlama, kQwen2, kQwen3, kMistral };

std::string_view FamilyName(ModelFamily family);

struct RopeScaling {
  // "" (none) or "llama3" (Llama 3.1 frequency-dependent scaling).
  std::string type;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // Qwen2: always; Llama/Qwen3: attention_bias
  bool o_bias = false;    // Llama/Qwen3: attention_bias
  bool mlp_bias = false;  // Llama: mlp_bias
  bool qk_norm = false;   // Qwen3: RMSNorm over head_dim on q and k
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  // Mistral: the attention window of config.json's sliding_window (absent: 4096, as
  // MistralConfig's default); 0 when null (full attention). The engine attends over the
  // whole sequence, so a job's seq_len must not exceed it (CheckSequenceLength).
  int64_t sliding_window = 0;
};

// Parses a Hugging Face config.json. `source` names the file in error messages.
// Rejects unknown model_type, missing or non-positive sizes, num_heads not divisible
// by num_kv_heads, and similar inconsistencies, naming the field.
absl::StatusOr<ModelConfig> ParseModelConfigJson(std::string_view text, std::string_view source);

// InvalidArgument naming both numbers when `seq_len` is longer than the model's
// sliding_window: the engine implements full attention only, which equals sliding-window
// attention exactly when no sequence is longer than the window.
absl::Status CheckSequenceLength(const ModelConfig& config, int64_t seq_len);

// Whether job field `model` names a model directory (one holding a config.json file)
// rather than a preset: how the engine, the export and the daemon's admission read it.
bool ModelIsDirectory(const std::string& model);

// Reads DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// Serializes as a Hugging Face config.json that transformers loads.
std::string ModelConfigToJson(const ModelConfig& config);

// Built-in shapes: "tiny", "small", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b",
// "qwen2.5-7b", "qwen3-8b", "qwen3-14b", "llama-3.1-8b".
absl::StatusOr<ModelConfig> PresetConfig(std::string_view name);
std::vector<std::string> PresetNames();

// Total number of parameters (tied embeddings counted once).
int64_t ParameterCount(const ModelConfig& config);

}  // namespace slidedp
