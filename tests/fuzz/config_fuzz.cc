// libFuzzer entry point for the config.json parser: any text is parsed; a config that
// parses must serialize with ModelConfigToJson and parse back to the same shape.
// Built and run (ASan + UBSan, bounded time) by deploy/fuzz.sh; by hand, from the repository root:
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     tests/fuzz/config_fuzz.cc runtime/model/model_config.cc runtime/model/param_layout.cc \
//     $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format) -o /tmp/config_fuzz
//   /tmp/config_fuzz -max_total_time=60 -max_len=4096 /tmp/config_corpus tests/fuzz/corpus/config
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<slidedp::ModelConfig> c = slidedp::ParseModelConfigJson(text, "fuzz/config.json");
  if (!c.ok()) return 0;
  absl::StatusOr<slidedp::ModelConfig> again =
      slidedp::ParseModelConfigJson(slidedp::ModelConfigToJson(*c), "fuzz/roundtrip.json");
  if (!again.ok()) __builtin_trap();
  if (again->hidden_size != c->hidden_size || again->head_dim != c->head_dim ||
      again->num_kv_heads != c->num_kv_heads || again->family != c->family ||
      again->tie_word_embeddings != c->tie_word_embeddings || again->qkv_bias != c->qkv_bias ||
      again->rope_theta != c->rope_theta || again->rope_scaling.type != c->rope_scaling.type ||
      again->bos_token_id != c->bos_token_id || again->eos_token_id != c->eos_token_id) {
    __builtin_trap();
  }
  if (slidedp::ParameterCount(*c) <= 0) __builtin_trap();
  return 0;
}
