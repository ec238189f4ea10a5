// slidedp-train: runs one training job from a YAML or JSON config file on this host,
// without the daemon: parse and validate the config, create the Trainer, run its
// steps with one log line every log_every steps, drain, and export when asked.
// Exit status: 0 done, 2 bad usage or bad config, 1 a failed job (absl's flag parser
// also exits with 1 on an unknown flag and after --help).
// Threads: main only; the Trainer runs its own workers and update thread.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

ABSL_FLAG(bool, dry_run, false,
          "Parse and validate CONFIG, print the resulting config (every field, defaults "
          "filled in) as JSON, and exit without training.");

ABSL_FLAG(std::string, trace, "",
          "Write a Chrome-trace JSON (chrome://tracing, Perfetto) of every stream's work per "
          "unit and of the CPU updates, for the first 8 steps, to this file; overrides the "
          "config's trace_file.");

// Several hosts, named as torchrun names them; each overrides the config's hosts section.
ABSL_FLAG(int, nnodes, 0,
          "Hosts of the job (hosts.count): run the same CONFIG on each, with its own --node_rank. 0: as the "
          "config says.");
ABSL_FLAG(int, node_rank, -1, "This host's rank among --nnodes (hosts.rank); host 0 serves the rendezvous.");
ABSL_FLAG(std::string, master_addr, "", "Host 0's address, the rendezvous (hosts.address).");
ABSL_FLAG(int, master_port, 0, "Host 0's rendezvous port (hosts.port; default 29500).");

namespace slidedp {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitBadConfig = 2;

constexpr char kUsage[] =
    R"(Runs one full-parameter training job on this host, from a config file.

Usage: slidedp-train [flags] CONFIG

CONFIG is a YAML or JSON file whose fields are those of slidedp::TrainConfig
(runtime/train_config.h): top-level fields such as model, seq_len, steps, device,
workers, and the sections data, optimizer and policy. Fields left out keep their
defaults; unknown fields and out-of-range values are errors.

Prints one line every log_every steps:
  step N/STEPS | loss L | grad_norm G | lr LR | T tok/s | S s
and one after each held-out evaluation (with eval data):
  eval after step N | eval_loss L | K tokens | S s
and at the end, when output_dir is set, writes the trained weights there as a
Hugging Face model directory.

One job over several hosts (the config's hosts section, or torchrun's flags): run
the same CONFIG on every host with --nnodes=N --node_rank=R --master_addr=HOST0
[--master_port=29500]. Each host trains on its rows of every batch with its own GPUs
and holds 1/N of the optimizer state; host 0 writes the export; checkpoints go to
checkpoint_dir/host-R-of-N on each host, and resume_from names checkpoint_dir.

Exit status: 0 done; 2 not exactly one CONFIG, or a bad config; 1 anything else
(the job failed, an unknown flag, --help).)";

// --help lists this file's flags (absl's default would match only slidedp-train.cc).
void SetUpUsage() {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view path) { return absl::EndsWith(path, "train_main.cc"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(kUsage);
}

int Fail(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "slidedp-train: %s: %s\n", what, std::string(status.message()).c_str());
  return kExitFailed;
}

void PrintStep(const StepStats& s, int64_t total_steps) {
  std::printf("step %lld/%lld | loss %.4f | grad_norm %.3f | lr %.1e | %.0f tok/s | %.3f s (predicted %.3f s, %s)%s\n",
              static_cast<long long>(s.step), static_cast<long long>(total_steps), s.loss,
              s.grad_norm, s.lr, s.tokens_per_second, s.step_seconds, s.predicted_step_seconds,
              s.bottleneck.empty() ? "-" : s.bottleneck.c_str(), s.skipped ? " | skipped (non-finite gradient)" : "");
  std::fflush(stdout);
}

void PrintEval(const StepStats& s) {
  std::printf("eval after step %lld | eval_loss %.4f | %lld tokens | %.3f s\n",
              static_cast<long long>(s.step), *s.eval_loss, static_cast<long long>(s.eval_tokens),
              s.eval_seconds);
  std::fflush(stdout);
}

