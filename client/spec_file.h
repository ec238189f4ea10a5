// Reading a job spec file (YAML, or JSON, which is YAML) into slidedp.v1.JobSpec: the
// same fields as slidedp-train's TrainConfig file. The YAML is turned into JSON guided
// by JobSpec's descriptor (so that a string field stays a string whatever it looks
// like), then parsed by protobuf's JSON parser. Stateless; any thread.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::client {

// Unknown fields, wrong types and malformed YAML are INVALID_ARGUMENT errors naming
// `source`, the line and the field ("optimizer.lr").
absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source);

// Reads and parses the file at `path`; NOT_FOUND when it cannot be read.
absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path);

}  // namespace slidedp::client
