// Trainer on the engine: see trainer.h. Step() splits the global batch across the
// workers, runs their steps on one thread each, and gathers the step's figures; the
// update pipeline applies the CPU updates behind it.
#include "runtime/engine/trainer.h"
#include "runtime/engine/clock.h"

#include <cmath>
#include <filesystem>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <ATen/Context.h>
#include "runtime/data/dataset.h"
#include "runtime/engine/batch_tensors.h"
#include "runtime/engine/nccl_communicator.h"
#include "runtime/engine/routes.h"
#include "runtime/engine/step_trace.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/engine/worker.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/state/checkpoint.h"
#include "runtime/state/host_state.h"
#include "runtime/state/lr_schedule.h"

namespace slidedp {
namespace {

absl::StatusOr<ModelConfig> ResolveModel(const std::string& model, bool* from_dir) {
  *from_dir = std::filesystem::exists(std::filesystem::path(model) / "config.json");
  if (*from_dir) return LoadModelConfig(model);
  absl::StatusOr<ModelConfig> preset = PresetConfig(model);
  if (!preset.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: '", model, "' is neither a model directory with config.json nor a preset (",
        preset.status().message(), ")"));
  }
  return preset;
}

// "embedding", "block.3", "head": a unit's name in checkpoints and messages.
std::string UnitName(const UnitLayout& u) {
  switch (u.kind) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kHead: return "head";
    case UnitKind::kBlock: break;
  }
  return absl::StrCat("block.", u.layer);
}

// The first field that shapes the training trajectory and differs between the job that
// wrote a checkpoint and `now`, as "field (checkpoint: x, now: y)"; empty if none.
std::string TrajectoryMismatch(const TrainConfig& saved, const TrainConfig& now) {
  const auto num = [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      return absl::StrFormat("%.17g", v);
    } else {
      return absl::StrCat(v);
    }
  };
  const std::vector<std::tuple<const char*, std::string, std::string>> fields = {
      {"model", saved.model, now.model},
      {"data.format", saved.data.format, now.data.format},
      {"data.path", saved.data.path, now.data.path},
      {"data.token_dtype", saved.data.token_dtype, now.data.token_dtype},
      {"data.shuffle", num(saved.data.shuffle), num(now.data.shuffle)},
      {"data.tokenizer", saved.data.tokenizer, now.data.tokenizer},
      {"data.skip_bad_lines", num(saved.data.skip_bad_lines), num(now.data.skip_bad_lines)},
      {"data.document_mask", num(saved.data.document_mask), num(now.data.document_mask)},
      {"seq_len", num(saved.seq_len), num(now.seq_len)},
      {"micro_batch_size", num(saved.micro_batch_size), num(now.micro_batch_size)},
      {"grad_accum", num(saved.grad_accum), num(now.grad_accum)},
      {"workers", num(saved.workers), num(now.workers)},
      {"compute_dtype", saved.compute_dtype, now.compute_dtype},
      {"steps", num(saved.steps), num(now.steps)},
      {"seed", num(saved.seed), num(now.seed)},
      {"optimizer.lr", num(saved.optimizer.lr), num(now.optimizer.lr)},
      {"optimizer.min_lr_ratio", num(saved.optimizer.min_lr_ratio), num(now.optimizer.min_lr_ratio)},
      {"optimizer.warmup_steps", num(saved.optimizer.warmup_steps), num(now.optimizer.warmup_steps)},
      {"optimizer.schedule", saved.optimizer.schedule, now.optimizer.schedule},
      {"optimizer.beta1", num(saved.optimizer.beta1), num(now.optimizer.beta1)},
      {"optimizer.beta2", num(saved.optimizer.beta2), num(now.optimizer.beta2)},
      {"optimizer.eps", num(saved.optimizer.eps), num(now.optimizer.eps)},
      {"optimizer.weight_decay", num(saved.optimizer.weight_decay), num(now.optimizer.weight_decay)},
      {"optimizer.max_grad_norm", num(saved.optimizer.max_grad_norm), num(now.optimizer.max_grad_norm)},
  };
  for (const auto& [name, a, b] : fields) {
    if (a != b) return absl::StrCat(name, " (checkpoint: ", a, ", now: ", b, ")");
  }
  return "";
}

