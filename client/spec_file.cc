// Job spec files: YAML -> JSON (descriptor-guided) -> JobSpec. Stateless; any thread.
#include "client/spec_file.h"

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

struct Context {
  std::string source;  // as echoed in messages
};

absl::Status Error(const Context& ctx, const YAML::Node& node, absl::string_view path,
                   absl::string_view what) {
  const YAML::Mark mark = node.Mark();
  const std::string where = mark.line >= 0 ? absl::StrCat(":", mark.line + 1) : "";
  return absl::InvalidArgumentError(absl::StrCat(ctx.source, where, ": ", Echo(std::string_view(path.data(), path.size())), ": ", what));
}

absl::StatusOr<nlohmann::json> Convert(const Context& ctx, const YAML::Node& node,
                                       const Descriptor* message, const std::string& path);

// One scalar (or nested message) value of field `f`.
absl::StatusOr<nlohmann::json> ConvertValue(const Context& ctx, const YAML::Node& node,
                                            const FieldDescriptor* f, const std::string& path) {
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return Convert(ctx, node, f->message_type(), path);
  }
  if (!node.IsScalar()) return Error(ctx, node, path, "expected a single value");
  const std::string text = node.Scalar();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool value = false;
      if (!YAML::convert<bool>::decode(node, value)) {
        return Error(ctx, node, path, absl::StrCat("\"", Echo(text), "\" is not true or false"));
      }
      return nlohmann::json(value);
    }
    case FieldDescriptor::CPPTYPE_STRING:
    case FieldDescriptor::CPPTYPE_ENUM:
      return nlohmann::json(text);
    default:
      // Numbers go as JSON strings, which protobuf's parser accepts for every numeric
      // type and checks exactly (no rounding of 64-bit values through double).
      return nlohmann::json(text);
  }
}

absl::StatusOr<nlohmann::json> Convert(const Context& ctx, const YAML::Node& node,
                                       const Descriptor* message, const std::string& path) {
  nlohmann::json out = nlohmann::json::object();
  if (node.IsNull()) return out;
  if (!node.IsMap()) {
    return Error(ctx, node, path.empty() ? "spec" : path, "expected a mapping of field: value");
  }
  for (const auto& item : node) {
    if (!item.first.IsScalar()) return Error(ctx, item.first, path, "keys must be field names");
    const std::string key = item.first.Scalar();
    const std::string field_path = path.empty() ? key : absl::StrCat(path, ".", key);
    const FieldDescriptor* f = message->FindFieldByName(key);
    if (f == nullptr) {
      return Error(ctx, item.first, field_path, "unknown field");
    }
    if (out.contains(f->name())) return Error(ctx, item.first, field_path, "given twice");
    if (item.second.IsNull() && f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      if (!item.second.IsSequence()) return Error(ctx, item.second, field_path, "expected a list");
      nlohmann::json list = nlohmann::json::array();
      for (const YAML::Node& element : item.second) {
        absl::StatusOr<nlohmann::json> value = ConvertValue(ctx, element, f, field_path);
        if (!value.ok()) return value.status();
        list.push_back(*std::move(value));
      }
      out[f->name()] = std::move(list);
      continue;
    }
    absl::StatusOr<nlohmann::json> value = ConvertValue(ctx, item.second, f, field_path);
    if (!value.ok()) return value.status();
    out[f->name()] = *std::move(value);
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source_name) {
  const std::string source = EchoPath(std::string_view(source_name.data(), source_name.size()));
  if (text.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", text.size(),
                                                   " bytes, more than a job file's limit of ",
                                                   kMaxJobFileBytes));
  }
  // yaml-cpp recurses once per level of nesting: refuse absurd nesting before it parses.
  if (const int line = YamlNestingExceeded(std::string_view(text.data(), text.size()), kMaxYamlNesting);
      line != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": nested deeper than ",
                                                   kMaxYamlNesting, " levels (or too many brackets)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": ", Echo(e.msg)));
  }
  Context ctx{source};
  absl::StatusOr<nlohmann::json> json;
  try {
    json = Convert(ctx, root, v1::JobSpec::descriptor(), "");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": ", Echo(e.msg)));
  }
  if (!json.ok()) return json.status();
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      json->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", Echo(status.message().as_string(), 400)));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path) {
  // Never blocks (a FIFO, /dev/stdin), regular files of a job file's size only.
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxJobFileBytes);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path);
}

}  // namespace slidedp::client
