// TrainConfig validation: ranges, enumerations, and the fields that only some data
// formats use; see train_config.h. ParseTrainConfig (train_config.cc) runs the same
// checks through FindProblem (train_config_validate.h) and names the file and line.
// Plain functions; no threads.
#include "runtime/train_config_validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/io/user_text.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace {

using train_config_internal::Problem;

// Counts of steps (steps, intervals, log_every, warmup): 2^40 is far beyond any job and
// keeps step arithmetic (tokens seen, schedules) far from int64 overflow.
constexpr int64_t kMaxSteps = int64_t{1} << 40;
// Tokens in one step, and in one evaluation (eval_batches x tokens a step): a pass
// over more would run for years.
constexpr double kMaxPassTokens = 1099511627776.0;  // 2^40
// Sizes in tokens or elements of one chunk or tile; 2^40 keeps products with the
// hidden size in range.
constexpr int64_t kMaxChunk = int64_t{1} << 40;
using Check = std::optional<Problem>;

template <typename T>
Check InRange(const char* field, T value, T lo, T hi) {
  if (value >= lo && value <= hi) return std::nullopt;
  return Problem{field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value)};
}

template <typename T>
Check AtLeast(const char* field, T value, T lo) {
  if (value >= lo) return std::nullopt;
  return Problem{field, absl::StrCat("must be >= ", lo, ", got ", value)};
}

// AtLeast, and at most `hi` (a limit that only absurd values reach, named as such).
Check Bounded(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (Check c = AtLeast(field, value, lo)) return c;
  if (value <= hi) return std::nullopt;
  return Problem{field, absl::StrCat("must be <= ", hi, " (the limit), got ", value)};
}

// An enumeration holds a value of its table (only a cast makes another).
template <typename E>
Check Known(const char* field, E value) {
  if (*NameOf(value) != '\0') return std::nullopt;
  return Problem{field, absl::StrCat("must be one of ", EnumNameList<E>(), "; got '",
                                     static_cast<int>(value), "'")};
}

// `ok` is written so that NaN fails it.
Check Real(const char* field, double value, bool ok, const char* rule) {
  if (ok && !std::isnan(value)) return std::nullopt;
  return Problem{field, absl::StrCat("must be ", rule, ", got ", value)};
}

// A field that only `formats` use must be empty (or false) with any other format.
Check OnlyFor(const char* field, bool set, DataFormat format, bool applies, const char* formats) {
  if (!set || applies) return std::nullopt;
  return Problem{field, absl::StrCat("is only used with data.format ", formats,
                                     "; leave it unset for '", NameOf(format), "'")};
}

Check CheckData(const DataConfig& d) {
  if (Check c = Known("data.format", d.format)) return c;
  const bool synthetic = d.format == DataFormat::kSynthetic;
  if (synthetic && !d.path.empty()) {
    return Problem{"data.path",
                   "must be empty when data.format is 'synthetic', got '" + d.path + "'"};
  }
  if (!synthetic && d.path.empty()) {
    return Problem{"data.path", absl::StrCat("must be set when data.format is '", NameOf(d.format), "'")};
  }
  const bool text = IsTextData(d.format);
  const char* text_formats = "text, prompt_completion or chat";
  if (Check c = OnlyFor("data.tokenizer", !d.tokenizer.empty(), d.format, text, text_formats))
    return c;
  if (Check c = OnlyFor("data.cache_dir", !d.cache_dir.empty(), d.format, text, text_formats))
    return c;
  if (Check c = OnlyFor("data.skip_bad_lines", d.skip_bad_lines, d.format, text, text_formats))
    return c;
  if (Check c = OnlyFor("data.document_mask", d.document_mask, d.format,
                        text || d.format == DataFormat::kJsonl, "jsonl, text, prompt_completion or chat")) {
    return c;
  }
  if (Check c = OnlyFor("data.eval_path", !d.eval_path.empty(), d.format, !synthetic,
                        "tokens, jsonl, text, prompt_completion or chat")) {
    return c;
  }
  return Known("data.token_dtype", d.token_dtype);
}

