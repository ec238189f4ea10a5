// EngineTrainer's durability (engine_trainer.h): what leaves the trainer and comes back:
// the host state brought up to date (updates drained, resident units copied back), the
// Hugging Face export with the job's tokenizer beside it, checkpoints written now, and a
// restore from one (refused when it was written by another job, run or trajectory).
// Several hosts add their part in trainer_hosts.cc. The job's thread only.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/engine_trainer.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/safetensors.h"
#include "runtime/state/checkpoint.h"
#include "runtime/state/host_state.h"
#include "runtime/train_config_fields.h"

namespace slidedp {
namespace {

// The first field that shapes the training trajectory and differs between the job that
// wrote a checkpoint and `now`, as "field (checkpoint: x, now: y)"; empty if none.
std::string TrajectoryMismatch(const TrainConfig& saved, const TrainConfig& now) {
  // The fields the list tags kTrajectory (train_config_fields.h), in its order.
  const auto a = TaggedFieldTexts(saved, kTrajectory);
  const auto b = TaggedFieldTexts(now, kTrajectory);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].second != b[i].second) {
      return absl::StrCat(a[i].first, " (checkpoint: ", a[i].second, ", now: ", b[i].second, ")");
    }
  }
  return "";
}

}  // namespace

namespace trainer_internal {

absl::Status EngineTrainer::SyncHost() {
  pipeline_->Drain();
  if (absl::Status s = pipeline_->status(); !s.ok()) return s;
  if (resident_ != nullptr) resident_->ToHost();
  return absl::OkStatus();
}

absl::Status EngineTrainer::WriteHf(const std::string& dir) {
  if (absl::Status s = SyncHost(); !s.ok()) return s;
  const ModelLayout& layout = state_->layout();
  // One host: its host state. Several: host 0 writes the whole model, gathered from
  // every host's shards.
  std::vector<at::Tensor> masters;
  for (int u = 0; u < state_->num_units(); ++u) masters.push_back(state_->unit(u).master);
  if (hosts_.trainer != nullptr) {
    absl::StatusOr<std::vector<at::Tensor>> whole = WholeMasters();
    if (!whole.ok()) return whole.status();
    if (hosts_.trainer->rank() != 0) return absl::OkStatus();
    masters = *std::move(whole);
  }
  absl::Status saved = SaveHfModel(dir, model_, layout, [&](int u, int p) -> const float* {
    return masters[u].data_ptr<float>() + layout.units[u].params[p].offset;
  }, "F32", int64_t{4} << 30);
  if (!saved.ok()) return saved;
  // The job's tokenizer (data.tokenizer, else the model directory's) and the model's
  // generation_config.json beside the weights: the export loads and generates alone.
  const std::string model_dir = ModelIsDirectory(config_.model) ? config_.model : "";
  const std::string& tokenizer = config_.data.tokenizer.empty() ? model_dir : config_.data.tokenizer;
  return CopyHfSideFiles(model_dir, tokenizer, dir).status();
}

absl::StatusOr<std::string> EngineTrainer::WriteCheckpointNow() {
  if (config_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError("checkpoint_dir: not set, so no checkpoint can be written");
  }
  if (absl::Status s = SyncHost(); !s.ok()) return s;
  CheckpointMeta meta;
  meta.step = step_;
  meta.adam_steps = pipeline_->adam_steps();
  meta.tokens_seen = tokens_seen_;
  meta.skipped_steps = skipped_steps_;
  meta.bad_steps_in_row = bad_in_row_;
  meta.seed = config_.seed;
  meta.data_cursor = data_->Cursor();
  meta.config_json = TrainConfigToJson(requested_);
  meta.run_id = requested_.run_id;
  // Several hosts: each writes its shard in its own folder; the checkpoint counts once
  // every host has written its part (a host that failed fails the others' too).
  absl::StatusOr<std::string> path =
      WriteCheckpoint(HostCheckpointDir(config_.checkpoint_dir), meta, CheckpointUnits(), config_.keep_checkpoints);
  absl::StatusOr<double> failed = SumOverHosts(path.ok() ? 0.0 : 1.0);
  if (!failed.ok()) return failed.status();
  if (path.ok() && *failed > 0) {
    return absl::UnavailableError(absl::StrCat("checkpoint of step ", step_, ": ", *failed,
                                               " other host(s) could not write their shard"));
  }
  if (path.ok() && hosts_.trainer != nullptr && hosts_.trainer->rank() == 0) {
    // The manifest: which file of which host's folder holds each shard of this step.
    const int H = hosts_.trainer->hosts();
    nlohmann::json shards = nlohmann::json::array();
    const std::string name = std::filesystem::path(*path).filename().string();
    for (int r = 0; r < H; ++r) shards.push_back(absl::StrCat("host-", r, "-of-", H, "/", name));
    const nlohmann::json manifest = {{"step", step_}, {"hosts", H}, {"shards", shards}};
    if (absl::Status s = WriteFileAtomically(
            (std::filesystem::path(config_.checkpoint_dir) / "manifest.json").string(), manifest.dump(2) + "\n");
        !s.ok()) {
      return s;
    }
  }
  return path;
}

absl::Status EngineTrainer::RestoreHere(const std::string& from) {
  if (!std::filesystem::is_directory(from)) {
    bool corrupt = false;
    if (absl::Status s = RestoreFile(from, &corrupt); !s.ok()) return s;
    resumed_ = ResumeReport{from, step_, {}};
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(from);
  if (!all.ok()) return absl::Status(all.status().code(), absl::StrCat("resume_from: ", all.status().message()));
  if (all->empty()) return absl::NotFoundError(absl::StrCat("resume_from: no checkpoint in ", from));
  // Newest first; one that fails verification leaves the buffers partly overwritten,
  // which the next (complete) read overwrites whole.
  std::vector<std::string> passed_over;
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    bool corrupt = false;
    absl::Status s = RestoreFile(*it, &corrupt);
    if (s.ok()) {
      resumed_ = ResumeReport{*it, step_, std::move(passed_over)};
      return absl::OkStatus();
    }
    if (!corrupt) return s;
    passed_over.emplace_back(s.message());
  }
  constexpr size_t kNamed = 3;  // keep_checkpoints may be large: name a few
  const size_t n = passed_over.size();
  passed_over.resize(std::min(n, kNamed));
  if (n > kNamed) passed_over.push_back(absl::StrCat("and ", n - kNamed, " more"));
  return absl::DataLossError(absl::StrCat("resume_from: none of the ", n, " checkpoints in ", from,
                                          " verifies: ", absl::StrJoin(passed_over, "; ")));
}

absl::Status EngineTrainer::RestoreFile(const std::string& path, bool* corrupt) {
  absl::StatusOr<CheckpointMeta> head = ReadCheckpointMeta(path);
  if (!head.ok()) {
    *corrupt = absl::IsDataLoss(head.status());
    return head.status();
  }
  if (!requested_.run_id.empty() && head->run_id != requested_.run_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resume_from: checkpoint ", path, " belongs to run ",
        head->run_id.empty() ? "(none: written without a run id)" : absl::StrCat("'", head->run_id, "'"),
        ", not to this run '", requested_.run_id, "'"));
  }
  absl::StatusOr<TrainConfig> saved = ParseTrainConfig(head->config_json, path);
  if (!saved.ok()) return saved.status();
  if (std::string diff = TrajectoryMismatch(*saved, requested_); !diff.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resume_from: checkpoint ", path, " is of a different job: ", diff));
  }
  if (head->step > config_.steps) {
    return absl::FailedPreconditionError(absl::StrCat("resume_from: checkpoint ", path, " is at step ",
                                                      head->step, ", past steps ", config_.steps));
  }
  absl::StatusOr<CheckpointMeta> meta = ReadCheckpoint(path, CheckpointUnits(), stop_.get());
  if (!meta.ok()) {
    *corrupt = absl::IsDataLoss(meta.status());
    return meta.status();
  }
  if (absl::Status s = data_->Restore(meta->data_cursor); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("resume_from: ", path, ": data cursor: ", s.message()));
  }
  state_->RefreshAllParams();
  // Several hosts bring their resident units back in Restore, once every host has
  // restored (FromHost gathers from all).
  if (resident_ != nullptr && hosts_.trainer == nullptr) {
    if (absl::Status s = resident_->FromHost(); !s.ok()) return s;
  }
  pipeline_->RestoreProgress(meta->step, meta->adam_steps);
  step_ = meta->step;
  tokens_seen_ = meta->tokens_seen;
  skipped_steps_ = meta->skipped_steps;
  bad_in_row_ = meta->bad_steps_in_row;
  return absl::OkStatus();
}

}  // namespace trainer_internal
}  // namespace slidedp