// Steps recorded in a --trace file.
constexpr int64_t kTraceSteps = 8;

class EngineTrainer final : public Trainer {
 public:
  EngineTrainer(const TrainConfig& config, const ModelConfig& model, std::unique_ptr<HostState> state,
                std::unique_ptr<Dataset> data)
      : config_(config), model_(model), state_(std::move(state)), data_(std::move(data)) {}

  // Allocates the shared route state, the update pipeline and the workers (device
  // buffers included): errors such as a GPU out of memory come back here.
  absl::Status Init() {
    const bool cuda = config_.device == "cuda";
    const int W = config_.workers;
    int64_t max_numel = 0;
    for (const UnitLayout& u : state_->layout().units) max_numel = std::max(max_numel, u.numel);
    const GradRoute grad_route = *ParseGradRoute(config_.policy.grad_route);
    std::unique_ptr<Communicator> comm;
    if (W > 1) {
      if (cuda) {
        absl::StatusOr<std::unique_ptr<Communicator>> nccl =
            CreateNcclCommunicator(W, config_.collective_timeout_seconds);
        if (!nccl.ok()) return nccl.status();
        comm = std::move(*nccl);
      } else {
        comm = std::make_unique<HostCommunicator>(W);
      }
    }
    shared_ = std::make_unique<RouteShared>(W, max_numel, state_->num_units(), /*pin=*/cuda,
                                            /*host_sum=*/!DeviceReducesGradient(grad_route, W), std::move(comm));
    if (!config_.trace_file.empty()) trace_ = std::make_unique<StepTrace>();
    pipeline_ = std::make_unique<UpdatePipeline>(state_.get(), config_);
    pipeline_->set_trace(trace_.get());
    for (int w = 0; w < W; ++w) {
      const at::Device device = cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(w))
                                     : at::Device(at::kCPU);
      absl::StatusOr<std::unique_ptr<Worker>> worker =
          Worker::Create(w, config_, state_.get(), pipeline_.get(), shared_.get(), device, trace_.get());
      if (!worker.ok()) {
        return absl::Status(worker.status().code(),
                            absl::StrCat("worker ", w, " (", device.str(), "): ", worker.status().message()));
      }
      workers_.push_back(std::move(*worker));
    }
    return absl::OkStatus();
  }
  ~EngineTrainer() override {
    workers_.clear();
    pipeline_.reset();
  }

  absl::StatusOr<StepStats> Step() override;
  absl::Status Drain() override {
    pipeline_->Drain();
    return absl::OkStatus();
  }
  int64_t completed_steps() const override { return step_; }
  const TrainConfig& config() const override { return config_; }
  const ModelConfig& model_config() const override { return model_; }
  int64_t num_parameters() const override { return state_->layout().total_numel; }
  std::string WeightsDigest() override {
    pipeline_->Drain();
    return state_->MasterDigest();
  }
  absl::StatusOr<std::string> SaveCheckpoint() override;
  int64_t tokens_seen() const override { return tokens_seen_; }
  // Continues from checkpoint `path` (right after construction, before any step).
  absl::Status Restore(const std::string& path);
  absl::Status ExportHf(const std::string& dir) override {
    pipeline_->Drain();
    const ModelLayout& layout = state_->layout();
    return SaveHfModel(dir, model_, layout, [&](int u, int p) -> const float* {
      return state_->unit(u).master.data_ptr<float>() + layout.units[u].params[p].offset;
    }, "F32", int64_t{4} << 30);
  }

 private:
  // Splits a batch of rows into per-worker micro-batches of int64 tensors.
  std::vector<WorkerBatch> Split(const TokenBatch& b, int64_t* target_tokens) const;
  // The host state's buffers, unit by unit, for checkpoint files.
  std::vector<CheckpointUnit> CheckpointUnits();
  // After a step: counts non-finite steps (failing after max_bad_steps in a row) and
  // writes the interval's checkpoint.
  absl::Status AfterStep(const StepUpdateSummary& u, StepStats& s);

  const TrainConfig config_;
  const ModelConfig model_;
  std::unique_ptr<HostState> state_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<RouteShared> shared_;
  std::unique_ptr<StepTrace> trace_;
  std::unique_ptr<UpdatePipeline> pipeline_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t bad_in_row_ = 0;
};