Check CheckOptimizer(const OptimizerConfig& o) {
  const bool lr_ok = o.lr > 0 && std::isfinite(o.lr);
  if (Check c = Real("optimizer.lr", o.lr, lr_ok, "> 0 and finite")) return c;
  const bool ratio_ok = o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1;
  if (Check c = Real("optimizer.min_lr_ratio", o.min_lr_ratio, ratio_ok, "in [0, 1]")) return c;
  if (Check c = Bounded("optimizer.warmup_steps", o.warmup_steps, 0, kMaxSteps)) return c;
  if (Check c = Known("optimizer.schedule", o.schedule)) return c;
  if (Check c = Real("optimizer.beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)"))
    return c;
  if (Check c = Real("optimizer.beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)"))
    return c;
  const bool eps_ok = o.eps > 0 && std::isfinite(o.eps);
  if (Check c = Real("optimizer.eps", o.eps, eps_ok, "> 0 and finite")) return c;
  const bool wd_ok = o.weight_decay >= 0 && std::isfinite(o.weight_decay);
  if (Check c = Real("optimizer.weight_decay", o.weight_decay, wd_ok, ">= 0 and finite")) return c;
  const bool clip_ok = o.max_grad_norm >= 0 && std::isfinite(o.max_grad_norm);
  return Real("optimizer.max_grad_norm", o.max_grad_norm, clip_ok,
              ">= 0 and finite (0: no clipping)");
}

Check CheckPolicy(const PolicyConfig& p) {
  if (Check c = Bounded("policy.chunk_elems", p.chunk_elems, 0, kMaxChunk)) return c;
  if (Check c = InRange("policy.prefetch_depth", p.prefetch_depth, 1, 8)) return c;
  if (Check c = Known("policy.param_route", p.param_route)) return c;
  if (Check c = Known("policy.grad_route", p.grad_route)) return c;
  if (Check c = Known("policy.activations", p.activations)) return c;
  if (Check c = Bounded("policy.loss_chunk_tokens", p.loss_chunk_tokens, 1, kMaxChunk)) return c;
  if (Check c = Bounded("policy.mlp_tile_tokens", p.mlp_tile_tokens, 0, kMaxChunk)) return c;
  if (Check c = InRange<int64_t>("policy.kept_blocks", p.kept_blocks, -1, int64_t{1} << 20)) return c;
  if (Check c = InRange<int64_t>("policy.resident_units", p.resident_units, -1, int64_t{1} << 20)) return c;
  if (Check c = InRange<int64_t>("policy.staged_updates", p.staged_updates, 0, int64_t{1} << 20)) return c;
  if (Check c = Known("policy.grad_landing", p.grad_landing)) return c;
  if (Check c = Bounded("policy.gpu_memory_budget_bytes", p.gpu_memory_budget_bytes, 0, int64_t{1} << 56)) return c;
  const bool drift_ok = p.replan_threshold > 0 && std::isfinite(p.replan_threshold);
  if (Check c = Real("policy.replan_threshold", p.replan_threshold, drift_ok, "> 0 and finite")) return c;
  return InRange("policy.update_threads", p.update_threads, 0, 1024);
}

Check CheckShape(const TrainConfig& c) {
  if (c.model.empty()) return Problem{"model", "must name a preset or a model directory"};
  if (Check p = InRange<int64_t>("seq_len", c.seq_len, 1, int64_t{1} << 20)) return p;
  if (Check p = AtLeast<int64_t>("micro_batch_size", c.micro_batch_size, 1)) return p;
  if (Check p = AtLeast<int64_t>("grad_accum", c.grad_accum, 1)) return p;
  if (Check p = InRange("workers", c.workers, 1, 64)) return p;
  // Keeps tokens_per_step() far from int64 overflow.
  const double tokens = static_cast<double>(c.micro_batch_size) *
                        static_cast<double>(c.grad_accum) * c.workers *
                        static_cast<double>(c.seq_len);
  if (tokens > kMaxPassTokens) {
    return Problem{"micro_batch_size",
                   absl::StrCat("makes micro_batch_size * grad_accum * workers * seq_len = ",
                                tokens, " tokens a step, more than 2^40")};
  }
  if (Check p = Known("device", c.device)) return p;
  return Known("compute_dtype", c.compute_dtype);
}

