// JobSpec <-> TrainConfig. Stateless; any thread.
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
#include "runtime/io/user_text.h"

namespace slidedp::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Copies an optional proto scalar over the default when it is set.
template <typename T, typename P>
void Take(bool has, const P& value, T* out) {
  if (has) *out = static_cast<T>(value);
}

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

void ApplyData(const v1::DataSpec& d, DataConfig* c) {
  Take(d.has_format(), d.format(), &c->format);
  Take(d.has_path(), d.path(), &c->path);
  Take(d.has_token_dtype(), d.token_dtype(), &c->token_dtype);
  Take(d.has_shuffle(), d.shuffle(), &c->shuffle);
  Take(d.has_tokenizer(), d.tokenizer(), &c->tokenizer);
  Take(d.has_cache_dir(), d.cache_dir(), &c->cache_dir);
  Take(d.has_skip_bad_lines(), d.skip_bad_lines(), &c->skip_bad_lines);
  Take(d.has_document_mask(), d.document_mask(), &c->document_mask);
  Take(d.has_eval_path(), d.eval_path(), &c->eval_path);
}

void ApplyOptimizer(const v1::OptimizerSpec& o, OptimizerConfig* c) {
  Take(o.has_lr(), o.lr(), &c->lr);
  Take(o.has_min_lr_ratio(), o.min_lr_ratio(), &c->min_lr_ratio);
  Take(o.has_warmup_steps(), o.warmup_steps(), &c->warmup_steps);
  Take(o.has_schedule(), o.schedule(), &c->schedule);
  Take(o.has_beta1(), o.beta1(), &c->beta1);
  Take(o.has_beta2(), o.beta2(), &c->beta2);
  Take(o.has_eps(), o.eps(), &c->eps);
  Take(o.has_weight_decay(), o.weight_decay(), &c->weight_decay);
  Take(o.has_max_grad_norm(), o.max_grad_norm(), &c->max_grad_norm);
  Take(o.has_state_dtype(), o.state_dtype(), &c->state_dtype);
}