std::vector<CheckpointUnit> EngineTrainer::CheckpointUnits() {
  std::vector<CheckpointUnit> units;
  for (int u = 0; u < state_->num_units(); ++u) {
    UnitState& us = state_->unit(u);
    units.push_back(CheckpointUnit{UnitName(state_->layout().units[u]), state_->layout().units[u].numel,
                                   us.master.data_ptr<float>(), us.m.data_ptr<float>(),
                                   us.v.data_ptr<float>()});
  }
  return units;
}

absl::StatusOr<std::string> EngineTrainer::SaveCheckpoint() {
  if (config_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError("checkpoint_dir: not set, so no checkpoint can be written");
  }
  pipeline_->Drain();
  CheckpointMeta meta;
  meta.step = step_;
  meta.adam_steps = pipeline_->adam_steps();
  meta.tokens_seen = tokens_seen_;
  meta.skipped_steps = skipped_steps_;
  meta.bad_steps_in_row = bad_in_row_;
  meta.seed = config_.seed;
  meta.data_cursor = data_->Cursor();
  meta.config_json = TrainConfigToJson(config_);
  return WriteCheckpoint(config_.checkpoint_dir, meta, CheckpointUnits(), config_.keep_checkpoints);
}

absl::Status EngineTrainer::Restore(const std::string& from) {
  std::string path = from;
  if (std::filesystem::is_directory(from)) {
    absl::StatusOr<std::string> latest = LatestCheckpoint(from);
    if (!latest.ok()) return absl::NotFoundError(absl::StrCat("resume_from: ", latest.status().message()));
    path = *latest;
  }
  absl::StatusOr<CheckpointMeta> head = ReadCheckpointMeta(path);
  if (!head.ok()) return head.status();
  absl::StatusOr<TrainConfig> saved = ParseTrainConfig(head->config_json, path);
  if (!saved.ok()) return saved.status();
  if (std::string diff = TrajectoryMismatch(*saved, config_); !diff.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resume_from: checkpoint ", path, " is of a different job: ", diff));
  }
  if (head->step > config_.steps) {
    return absl::FailedPreconditionError(absl::StrCat("resume_from: checkpoint ", path, " is at step ",
                                                      head->step, ", past steps ", config_.steps));
  }
  absl::StatusOr<CheckpointMeta> meta = ReadCheckpoint(path, CheckpointUnits());
  if (!meta.ok()) return meta.status();
  if (absl::Status s = data_->Restore(meta->data_cursor); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("resume_from: ", path, ": data cursor: ", s.message()));
  }
  state_->RefreshAllParams();
  pipeline_->RestoreProgress(meta->step, meta->adam_steps);
  step_ = meta->step;
  tokens_seen_ = meta->tokens_seen;
  skipped_steps_ = meta->skipped_steps;
  bad_in_row_ = meta->bad_steps_in_row;
  return absl::OkStatus();
}

