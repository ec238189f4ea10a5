// Reading a job spec file (YAML, or JSON, which is YAML) into slidedp.v1.JobSpec: the
// same file, read by the same parser, as slidedp-train's (runtime/train_config.h); the
// spec holds the fields the file sets. Stateless; any thread.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::client {

// Unknown fields, wrong types, values out of range, fields that daemon jobs do not take
// (server/spec_fields.h) and malformed YAML are INVALID_ARGUMENT errors naming
// `source`, the line ("job.yaml:3") and the field ("optimizer.lr").
absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source);

// Reads and parses the file at `path`; NOT_FOUND when it cannot be read.
absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path);

}  // namespace slidedp::client