void ApplyPolicy(const v1::PolicySpec& p, PolicyConfig* c) {
  Take(p.has_chunk_elems(), p.chunk_elems(), &c->chunk_elems);
  Take(p.has_prefetch_depth(), p.prefetch_depth(), &c->prefetch_depth);
  Take(p.has_param_route(), p.param_route(), &c->param_route);
  Take(p.has_grad_route(), p.grad_route(), &c->grad_route);
  Take(p.has_activations(), p.activations(), &c->activations);
  Take(p.has_loss_chunk_tokens(), p.loss_chunk_tokens(), &c->loss_chunk_tokens);
  Take(p.has_update_threads(), p.update_threads(), &c->update_threads);
  Take(p.has_mlp_tile_tokens(), p.mlp_tile_tokens(), &c->mlp_tile_tokens);
  Take(p.has_auto_(), p.auto_(), &c->auto_plan);
  Take(p.has_gpu_memory_budget_bytes(), p.gpu_memory_budget_bytes(), &c->gpu_memory_budget_bytes);
  Take(p.has_replan_threshold(), p.replan_threshold(), &c->replan_threshold);
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
  if (data->format == "synthetic") return absl::OkStatus();  // ValidateTrainConfig says why
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

TrainConfig JobSpecToTrainConfigUnchecked(const v1::JobSpec& s) {
  TrainConfig c;
  Take(s.has_model(), s.model(), &c.model);
  ApplyData(s.data(), &c.data);
  Take(s.has_seq_len(), s.seq_len(), &c.seq_len);
  Take(s.has_micro_batch_size(), s.micro_batch_size(), &c.micro_batch_size);
  Take(s.has_grad_accum(), s.grad_accum(), &c.grad_accum);
  Take(s.has_workers(), s.workers(), &c.workers);
  Take(s.has_device(), s.device(), &c.device);
  Take(s.has_compute_dtype(), s.compute_dtype(), &c.compute_dtype);
  Take(s.has_steps(), s.steps(), &c.steps);
  ApplyOptimizer(s.optimizer(), &c.optimizer);
  Take(s.has_seed(), s.seed(), &c.seed);
  Take(s.has_checkpoint_dir(), s.checkpoint_dir(), &c.checkpoint_dir);
  Take(s.has_checkpoint_interval(), s.checkpoint_interval(), &c.checkpoint_interval);
  Take(s.has_keep_checkpoints(), s.keep_checkpoints(), &c.keep_checkpoints);
  Take(s.has_output_dir(), s.output_dir(), &c.output_dir);
  ApplyPolicy(s.policy(), &c.policy);
  Take(s.has_log_every(), s.log_every(), &c.log_every);
  Take(s.has_max_bad_steps(), s.max_bad_steps(), &c.max_bad_steps);
  Take(s.has_eval_interval(), s.eval_interval(), &c.eval_interval);
  Take(s.has_eval_batches(), s.eval_batches(), &c.eval_batches);
  return c;
}

absl::StatusOr<TrainConfig> JobSpecToTrainConfig(const v1::JobSpec& spec,
                                                 const PathPolicy& paths) {
  if (absl::Status s = CheckSpecWellFormed(spec); !s.ok()) return s;
  TrainConfig config = JobSpecToTrainConfigUnchecked(spec);
  // Paths first: a path outside the roots is refused before anything (the engine's
  // validation included) looks at what lies there.
  if (absl::Status s = CheckPaths(paths, &config); !s.ok()) return s;
  if (absl::Status s = CheckPathsAreText(config); !s.ok()) return s;
  if (absl::Status s = ValidateTrainConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return config;
}

v1::JobSpec TrainConfigToJobSpec(const TrainConfig& c) {
  v1::JobSpec s;
  s.set_model(c.model);
  v1::DataSpec* d = s.mutable_data();
  d->set_format(c.data.format);
  d->set_path(c.data.path);
  d->set_token_dtype(c.data.token_dtype);
  d->set_shuffle(c.data.shuffle);
  d->set_tokenizer(c.data.tokenizer);
  d->set_cache_dir(c.data.cache_dir);
  d->set_skip_bad_lines(c.data.skip_bad_lines);
  d->set_document_mask(c.data.document_mask);
  d->set_eval_path(c.data.eval_path);
  s.set_seq_len(c.seq_len);
  s.set_micro_batch_size(c.micro_batch_size);
  s.set_grad_accum(c.grad_accum);
  s.set_workers(c.workers);
  s.set_device(c.device);
  s.set_compute_dtype(c.compute_dtype);
  s.set_steps(c.steps);
  v1::OptimizerSpec* o = s.mutable_optimizer();
  o->set_lr(c.optimizer.lr);
  o->set_min_lr_ratio(c.optimizer.min_lr_ratio);
  o->set_warmup_steps(c.optimizer.warmup_steps);
  o->set_schedule(c.optimizer.schedule);
  o->set_beta1(c.optimizer.beta1);
  o->set_beta2(c.optimizer.beta2);
  o->set_eps(c.optimizer.eps);
  o->set_weight_decay(c.optimizer.weight_decay);
  o->set_max_grad_norm(c.optimizer.max_grad_norm);
  o->set_state_dtype(c.optimizer.state_dtype);
  s.set_seed(c.seed);
  s.set_checkpoint_dir(c.checkpoint_dir);
  s.set_checkpoint_interval(c.checkpoint_interval);
  s.set_keep_checkpoints(c.keep_checkpoints);
  s.set_output_dir(c.output_dir);
  v1::PolicySpec* p = s.mutable_policy();
  p->set_chunk_elems(c.policy.chunk_elems);
  p->set_prefetch_depth(c.policy.prefetch_depth);
  p->set_param_route(c.policy.param_route);
  p->set_grad_route(c.policy.grad_route);
  p->set_activations(c.policy.activations);
  p->set_loss_chunk_tokens(c.policy.loss_chunk_tokens);
  p->set_update_threads(c.policy.update_threads);
  p->set_mlp_tile_tokens(c.policy.mlp_tile_tokens);
  p->set_auto_(c.policy.auto_plan);
  p->set_gpu_memory_budget_bytes(c.policy.gpu_memory_budget_bytes);
  p->set_replan_threshold(c.policy.replan_threshold);
  s.set_log_every(c.log_every);
  s.set_max_bad_steps(c.max_bad_steps);
  s.set_eval_interval(c.eval_interval);
  s.set_eval_batches(c.eval_batches);
  return s;
}

}  // namespace slidedp::server
