// The field-list walk between JobSpec and TrainConfig; see spec_fields.h. Stateless;
// any thread.
#include "server/spec_fields.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "runtime/io/user_text.h"
#include "runtime/train_config_fields.h"

namespace slidedp::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Reads the fields of one message into a struct of the list.
class FromSpec {
 public:
  FromSpec(const Message& message, std::string prefix, absl::Status* status)
      : m_(message), r_(*message.GetReflection()), prefix_(std::move(prefix)), status_(status) {}

  template <typename T>
  void Field(const char* name, T& out, unsigned = kNoTags) {
    const FieldDescriptor* f = m_.GetDescriptor()->FindFieldByName(name);
    if (f == nullptr || !r_.HasField(m_, f)) return;  // not in the API, or unset: the default
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        if constexpr (std::is_same_v<T, std::string>) {
          out = r_.GetString(m_, f);
        } else if constexpr (std::is_enum_v<T>) {
          const std::string value = r_.GetString(m_, f);
          if (std::optional<T> e = EnumFromName<T>(value)) {
            out = *e;
          } else {
            Fail(absl::StrCat("field '", prefix_, name, "' must be one of ", EnumNameList<T>(), "; got '",
                              Echo(value), "'"));
          }
        } else {
          Mismatch(name);
        }
        return;
      case FieldDescriptor::CPPTYPE_BOOL: return Number(name, r_.GetBool(m_, f), out);
      case FieldDescriptor::CPPTYPE_INT32: return Number(name, r_.GetInt32(m_, f), out);
      case FieldDescriptor::CPPTYPE_INT64: return Number(name, r_.GetInt64(m_, f), out);
      case FieldDescriptor::CPPTYPE_UINT64: return Number(name, r_.GetUInt64(m_, f), out);
      case FieldDescriptor::CPPTYPE_DOUBLE: return Number(name, r_.GetDouble(m_, f), out);
      default: return Mismatch(name);
    }
  }

  template <typename T>
  void Section(const char* name, T& sub) {
    const FieldDescriptor* f = m_.GetDescriptor()->FindFieldByName(name);
    if (f == nullptr || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return Mismatch(name);
    FromSpec inner(r_.GetMessage(m_, f), prefix_ + name + ".", status_);
    VisitFields(sub, inner);
  }

 private:
  template <typename P, typename T>
  void Number(const char* name, P value, T& out) {
    if constexpr (std::is_arithmetic_v<T>) {
      out = static_cast<T>(value);
    } else {
      Mismatch(name);
    }
  }
  // The list and job.proto disagree on a type: a bug that spec_fields_test catches.
  void Mismatch(const char* name) {
    Fail(absl::StrCat("field '", prefix_, name, "': JobSpec and TrainConfig disagree on its type"));
  }
  void Fail(std::string message) {
    if (status_ != nullptr && status_->ok()) *status_ = absl::InvalidArgumentError(std::move(message));
  }

  const Message& m_;
  const Reflection& r_;
  std::string prefix_;
  absl::Status* status_;
};

// Writes the fields of a struct of the list into one message.
class ToSpec {
 public:
  ToSpec(Message* message, std::string prefix, const std::map<std::string, int>* only)
      : m_(*message), r_(*message->GetReflection()), prefix_(std::move(prefix)), only_(only) {}

  template <typename T>
  void Field(const char* name, T& value, unsigned = kNoTags) {
    const FieldDescriptor* f = m_.GetDescriptor()->FindFieldByName(name);
    if (f == nullptr || !Wanted(name)) return;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        if constexpr (std::is_same_v<T, std::string>) r_.SetString(&m_, f, value);
        if constexpr (std::is_enum_v<T>) r_.SetString(&m_, f, std::string(NameOf(value)));
        return;
      default:
        if constexpr (std::is_arithmetic_v<T>) SetNumber(f, value);
        return;
    }
  }

  template <typename T>
  void Section(const char* name, T& sub) {
    const FieldDescriptor* f = m_.GetDescriptor()->FindFieldByName(name);
    if (f == nullptr || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || !Wanted(name)) return;
    ToSpec inner(r_.MutableMessage(&m_, f), prefix_ + name + ".", only_);
    VisitFields(sub, inner);
  }

 private:
  bool Wanted(const char* name) const { return only_ == nullptr || only_->count(prefix_ + name) > 0; }

  template <typename T>
  void SetNumber(const FieldDescriptor* f, T value) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL: return r_.SetBool(&m_, f, static_cast<bool>(value));
      case FieldDescriptor::CPPTYPE_INT32: return r_.SetInt32(&m_, f, static_cast<int32_t>(value));
      case FieldDescriptor::CPPTYPE_INT64: return r_.SetInt64(&m_, f, static_cast<int64_t>(value));
      case FieldDescriptor::CPPTYPE_UINT64: return r_.SetUInt64(&m_, f, static_cast<uint64_t>(value));
      case FieldDescriptor::CPPTYPE_DOUBLE: return r_.SetDouble(&m_, f, static_cast<double>(value));
      default: return;  // a type mismatch: spec_fields_test names it
    }
  }

  Message& m_;
  const Reflection& r_;
  std::string prefix_;
  const std::map<std::string, int>* only_;
};

}  // namespace

bool IsFieldNotInJobSpec(std::string_view full_name) {
  for (const FieldNotInSpec& f : kFieldsNotInJobSpec) {
    if (full_name == f.name) return true;
  }
  return false;
}

TrainConfig SpecToConfig(const v1::JobSpec& spec, absl::Status* status) {
  TrainConfig config;
  FromSpec reader(spec, "", status);
  VisitFields(config, reader);
  return config;
}

v1::JobSpec ConfigToSpec(const TrainConfig& config, const std::map<std::string, int>* only) {
  TrainConfig copy = config;  // the visitors take mutable references
  v1::JobSpec spec;
  ToSpec writer(&spec, "", only);
  VisitFields(copy, writer);
  return spec;
}

}  // namespace slidedp::server
