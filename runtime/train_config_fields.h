// TrainConfig's field list: the one list of a job's fields, with their names in job
// files, JSON and the API (slidedp.v1.JobSpec names the same fields). VisitFields calls
// `v.Field(name, member, tags)` for each field and `v.Section(name, sub)` for each
// nested struct, in the order of the list. The YAML reader, the JSON writer, the "did
// you mean" suggestions (train_config.cc), the checkpoint's trajectory check
// (TrajectoryMismatch) and the server's JobSpec translation all walk it, so a new
// member needs one line here. Plain functions; no threads.
#pragma once

#include <string>
#include <vector>

#include "runtime/train_config.h"

namespace slidedp {

// What the list says about a field besides its name (a bit set).
enum FieldTag : unsigned {
  kNoTags = 0,
  // Shapes the trajectory: a checkpoint resumes only into a job equal in these.
  kTrajectory = 1u << 0,
};

template <typename V>
void VisitFields(DataConfig& d, V& v) {
  v.Field("format", d.format, kTrajectory);
  v.Field("path", d.path, kTrajectory);
  v.Field("token_dtype", d.token_dtype, kTrajectory);
  v.Field("shuffle", d.shuffle, kTrajectory);
  v.Field("tokenizer", d.tokenizer, kTrajectory);
  v.Field("cache_dir", d.cache_dir);
  v.Field("skip_bad_lines", d.skip_bad_lines, kTrajectory);
  v.Field("document_mask", d.document_mask, kTrajectory);
  v.Field("eval_path", d.eval_path);
}

template <typename V>
void VisitFields(OptimizerConfig& o, V& v) {
  v.Field("lr", o.lr, kTrajectory);
  v.Field("min_lr_ratio", o.min_lr_ratio, kTrajectory);
  v.Field("warmup_steps", o.warmup_steps, kTrajectory);
  v.Field("schedule", o.schedule, kTrajectory);
  v.Field("beta1", o.beta1, kTrajectory);
  v.Field("beta2", o.beta2, kTrajectory);
  v.Field("eps", o.eps, kTrajectory);
  v.Field("weight_decay", o.weight_decay, kTrajectory);
  v.Field("max_grad_norm", o.max_grad_norm, kTrajectory);
  v.Field("state_dtype", o.state_dtype, kTrajectory);
}

template <typename V>
void VisitFields(PolicyConfig& p, V& v) {
  v.Field("chunk_elems", p.chunk_elems);
  v.Field("prefetch_depth", p.prefetch_depth);
  v.Field("param_route", p.param_route);
  v.Field("grad_route", p.grad_route);
  v.Field("activations", p.activations);
  v.Field("loss_chunk_tokens", p.loss_chunk_tokens);
  v.Field("mlp_tile_tokens", p.mlp_tile_tokens);
  v.Field("kept_blocks", p.kept_blocks);
  v.Field("resident_units", p.resident_units);
  v.Field("staged_updates", p.staged_updates);
  v.Field("update_threads", p.update_threads);
  v.Field("grad_landing", p.grad_landing);
  v.Field("auto", p.auto_plan);
  v.Field("gpu_memory_budget_bytes", p.gpu_memory_budget_bytes);
  v.Field("replan_threshold", p.replan_threshold);
}

template <typename V>
void VisitFields(HostsConfig& h, V& v) {
  v.Field("count", h.count, kTrajectory);
  v.Field("rank", h.rank);
  v.Field("address", h.address);
  v.Field("port", h.port);
  v.Field("timeout_seconds", h.timeout_seconds);
}

// run_id is not on the list: the daemon sets it, no file or spec does.
template <typename V>
void VisitFields(TrainConfig& c, V& v) {
  v.Field("model", c.model, kTrajectory);
  v.Section("data", c.data);
  v.Field("seq_len", c.seq_len, kTrajectory);
  v.Field("micro_batch_size", c.micro_batch_size, kTrajectory);
  v.Field("grad_accum", c.grad_accum, kTrajectory);
  v.Field("workers", c.workers, kTrajectory);
  v.Field("device", c.device);
  v.Field("compute_dtype", c.compute_dtype, kTrajectory);
  v.Field("steps", c.steps, kTrajectory);
  v.Section("optimizer", c.optimizer);
  v.Field("seed", c.seed, kTrajectory);
  v.Field("checkpoint_dir", c.checkpoint_dir);
  v.Field("checkpoint_interval", c.checkpoint_interval);
  v.Field("keep_checkpoints", c.keep_checkpoints);
  v.Field("resume_from", c.resume_from);
  v.Field("max_bad_steps", c.max_bad_steps);
  v.Field("output_dir", c.output_dir);
  v.Section("policy", c.policy);
  v.Field("log_every", c.log_every);
  v.Field("trace_file", c.trace_file);
  v.Field("collective_timeout_seconds", c.collective_timeout_seconds);
  v.Field("eval_interval", c.eval_interval);
  v.Field("eval_batches", c.eval_batches);
  v.Section("hosts", c.hosts);
}

// Every field's full name ("optimizer.lr"), in the list's order; with `sections`, the
// sections' names too ("optimizer", before their fields).
std::vector<std::string> TrainConfigFieldNames(bool sections);

// The value of every field tagged `tag` as text (full name, text), in the list's order:
// numbers exactly ("%.17g" for reals), enumerations by name.
std::vector<std::pair<std::string, std::string>> TaggedFieldTexts(const TrainConfig& config, FieldTag tag);

}  // namespace slidedp