void PrintJob(const Trainer& trainer) {
  const TrainConfig& c = trainer.config();
  const ModelConfig& m = trainer.model_config();
  std::printf(
      "slidedp-train: model %s (%s, %lld layers, %.1fM parameters) | %s x%d | %s compute, %s moments | "
      "%lld tokens/step%s | %lld steps\n",
      c.model.c_str(), std::string(FamilyName(m.family)).c_str(),
      static_cast<long long>(m.num_layers), trainer.num_parameters() / 1e6, NameOf(c.device),
      c.workers, NameOf(c.computed_in()), NameOf(c.optimizer.state_dtype),
      static_cast<long long>(c.tokens_per_step() * c.hosts.count),
      c.hosts.count > 1 ? absl::StrFormat(" | host %d of %d", c.hosts.rank, c.hosts.count).c_str() : "",
      static_cast<long long>(c.steps));
  std::fflush(stdout);
}

// Runs the job to its last step; returns the exit status.
int Train(const TrainConfig& config) {
  absl::StatusOr<std::unique_ptr<Trainer>> created = Trainer::Create(config);
  if (!created.ok()) return Fail(created.status(), "cannot start the job");
  Trainer& trainer = **created;
  PrintJob(trainer);
  const PlanReport plan = trainer.Plan();
  std::printf("slidedp-train: plan %s | predicted %.3f s a step, bottleneck %s | %s\n",
              DescribeKnobs(plan.knobs).c_str(), plan.prediction.step_seconds, plan.prediction.bottleneck.c_str(),
              plan.last_change.c_str());
  while (trainer.completed_steps() < config.steps) {
    absl::StatusOr<StepStats> stats = trainer.Step();
    if (!stats.ok()) {
      return Fail(stats.status(),
                  absl::StrFormat("step %d failed", trainer.completed_steps() + 1).c_str());
    }
    if (stats->step % config.log_every == 0 || stats->step == config.steps) {
      PrintStep(*stats, config.steps);
    }
    if (stats->eval_loss.has_value()) PrintEval(*stats);
  }
  if (absl::Status s = trainer.Drain(); !s.ok()) return Fail(s, "the last updates failed");
  if (!config.output_dir.empty()) {
    if (absl::Status s = trainer.ExportHf(config.output_dir); !s.ok())
      return Fail(s, "export failed");
    if (config.hosts.rank == 0) {
      std::printf("slidedp-train: exported the trained model to %s\n", config.output_dir.c_str());
    } else {
      std::printf("slidedp-train: sent this host's shards to host 0, which writes the export\n");
    }
  }
  std::printf("slidedp-train: done, %lld steps\n",
              static_cast<long long>(trainer.completed_steps()));
  return 0;
}

int Main(int argc, char** argv) {
  SetUpUsage();
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "slidedp-train: expected exactly one CONFIG file, got %zu arguments\n"
                 "usage: slidedp-train [flags] CONFIG   (see --help)\n",
                 args.size() - 1);
    return kExitBadConfig;
  }
  absl::StatusOr<TrainConfig> config = LoadTrainConfig(args[1]);
  if (!config.ok()) {
    std::fprintf(stderr, "slidedp-train: bad config: %s\n",
                 std::string(config.status().message()).c_str());
    return kExitBadConfig;
  }
  if (!absl::GetFlag(FLAGS_trace).empty()) config->trace_file = absl::GetFlag(FLAGS_trace);
  if (absl::GetFlag(FLAGS_nnodes) > 0) config->hosts.count = absl::GetFlag(FLAGS_nnodes);
  if (absl::GetFlag(FLAGS_node_rank) >= 0) config->hosts.rank = absl::GetFlag(FLAGS_node_rank);
  if (!absl::GetFlag(FLAGS_master_addr).empty()) config->hosts.address = absl::GetFlag(FLAGS_master_addr);
  if (absl::GetFlag(FLAGS_master_port) > 0) config->hosts.port = absl::GetFlag(FLAGS_master_port);
  if (absl::Status s = ValidateTrainConfig(*config); !s.ok()) {
    std::fprintf(stderr, "slidedp-train: bad config: %s\n", std::string(s.message()).c_str());
    return kExitBadConfig;
  }
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::printf("%s\n", TrainConfigToJson(*config).c_str());
    return 0;
  }
  return Train(*config);
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
