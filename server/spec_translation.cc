// JobSpec <-> TrainConfig: the field-list walk (spec_fields.h), the spec's well-formedness,
// paths against the roots, validation. Stateless; any thread.
#include "server/spec_translation.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "runtime/io/user_text.h"
#include "runtime/model/model_config.h"
#include "server/spec_fields.h"

namespace slidedp::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status CheckMessage(const Message& message, const std::string& prefix) {
  const Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix.empty() ? "spec" : prefix, ": unknown field number ", unknown.field(0).number(),
        " (the client's slidedp.v1 API is newer than this daemon's)"));
  }
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = prefix.empty() ? field->name() : prefix + "." + field->name();
    if (field->is_repeated()) continue;  // JobSpec has none
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::Status s = CheckMessage(reflection->GetMessage(message, field), name);
      if (!s.ok()) return s;
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      const std::string value = reflection->GetString(message, field);
      if (value.size() > kMaxSpecStringBytes) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", value.size(),
                                                       " bytes, longer than the ",
                                                       kMaxSpecStringBytes, " allowed"));
      }
      if (value.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": contains a NUL byte"));
      }
    }
  }
  return absl::OkStatus();
}

bool LooksLikePath(const std::string& model) {
  return model.find('/') != std::string::npos || model == "." || model == "..";
}

// The model: a preset name, or a directory under the model roots (made canonical).
absl::Status CheckModel(const PathPolicy& paths, TrainConfig* config) {
  if (LooksLikePath(config->model)) {
    absl::StatusOr<std::string> dir =
        paths.Check("model", config->model, PathKind::kModel, /*must_exist=*/true);
    if (!dir.ok()) return dir.status();
    config->model = *dir;
    return absl::OkStatus();
  }
  if (!PresetConfig(config->model).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: \"", Echo(config->model), "\" is neither a preset (", absl::StrJoin(PresetNames(), ", "),
        ") nor an absolute model directory path"));
  }
  return absl::OkStatus();
}

// Replaces `*path` (spec field `field`) by its canonical form when it is set.
absl::Status CheckOptionalPath(const PathPolicy& paths, const char* field, PathKind kind,
                               bool must_exist, std::string* path) {
  if (path->empty()) return absl::OkStatus();
  absl::StatusOr<std::string> canonical = paths.Check(field, *path, kind, must_exist);
  if (!canonical.ok()) return canonical.status();
  *path = *canonical;
  return absl::OkStatus();
}

// The tokenizer belongs with the model or the data: either root will do.
absl::Status CheckTokenizer(const PathPolicy& paths, std::string* tokenizer) {
  if (tokenizer->empty()) return absl::OkStatus();
  absl::StatusOr<std::string> as_model =
      paths.Check("data.tokenizer", *tokenizer, PathKind::kModel, /*must_exist=*/true);
  if (as_model.ok() || !absl::IsPermissionDenied(as_model.status())) {
    if (as_model.ok()) *tokenizer = *as_model;
    return as_model.status();
  }
  absl::StatusOr<std::string> as_data =
      paths.Check("data.tokenizer", *tokenizer, PathKind::kData, /*must_exist=*/true);
  if (!as_data.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        as_model.status().message(), "; nor is it under the allowed roots [",
        absl::StrJoin(paths.roots(PathKind::kData), ", "), "] of --data_roots"));
  }
  *tokenizer = *as_data;
  return absl::OkStatus();
}

absl::Status CheckDataPaths(const PathPolicy& paths, DataConfig* data) {
  if (data->format == DataFormat::kSynthetic) return absl::OkStatus();  // ValidateTrainConfig says why
  absl::StatusOr<std::string> path =
      paths.Check("data.path", data->path, PathKind::kData, /*must_exist=*/true);
  if (!path.ok()) return path.status();
  data->path = *path;
  if (absl::Status s = CheckOptionalPath(paths, "data.eval_path", PathKind::kData,
                                         /*must_exist=*/true, &data->eval_path);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTokenizer(paths, &data->tokenizer); !s.ok()) return s;
  return CheckOptionalPath(paths, "data.cache_dir", PathKind::kOutput, /*must_exist=*/false,
                           &data->cache_dir);
}

