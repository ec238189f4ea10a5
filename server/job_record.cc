// Job records: reading (with repair of non-UTF-8 text) and the UTF-8 pass before
// writing. Pure functions; any thread.
#include "server/job_record.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "runtime/io/user_text.h"

namespace slidedp::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Escapes the non-UTF-8 bytes of every string field in the wire-format `fields` of a
// `type` message, descending into message fields (the schema bounds the depth: job.proto
// has no recursive messages). Fields the schema does not know are left as they are.
// False if a nested message does not parse as wire format.
bool RepairText(const Descriptor* type, UnknownFieldSet* fields, int depth, bool* changed) {
  if (depth > 16) return false;
  for (int i = 0; i < fields->field_count(); ++i) {
    UnknownField* field = fields->mutable_field(i);
    if (field->type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const FieldDescriptor* fd = type->FindFieldByNumber(field->number());
    if (fd == nullptr) continue;
    std::string* bytes = field->mutable_length_delimited();
    if (fd->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(*bytes)) {
        *bytes = ValidUtf8(*bytes);
        *changed = true;
      }
    } else if (fd->type() == FieldDescriptor::TYPE_MESSAGE) {
      UnknownFieldSet nested;
      if (!nested.ParseFromString(*bytes)) return false;
      bool nested_changed = false;
      if (!RepairText(fd->message_type(), &nested, depth + 1, &nested_changed)) return false;
      if (nested_changed) {
        bytes->clear();
        if (!nested.SerializeToString(bytes)) return false;
        *changed = true;
      }
    }
  }
  return true;
}

std::string StateLabel(int64_t state) {
  if (state >= 0 && state <= INT32_MAX && v1::JobState_IsValid(static_cast<int>(state))) {
    return v1::JobState_Name(static_cast<v1::JobState>(state));
  }
  return absl::StrCat(state, " (not a job state)");
}

JobRecord Unreadable(std::string_view id, int64_t state, std::string_view store,
                     const std::string& why) {
  JobRecord r;
  r.unreadable = true;
  r.problem = why;
  r.job.set_id(ValidUtf8(id));
  r.job.set_state(v1::JOB_STATE_FAILED);
  r.job.set_error(ValidUtf8(absl::StrCat(
      "the daemon could not read this job's record in ", std::string(store), " (stored state ",
      StateLabel(state), "): ", why, "; it is shown as FAILED and never resumed")));
  return r;
}

}  // namespace

bool MakeTextValidUtf8(Message* message) {
  const Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  bool changed = false;
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        field->type() == FieldDescriptor::TYPE_STRING) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          const std::string value = reflection->GetRepeatedString(*message, field, i);
          if (!IsValidUtf8(value)) {
            reflection->SetRepeatedString(message, field, i, ValidUtf8(value));
            changed = true;
          }
        }
      } else {
        const std::string value = reflection->GetString(*message, field);
        if (!IsValidUtf8(value)) {
          reflection->SetString(message, field, ValidUtf8(value));
          changed = true;
        }
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          changed |= MakeTextValidUtf8(reflection->MutableRepeatedMessage(message, field, i));
        }
      } else {
        changed |= MakeTextValidUtf8(reflection->MutableMessage(message, field));
      }
    }
  }
  return changed;
}

JobRecord ParseJobRecord(std::string_view bytes, std::string_view id, int64_t state,
                         std::string_view store) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return Unreadable(id, state, store, absl::StrCat(bytes.size(), " bytes is too long"));
  }
  JobRecord r;
  if (!r.job.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    // A daemon before issue 18 could store text that is not UTF-8 (an error message
    // quoting a data file), which proto3 refuses to parse: escape it and try again.
    UnknownFieldSet fields;
    bool changed = false;
    std::string repaired;
    if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
        !RepairText(v1::Job::descriptor(), &fields, 0, &changed) || !changed ||
        !fields.SerializeToString(&repaired) || !r.job.ParseFromString(repaired)) {
      return Unreadable(id, state, store, "it does not parse as a slidedp.v1.Job");
    }
    r.problem = "its text was not valid UTF-8 (escaped as \\xNN)";
  }
  if (!v1::JobState_IsValid(r.job.state()) || r.job.state() == v1::JOB_STATE_UNSPECIFIED) {
    return Unreadable(id, state, store,
                      absl::StrCat("its state ", static_cast<int>(r.job.state()),
                                   " is not a job state"));
  }
  if (r.job.id() != id) {
    const std::string recorded = r.job.id();
    r.job.set_id(ValidUtf8(id));
    r.problem = absl::StrCat(r.problem.empty() ? "" : r.problem + "; ", "it names the job \"",
                             ValidUtf8(recorded), "\" (the row's id is kept)");
  }
  return r;
}

}  // namespace slidedp::server
