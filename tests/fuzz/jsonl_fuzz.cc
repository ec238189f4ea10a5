// libFuzzer entry point for the JSON-lines token reader: any text is parsed; what
// parses holds only token ids in [0, vocab) and counts its documents.
// Built and run by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "runtime/data/jsonl_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kVocab = 1000;
  absl::StatusOr<slidedp::JsonlTokens> r = slidedp::ParseJsonlTokens(text, "fuzz.jsonl", kVocab);
  if (!r.ok()) {
    if (r.status().message().find("fuzz.jsonl") == std::string::npos) __builtin_trap();  // names the file
    return 0;
  }
  for (int32_t t : r->tokens) {
    if (t < 0 || t >= kVocab) __builtin_trap();
  }
  if (r->documents < 0 || (r->documents == 0 && !r->tokens.empty())) __builtin_trap();
  return 0;
}
