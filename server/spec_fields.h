// The JobSpec <-> TrainConfig translation, derived from TrainConfig's field list
// (runtime/train_config_fields.h): one walk of the list reads or writes, by protobuf
// reflection, the slidedp.v1.JobSpec field of the same name (sections as the nested
// messages), so a field added to the list and to job.proto needs no code here. The
// fields of the list that the API deliberately does not carry are named once, below;
// tests/server/spec_fields_test.cc holds the list and the proto to each other. Used by
// the daemon (spec_translation.cc) and the CLI (client/spec_file.cc). Stateless; any
// thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "runtime/train_config.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::server {

// A field of TrainConfig's list that JobSpec does not have, and why.
struct FieldNotInSpec {
  const char* name;  // full name, as in job files ("policy.grad_landing")
  const char* why;
};

inline constexpr FieldNotInSpec kFieldsNotInJobSpec[] = {
    {"resume_from", "the daemon resumes a job only from the job's own checkpoints (after a restart)"},
    {"trace_file", "slidedp-train and step_bench only: the daemon writes no file a spec names outside its roots"},
    {"collective_timeout_seconds", "slidedp-train only: daemon jobs use the default, 600 seconds"},
    {"policy.grad_landing", "not in the API yet: daemon jobs take the default, auto"},
};

// Whether `full_name` is one of kFieldsNotInJobSpec.
bool IsFieldNotInJobSpec(std::string_view full_name);

// The TrainConfig `spec` asks for: each field set in `spec` over the TrainConfig
// default. An enumeration's name that is not one of its values keeps the default and
// sets `*status` (when not null, and still OK) to INVALID_ARGUMENT naming the field.
TrainConfig SpecToConfig(const v1::JobSpec& spec, absl::Status* status);

// `config` as a JobSpec: every field the API has, or, with `only`, those whose full
// names are keys of `only` (JobFile::lines: the fields a file sets).
v1::JobSpec ConfigToSpec(const TrainConfig& config, const std::map<std::string, int>* only = nullptr);

}  // namespace slidedp::server