absl::Status EngineTrainer::AfterStep(const StepUpdateSummary& u, StepStats& s) {
  tokens_seen_ += s.tokens;
  if (s.skipped) {
    ++skipped_steps_;
    ++bad_in_row_;
    s.bad_unit = u.bad_unit;
    if (u.bad_unit >= 0) s.bad_unit_name = UnitName(state_->layout().units[u.bad_unit]);
  } else {
    bad_in_row_ = 0;
  }
  s.bad_steps_in_row = bad_in_row_;
  if (bad_in_row_ >= config_.max_bad_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "non-finite ", std::isfinite(s.loss) ? "gradient" : "loss", " in steps ",
        s.step - bad_in_row_ + 1, "..", s.step, " (", bad_in_row_, " in a row, max_bad_steps ",
        config_.max_bad_steps, "), the last at unit ",
        s.bad_unit_name.empty() ? "(none: the loss only)" : s.bad_unit_name, "; loss ", s.loss,
        ", lr ", s.lr, "; each was skipped"));
  }
  if (config_.checkpoint_interval > 0 && step_ % config_.checkpoint_interval == 0) {
    const double t0 = MonotonicSeconds();
    absl::StatusOr<std::string> path = SaveCheckpoint();
    if (!path.ok()) return path.status();
    s.checkpoint_path = *path;
    s.checkpoint_seconds = MonotonicSeconds() - t0;
  }
  return absl::OkStatus();
}

std::vector<WorkerBatch> EngineTrainer::Split(const TokenBatch& b, int64_t* target_tokens) const {
  const int64_t mbs = config_.micro_batch_size;
  const BatchTensors t = ToTensors(b);
  const at::Tensor& inputs = t.inputs;
  const at::Tensor& targets = t.targets;
  *target_tokens = t.target_tokens;
  std::vector<WorkerBatch> out(config_.workers);
  int64_t row = 0;
  for (int w = 0; w < config_.workers; ++w) {
    for (int64_t k = 0; k < config_.grad_accum; ++k, row += mbs) {
      out[w].inputs.push_back(inputs.narrow(0, row, mbs));
      out[w].targets.push_back(targets.narrow(0, row, mbs));
    }
  }
  return out;
}

