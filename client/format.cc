// CLI rendering of API messages. Stateless except ProgressLine (one thread).
#include "client/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace slidedp::client {
namespace {

std::string FormatTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixSeconds(t.seconds()),
                          absl::LocalTimeZone());
}

std::string Flags(const v1::Job& job) {
  std::string out;
  if (job.pause_requested()) absl::StrAppend(&out, " (pause requested)");
  if (job.cancel_requested()) absl::StrAppend(&out, " (cancel requested)");
  return out;
}

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrFormat("%.1f GB", bytes / 1e9);
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  return absl::StrFormat("%.0f B", bytes);
}

}  // namespace

std::string StateName(v1::JobState state) {
  const std::string& name = v1::JobState_Name(state);
  return name.rfind("JOB_STATE_", 0) == 0 ? name.substr(10) : name;
}

v1::JobState ParseState(const std::string& name) {
  std::string upper = absl::AsciiStrToUpper(name);
  if (upper.rfind("JOB_STATE_", 0) != 0) upper = "JOB_STATE_" + upper;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (!v1::JobState_Parse(upper, &state)) return v1::JOB_STATE_UNSPECIFIED;
  return state;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string FormatRate(double v) {
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

std::string FormatJobSummary(const v1::Job& job) {
  return absl::StrCat(job.id(), " ", StateName(job.state()), " step ", job.step(), "/",
                      job.total_steps(), Flags(job));
}

std::string FormatJobTable(const v1::ListJobsResponse& jobs) {
  std::string out = absl::StrFormat("%-18s %-10s %13s %9s %9s  %-19s  %s\n", "ID", "STATE",
                                    "STEP", "LOSS", "TOK/S", "CREATED", "MODEL");
  for (const v1::Job& job : jobs.jobs()) {
    absl::StrAppendFormat(&out, "%-18s %-10s %13s %9.4f %9s  %-19s  %s\n", job.id(),
                          StateName(job.state()), absl::StrCat(job.step(), "/", job.total_steps()),
                          job.last_loss(), FormatRate(job.tokens_per_second()),
                          FormatTime(job.create_time()), job.spec().model());
  }
  return out;
}

std::string FormatJobDetail(const v1::Job& job) {
  std::string out;
  absl::StrAppend(&out, "id:              ", job.id(), "\n");
  absl::StrAppend(&out, "state:           ", StateName(job.state()), Flags(job), "\n");
  absl::StrAppend(&out, "model:           ", job.spec().model(), " (", job.spec().device(), ", ",
                  job.spec().workers(), " worker(s))\n");
  absl::StrAppend(&out, "step:            ", job.step(), "/", job.total_steps(), "\n");
  absl::StrAppend(&out, "tokens seen:     ", job.tokens_seen(), "\n");
  absl::StrAppendFormat(&out, "last loss:       %.6f\n", job.last_loss());
  if (job.has_last_eval_loss()) absl::StrAppendFormat(&out, "last eval loss:  %.6f\n", job.last_eval_loss());
  absl::StrAppend(&out, "tokens/s:        ", FormatRate(job.tokens_per_second()), "\n");
  absl::StrAppendFormat(&out, "learning rate:   %.3g\n", job.learning_rate());
  absl::StrAppend(&out, "parameters:      ", job.num_parameters(), "\n");
  absl::StrAppend(&out, "created:         ", FormatTime(job.create_time()), "\n");
  absl::StrAppend(&out, "started:         ", FormatTime(job.start_time()), "\n");
  absl::StrAppend(&out, "ended:           ", FormatTime(job.end_time()), "\n");
  if (!job.weights_digest().empty()) {
    absl::StrAppend(&out, "weights digest:  ", job.weights_digest(), "\n");
  }
  if (!job.error().empty()) absl::StrAppend(&out, "error:           ", job.error(), "\n");
  return out;
}

std::string FormatNode(const v1::NodeInfo& node) {
  std::string out;
  absl::StrAppend(&out, "host:            ", node.hostname(), "\n");
  absl::StrAppend(&out, "daemon version:  ", node.daemon_version(), "\n");
  absl::StrAppend(&out, "cpu cores:       ", node.cpu_cores(), "\n");
  absl::StrAppend(&out, "host memory:     ", Bytes(node.host_memory_available_bytes()), " available of ",
                  Bytes(node.host_memory_total_bytes()), "\n");
  absl::StrAppend(&out, "gpus:            ", node.gpus_size(), "\n");
  for (const v1::GpuInfo& gpu : node.gpus()) {
    absl::StrAppend(&out, "  [", gpu.index(), "] ", gpu.name(), " ", gpu.bus_id(), "\n");
  }
  absl::StrAppend(&out, "running job:     ", node.running_job_id().empty() ? "-" : node.running_job_id(),
                  "\n");
  absl::StrAppend(&out, "queued jobs:     ", node.queued_jobs(), "\n");
  const v1::MeasuredRates& m = node.measured();
  if (m.step_seconds() > 0) {
    absl::StrAppend(&out, "last step:       ", absl::StrFormat("%.3f s", m.step_seconds()), ", ",
                    FormatRate(m.tokens_per_second()), " tokens/s\n");
    absl::StrAppend(&out, "H2D / D2H:       ", Bytes(m.h2d_bytes_per_second()), "/s / ",
                    Bytes(m.d2h_bytes_per_second()), "/s\n");
    absl::StrAppend(&out, "CPU AdamW:       ", FormatRate(m.adamw_params_per_second()), " params/s\n");
  }
  return out;
}

namespace {

std::string KnobsText(const v1::PlanKnobs& k) {
  std::string text = absl::StrFormat("%d x %d micro-batches, prefetch %d, activations %s, %s/%s, loss chunk %d",
                                     k.micro_batch_size(), k.grad_accum(), k.prefetch_depth(), k.activations(),
                                     k.param_route(), k.grad_route(), k.loss_chunk_tokens());
  // The blocks whose backward does not recompute their forward.
  if (k.kept_blocks() >= 0 && k.blocks() > 0) {
    absl::StrAppend(&text, absl::StrFormat(", %d of %d blocks kept", std::min(k.kept_blocks(), k.blocks()), k.blocks()));
  }
  // The units whose training state lives on a GPU (and is updated there).
  if (k.resident_units() > 0 && k.units() > 0) {
    absl::StrAppend(&text, absl::StrFormat(", %d of %d units resident (%s on a GPU)",
                                           std::min(k.resident_units(), k.units()), k.units(),
                                           Bytes(static_cast<double>(k.resident_bytes()))));
  }
  // Streamed units updated on a GPU, their state staged through it.
  if (k.staged_updates() > 0) {
    const int64_t streamed = k.units() > 0 ? k.units() - std::min(std::max<int64_t>(k.resident_units(), 0), k.units())
                                           : k.staged_updates();
    const int64_t staged = std::min(k.staged_updates(), streamed);
    if (staged > 0) absl::StrAppend(&text, absl::StrFormat(", %d updates staged on a GPU", staged));
  }
  return text;
}

double SecondsOf(const google::protobuf::RepeatedPtrField<v1::ResourceTime>& times, const std::string& resource) {
  for (const v1::ResourceTime& t : times) {
    if (t.resource() == resource) return t.seconds();
  }
  return 0.0;
}

}  // namespace

std::string FormatPlan(const v1::Plan& plan) {
  std::string out;
  absl::StrAppend(&out, "job:             ", plan.job_id(), plan.auto_() ? " (policy.auto)" : "", "\n");
  absl::StrAppend(&out, "plan:            ", KnobsText(plan.knobs()), "\n");
  absl::StrAppend(&out, "step time:       ", absl::StrFormat("predicted %.3f s", plan.predicted_step_seconds()));
  if (plan.measured_step_seconds() > 0) {
    absl::StrAppend(&out, absl::StrFormat(", measured %.3f s (%+.1f%%) at step %d", plan.measured_step_seconds(),
                                          100 * (plan.measured_step_seconds() / plan.predicted_step_seconds() - 1),
                                          plan.step()));
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "bottleneck:      ", plan.bottleneck().empty() ? "-" : plan.bottleneck(), "\n");
  absl::StrAppend(&out, absl::StrFormat("fill / drain:    %.3f s / %.3f s\n", plan.fill_seconds(), plan.drain_seconds()));
  absl::StrAppend(&out, "resource          busy s  critical s  gpu idle s\n");
  for (const char* r : {"gpu", "h2d", "d2h", "collective", "cpu_update", "host_memory"}) {
    absl::StrAppend(&out, absl::StrFormat("  %-14s %8.3f  %10.3f  %10.3f\n", r, SecondsOf(plan.busy(), r),
                                          SecondsOf(plan.critical(), r), SecondsOf(plan.exposed(), r)));
  }
  absl::StrAppend(&out, "critical path:\n");
  for (const v1::PathSegment& s : plan.critical_path()) {
    absl::StrAppend(&out, absl::StrFormat("  %-12s %8.3f s  %s\n", s.resource(), s.seconds(), s.what()));
  }
  absl::StrAppend(&out, "gpu memory:      ", Bytes(plan.memory().total_bytes()), " predicted of ",
                  plan.memory_budget_bytes() > 0 ? Bytes(plan.memory_budget_bytes()) : std::string("no budget"), "\n");
  if (plan.calibration_seconds() > 0) {
    absl::StrAppend(&out, absl::StrFormat("calibration:     %.2f s\n", plan.calibration_seconds()));
    for (const std::string& n : plan.calibration_notes()) absl::StrAppend(&out, "  ", n, "\n");
  }
  absl::StrAppend(&out, "re-plans:        ", plan.replans(), ", out-of-memory retries: ", plan.oom_retries(), "\n");
  if (!plan.last_change().empty()) absl::StrAppend(&out, "last change:     ", plan.last_change(), "\n");
  if (plan.candidates_size() > 0) {
    absl::StrAppend(&out, "candidates (", plan.candidates_size(), "):\n");
    absl::StrAppend(&out, "     predicted s  bottleneck   memory      fits  plan\n");
    for (const v1::PlanCandidate& c : plan.candidates()) {
      absl::StrAppend(&out, absl::StrFormat("  %s %11.3f  %-11s  %-10s  %-4s  %s\n", c.chosen() ? "*" : " ",
                                            c.predicted_step_seconds(), c.bottleneck(), Bytes(c.memory_bytes()),
                                            c.fits() ? "yes" : "no", KnobsText(c.knobs())));
    }
  } else if (plan.candidate_count() > 0) {
    absl::StrAppend(&out, "candidates:      ", plan.candidate_count(), " (--candidates to list them)\n");
  }
  return out;
}

std::string ProgressLine::Render(const v1::JobEvent& event) {
  const v1::Job& job = event.job();
  if (event.type() == v1::JobEvent::TYPE_STEP && event.step().step_seconds() > 0) {
    ++steps_seen_;
    mean_step_seconds_ += (event.step().step_seconds() - mean_step_seconds_) / steps_seen_;
  }
  constexpr int kWidth = 30;
  const int64_t total = std::max<int64_t>(job.total_steps(), 1);
  const int filled = static_cast<int>(std::min<int64_t>(kWidth, job.step() * kWidth / total));
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  const double eta = mean_step_seconds_ * static_cast<double>(total - job.step());
  const std::string eval = job.has_last_eval_loss() ? absl::StrFormat("  eval %.4f", job.last_eval_loss()) : "";
  return absl::StrFormat("[%s] %d/%d  loss %.4f%s  %s tok/s  ETA %s  %s%s", bar, job.step(),
                         job.total_steps(), job.last_loss(), eval, FormatRate(job.tokens_per_second()),
                         steps_seen_ > 0 ? FormatDuration(eta) : "-", StateName(job.state()),
                         Flags(job));
}

}  // namespace slidedp::client