Check CheckHosts(const TrainConfig& c) {
  const HostsConfig& h = c.hosts;
  if (Check p = InRange("hosts.count", h.count, 1, 1024)) return p;
  if (Check p = InRange("hosts.rank", h.rank, 0, h.count - 1)) return p;
  if (Check p = InRange("hosts.port", h.port, 1, 65535)) return p;
  // At most a day: the exchanges' deadlines are milliseconds in an int64.
  const bool timeout_ok = h.timeout_seconds > 0 && h.timeout_seconds <= 86400;
  if (Check p = Real("hosts.timeout_seconds", h.timeout_seconds, timeout_ok, "> 0 and at most 86400")) return p;
  if (h.count == 1) return std::nullopt;
  if (h.address.empty()) return Problem{"hosts.address", "must name host 0 (its address) when hosts.count > 1"};
  return std::nullopt;
}

Check CheckRun(const TrainConfig& c) {
  if (Check p = Bounded("steps", c.steps, 1, kMaxSteps)) return p;
  if (Check p = Bounded("checkpoint_interval", c.checkpoint_interval, 0, kMaxSteps)) return p;
  if (c.checkpoint_interval > 0 && c.checkpoint_dir.empty()) {
    return Problem{"checkpoint_dir", "must be set when checkpoint_interval > 0"};
  }
  if (Check p = AtLeast("keep_checkpoints", c.keep_checkpoints, 1)) return p;
  if (Check p = AtLeast("max_bad_steps", c.max_bad_steps, 1)) return p;
  if (Check p = Real("collective_timeout_seconds", c.collective_timeout_seconds,
                     c.collective_timeout_seconds > 0 && std::isfinite(c.collective_timeout_seconds), "> 0")) {
    return p;
  }
  if (Check p = Bounded("eval_interval", c.eval_interval, 0, kMaxSteps)) return p;
  if (c.eval_interval > 0 && c.data.eval_path.empty()) {
    return Problem{"eval_interval", "needs data.eval_path (the evaluation data)"};
  }
  if (Check p = AtLeast<int64_t>("eval_batches", c.eval_batches, 1)) return p;
  // Bounded as a step's tokens are (CheckShape has bounded tokens_per_step already).
  const double eval_tokens = static_cast<double>(c.eval_batches) * static_cast<double>(c.tokens_per_step());
  if (eval_tokens > kMaxPassTokens) {
    return Problem{"eval_batches", absl::StrCat("makes eval_batches * micro_batch_size * grad_accum * workers * "
                                                "seq_len = ", eval_tokens, " tokens an evaluation, more than 2^40")};
  }
  return Bounded("log_every", c.log_every, 1, kMaxSteps);
}

}  // namespace

namespace train_config_internal {

absl::Status FieldError(const std::string& field, const std::string& where,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "'", where, " ", what));
}

Check FindProblem(const TrainConfig& c) {
  if (Check p = CheckShape(c)) return p;
  if (Check p = CheckData(c.data)) return p;
  if (Check p = CheckOptimizer(c.optimizer)) return p;
  if (Check p = CheckPolicy(c.policy)) return p;
  if (c.optimizer.state_dtype == MomentDtype::kInt8 && c.policy.chunk_elems % kInt8MomentBlock != 0) {
    return Problem{"policy.chunk_elems", absl::StrCat("must be a multiple of ", kInt8MomentBlock,
                                                      " with optimizer.state_dtype int8 (its quantization "
                                                      "blocks), got ", c.policy.chunk_elems)};
  }
  if (c.policy.resident_units > 0 && c.optimizer.state_dtype != MomentDtype::kFp32 && c.hosts.count > 1) {
    return Problem{"policy.resident_units",
                   absl::StrCat("must be 0 or -1 (auto) with optimizer.state_dtype ", NameOf(c.optimizer.state_dtype),
                                " over several hosts: units resident over hosts keep fp32 moments, got ",
                                c.policy.resident_units)};
  }
  if (c.policy.staged_updates > 0 && c.hosts.count > 1) {
    return Problem{"policy.staged_updates",
                   absl::StrCat("must be 0 over several hosts (each host holds a shard of a unit's master), got ",
                                c.policy.staged_updates)};
  }
  if (Check p = CheckHosts(c)) return p;
  return CheckRun(c);
}

}  // namespace train_config_internal

absl::Status ValidateTrainConfig(const TrainConfig& config) {
  const Check p = train_config_internal::FindProblem(config);
  if (!p) return absl::OkStatus();
  return train_config_internal::FieldError(p->field, "", p->what);
}

}  // namespace slidedp