absl::StatusOr<StepStats> EngineTrainer::Step() {
  const double t0 = MonotonicSeconds();
  absl::StatusOr<TokenBatch> batch = data_->Next(config_.global_batch_sequences());
  if (!batch.ok()) return batch.status();
  int64_t tokens = 0;
  std::vector<WorkerBatch> parts = Split(*batch, &tokens);
  const double inv_tokens = tokens > 0 ? 1.0 / static_cast<double>(tokens) : 0.0;
  const double lr = LearningRate(config_.optimizer, step_, config_.steps);
  pipeline_->BeginStep(step_, lr);

  std::vector<absl::StatusOr<WorkerStepResult>> results(workers_.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] { results[w] = workers_[w]->RunStep(step_, parts[w], inv_tokens); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t w = 0; w < results.size(); ++w) {
    if (!results[w].ok()) {
      return absl::Status(results[w].status().code(),
                          absl::StrCat("step ", step_ + 1, ", worker ", w, ": ", results[w].status().message()));
    }
  }

  const StepUpdateSummary u = pipeline_->Summary(step_);
  StepStats s;
  s.step = ++step_;
  for (const absl::StatusOr<WorkerStepResult>& res : results) {
    const WorkerStepResult& r = *res;
    s.loss += r.loss_sum;
    s.forward_seconds += r.forward_seconds;
    s.backward_seconds += r.backward_seconds;
    s.update_wait_seconds += r.wait_seconds;
    s.h2d_bytes += r.transfers.h2d_bytes;
    s.d2h_bytes += r.transfers.d2h_bytes;
    WorkerDeviceStats d;
    d.h2d_bytes = r.transfers.h2d_bytes;
    d.d2h_bytes = r.transfers.d2h_bytes;
    d.memory_allocated_bytes = r.memory_allocated_bytes;
    d.memory_peak_bytes = r.memory_peak_bytes;
    d.memory_total_bytes = r.memory_total_bytes;
    s.workers.push_back(d);
  }
  s.grad_norm = u.grad_norm;
  s.lr = lr;
  s.skipped = u.skipped || !std::isfinite(s.loss);
  s.tokens = tokens;
  s.update_busy_seconds = pipeline_->TakeBusySeconds();
  s.step_seconds = MonotonicSeconds() - t0;
  s.tokens_per_second = s.step_seconds > 0 ? tokens / s.step_seconds : 0.0;
  if (trace_ != nullptr && step_ <= kTraceSteps) {
    // The first steps only, rewritten after each, so a long job's trace stays small.
    if (absl::Status w = trace_->Write(config_.trace_file); !w.ok()) return w;
  }
  if (absl::Status st = AfterStep(u, s); !st.ok()) return st;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config) {
  if (absl::Status s = ValidateTrainConfig(config); !s.ok()) return s;
  const bool cuda = config.device == "cuda";
  if (cuda && (!at::hasCUDA() || at::getNumGPUs() < static_cast<size_t>(config.workers))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: cuda with ", config.workers, " workers needs as many GPUs and a CUDA-enabled LibTorch; ",
        at::hasCUDA() ? absl::StrCat(at::getNumGPUs(), " GPUs are visible") : "this build has no CUDA"));
  }
  if (absl::Status s = ParseParamRoute(config.policy.param_route).status(); !s.ok()) return s;
  if (absl::Status s = ParseGradRoute(config.policy.grad_route).status(); !s.ok()) return s;
  bool from_dir = false;
  absl::StatusOr<ModelConfig> model = ResolveModel(config.model, &from_dir);
  if (!model.ok()) return model.status();
  // GPUs compute in bf16 (fp32 master weights stay on the host); the CPU device as asked.
  const at::ScalarType dtype = cuda || config.compute_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  // Gradients land in bf16 in the streamed copy (14 bytes a parameter) unless asked
  // otherwise or unless the host must sum several workers' gradients.
  const GradRoute grad_route = *ParseGradRoute(config.policy.grad_route);
  const bool device_reduces = DeviceReducesGradient(grad_route, config.workers);
  bool bf16_landing = config.policy.grad_landing == "bf16" || (config.policy.grad_landing == "auto" && cuda && device_reduces);
  if (bf16_landing && dtype != at::kBFloat16) {
    return absl::InvalidArgumentError("policy.grad_landing: bf16 needs bf16 compute (compute_dtype: bf16, or device: cuda)");
  }
  if (bf16_landing && !device_reduces) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.grad_landing: bf16 needs a gradient route whose devices reduce; gather_host with ", config.workers,
        " workers sums on the host in fp32 (use grad_route: reduce_scatter or reduce_one, or grad_landing: fp32)"));
  }
  auto state = std::make_unique<HostState>(*model, dtype, config.policy.chunk_elems, /*pin=*/cuda,
                                           /*fp32_grad=*/!bf16_landing);
  if (!config.resume_from.empty()) {
    // Every buffer comes from the checkpoint below.
  } else if (from_dir) {
    if (absl::Status s = state->LoadHf(config.model); !s.ok()) return s;
  } else {
    state->InitRandom(config.seed);
  }
  const DataModel data_model{model->vocab_size, model->family, from_dir ? config.model : ""};
  absl::StatusOr<std::unique_ptr<Dataset>> data =
      OpenDataset(config.data, data_model, config.seq_len, config.seed);
  if (!data.ok()) return data.status();
  auto trainer = std::make_unique<EngineTrainer>(config, *model, std::move(state), std::move(*data));
  try {
    if (absl::Status s = trainer->Init(); !s.ok()) return s;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("setting up the workers: ", e.what()));
  }
  if (!config.resume_from.empty()) {
    if (absl::Status s = trainer->Restore(config.resume_from); !s.ok()) return s;
  }
  return std::unique_ptr<Trainer>(std::move(trainer));
}

}  // namespace slidedp