// The API carries paths as UTF-8 text (proto3 strings): a path that is not, such as a
// symlink resolving to non-UTF-8 bytes, cannot be shown in the job and is refused.
absl::Status CheckPathsAreText(const TrainConfig& c) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"model", &c.model},
      {"data.path", &c.data.path},
      {"data.eval_path", &c.data.eval_path},
      {"data.tokenizer", &c.data.tokenizer},
      {"data.cache_dir", &c.data.cache_dir},
      {"checkpoint_dir", &c.checkpoint_dir},
      {"output_dir", &c.output_dir}};
  for (const auto& [field, path] : fields) {
    if (!IsValidUtf8(*path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": resolves to \"", Echo(*path), "\", which is not valid UTF-8 text"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPaths(const PathPolicy& paths, TrainConfig* config) {
  if (absl::Status s = CheckModel(paths, config); !s.ok()) return s;
  if (absl::Status s = CheckDataPaths(paths, &config->data); !s.ok()) return s;
  if (absl::Status s = CheckOptionalPath(paths, "checkpoint_dir", PathKind::kOutput,
                                         /*must_exist=*/false, &config->checkpoint_dir);
      !s.ok()) {
    return s;
  }
  return CheckOptionalPath(paths, "output_dir", PathKind::kOutput, /*must_exist=*/false,
                           &config->output_dir);
}

}  // namespace

absl::Status CheckSpecWellFormed(const v1::JobSpec& spec) { return CheckMessage(spec, ""); }

std::string JobCheckpointDir(const std::string& checkpoint_dir, const std::string& job_id) {
  return (std::filesystem::path(checkpoint_dir) / job_id).string();
}

void BindConfigToJob(const std::string& job_id, TrainConfig* config) {
  config->run_id = job_id;
  if (!config->checkpoint_dir.empty()) config->checkpoint_dir = JobCheckpointDir(config->checkpoint_dir, job_id);
}

TrainConfig JobSpecToTrainConfigUnchecked(const v1::JobSpec& spec) { return SpecToConfig(spec, nullptr); }

namespace {

// The translation and the path checks, then (with `validate`) ValidateTrainConfig.
absl::StatusOr<TrainConfig> Translate(const v1::JobSpec& spec, const PathPolicy& paths, const PeerPolicy& peers,
                                      bool validate) {
  if (absl::Status s = CheckSpecWellFormed(spec); !s.ok()) return s;
  absl::Status named = absl::OkStatus();  // an enumeration's unknown name
  TrainConfig config = SpecToConfig(spec, &named);
  if (!named.ok()) return named;
  // Paths first: a path outside the roots is refused before anything (the engine's
  // validation included) looks at what lies there.
  if (absl::Status s = CheckPaths(paths, &config); !s.ok()) return s;
  if (absl::Status s = CheckPathsAreText(config); !s.ok()) return s;
  // Likewise the rendezvous: no connection is opened to a host the daemon does not allow.
  if (absl::Status s = peers.Check(config.hosts); !s.ok()) return s;
  if (!validate) return config;
  if (absl::Status s = ValidateTrainConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return config;
}

}  // namespace

absl::StatusOr<TrainConfig> JobSpecToTrainConfig(const v1::JobSpec& spec, const PathPolicy& paths,
                                                 const PeerPolicy& peers) {
  return Translate(spec, paths, peers, /*validate=*/true);
}

absl::StatusOr<TrainConfig> StoredSpecToTrainConfig(const v1::JobSpec& spec, const PathPolicy& paths,
                                                    const PeerPolicy& peers) {
  return Translate(spec, paths, peers, /*validate=*/false);
}

v1::JobSpec TrainConfigToJobSpec(const TrainConfig& config) { return ConfigToSpec(config); }

v1::JobSpec SpecAsSubmitted(const v1::JobSpec& spec) {
  v1::JobSpec shown = ConfigToSpec(TrainConfig());
  shown.MergeFrom(spec);  // proto3 optional: the fields set in `spec` win
  return shown;
}

}  // namespace slidedp::server
