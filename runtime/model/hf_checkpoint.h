// HfCheckpoint: loading and saving the weights of a Hugging Face model directory
// (config.json + model.safetensors, or shards named by model.safetensors.index.json)
// against a ModelLayout, with no LibTorch. Called from one thread at a time (job setup
// and export); the callbacks are invoked on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

class StopToken;  // runtime/io/stop_token.h

// Reads MODEL_DIR/model.safetensors.index.json and the shards it names, or else
// MODEL_DIR/model.safetensors, and converts every parameter of `layout` to fp32 into
// dest(unit, param), a buffer of layout.units[unit].params[param].numel floats.
// Everything is validated before anything is converted: each parameter must be present
// exactly once with exactly its shape, in F32, BF16 or F16, and the files may hold no
// tensor the layout does not use, except rotary "inv_freq" buffers and "lm_head.weight"
// when the layout ties it to the embedding (both ignored). Errors name the folder or
// file, the tensor, and the expected and actual shapes. On an error during conversion
// the destination buffers may be partly written. CANCELLED between tensors once `stop`
// (may be null) is set.
absl::Status LoadHfWeights(const std::string& model_dir, const ModelLayout& layout,
                           const std::function<float*(int unit, int param)>& dest,
                           const StopToken* stop = nullptr);

// Writes DIR/config.json (ModelConfigToJson) and the parameters of `layout`, read from
// src(unit, param) (numel fp32 values each), as `dtype` ("F32" or "BF16"): one
// DIR/model.safetensors when the tensor data fits in max_shard_bytes, else shards
// DIR/model-0000K-of-0000N.safetensors of at most max_shard_bytes each (a larger tensor
// gets a shard of its own) plus DIR/model.safetensors.index.json with
// {"metadata": {"total_size"}, "weight_map"}. Every file is written atomically; a stale
// single file or index of the other form is removed afterwards. `layout` must be
// BuildLayout(config). DIR is created if missing.
absl::Status SaveHfModel(const std::string& dir, const ModelConfig& config, const ModelLayout& layout,
                         const std::function<const float*(int unit, int param)>& src,
                         const std::string& dtype, int64_t max_shard_bytes);

// The files beside the weights that make an export usable by itself (AutoTokenizer,
// generate): the tokenizer of `tokenizer` (a tokenizer.json, or a directory holding one;
// "" for none) and, from its directory, tokenizer_config.json, special_tokens_map.json
// and tokenizer.model (only when the file given is named tokenizer.json); and
// generation_config.json of `model_dir` ("" when the model is a preset). Each is copied
// as it is into `dir` (an existing directory), atomically; a missing one is skipped.
// Returns the names written. Errors (unreadable, over 256 MiB, not a regular file) name
// the file.
absl::StatusOr<std::vector<std::string>> CopyHfSideFiles(const std::string& model_dir, const std::string& tokenizer,
                                                         const std::string& dir);

}  // namespace slidedp
