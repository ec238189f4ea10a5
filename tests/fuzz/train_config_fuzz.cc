// libFuzzer entry point for slidedp-train's job file parser (YAML/JSON): any text is
// parsed; a config that parses serializes with TrainConfigToJson and parses back to
// the same JSON. Built and run by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<slidedp::TrainConfig> c = slidedp::ParseTrainConfig(text, "fuzz.yaml");
  if (!c.ok()) return 0;
  const std::string json = slidedp::TrainConfigToJson(*c);
  absl::StatusOr<slidedp::TrainConfig> again = slidedp::ParseTrainConfig(json, "fuzz.json");
  if (!again.ok()) __builtin_trap();
  if (slidedp::TrainConfigToJson(*again) != json) __builtin_trap();
  (void)slidedp::ValidateTrainConfig(*c);
  return 0;
}
