// libFuzzer entry point for the CLI's job spec file reader (the job-file parser, then
// JobSpec by the field list): any text is parsed; errors name the source; a spec that parses
// survives a binary round trip. Built and run by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "client/spec_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<slidedp::v1::JobSpec> spec = slidedp::client::ParseJobSpec(text, "fuzz.yaml");
  if (!spec.ok()) {
    if (spec.status().message().find("fuzz.yaml") == std::string::npos) __builtin_trap();
    return 0;
  }
  slidedp::v1::JobSpec back;
  if (!back.ParseFromString(spec->SerializeAsString())) __builtin_trap();
  if (back.SerializeAsString() != spec->SerializeAsString()) __builtin_trap();
  return 0;
}
