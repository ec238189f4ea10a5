// Trainer on the engine: see trainer.h. Step() splits the global batch across the
// workers, runs their steps on one thread each, and gathers the step's figures; the
// update pipeline applies the CPU updates behind it. Here: EngineTrainer's creation, the
// step and evaluation; its plan changes, resident units and out-of-memory retries are in
// trainer_plan.cc, export, checkpoints and restore in trainer_durability.cc, what a job
// over several hosts adds in trainer_hosts.cc (the class: engine_trainer.h). The job's
// thread only.
#include "runtime/engine/trainer.h"
#include "runtime/engine/clock.h"

#include <cmath>
#include <functional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include <ATen/Context.h>
#include "runtime/data/dataset.h"
#include "runtime/engine/admission.h"
#include "runtime/engine/batch_tensors.h"
#include "runtime/engine/calibration.h"
#include "runtime/engine/engine_trainer.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/engine/nccl_communicator.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/routes.h"
#include "runtime/engine/step_trace.h"
#include "runtime/engine/update_pipeline.h"
#include "runtime/engine/worker.h"
#include "runtime/model/param_layout.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/state/host_state.h"
#include "runtime/state/lr_schedule.h"

namespace slidedp {
namespace {

absl::StatusOr<ModelConfig> ResolveModel(const std::string& model, bool* from_dir) {
  *from_dir = ModelIsDirectory(model);
  if (*from_dir) return LoadModelConfig(model);
  absl::StatusOr<ModelConfig> preset = PresetConfig(model);
  if (!preset.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: '", model, "' is neither a model directory with config.json nor a preset (",
        preset.status().message(), ")"));
  }
  return preset;
}

// Steps recorded in a --trace file.
constexpr int64_t kTraceSteps = 8;

}  // namespace

namespace trainer_internal {

absl::Status EngineTrainer::Init() {
  if (!config_.trace_file.empty()) trace_ = std::make_unique<StepTrace>();
  pipeline_ = std::make_unique<UpdatePipeline>(state_.get(), config_);
  pipeline_->set_trace(trace_.get());
  pipeline_->set_hosts(hosts_.link.get(), hosts_.update.get());
  absl::Status built = BuildWorkers();
  // With policy.auto a plan whose buffers do not fit shrinks before the first step.
  if (absl::IsResourceExhausted(built) && requested_.policy.auto_plan) built = ShrinkUntilBuilt(built, 0);
  ForgetHostBytes();
  return built;
}

absl::Status EngineTrainer::BuildWorkers() {
  const bool cuda = config_.device == DeviceKind::kCuda;
  const int W = config_.workers;
  int64_t max_numel = 0;
  for (const UnitLayout& u : state_->layout().units) max_numel = std::max(max_numel, u.numel);
  const GradRoute grad_route = config_.policy.grad_route;
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
  std::vector<at::Device> devices;
  for (int w = 0; w < W; ++w) {
    devices.push_back(cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(w)) : at::Device(at::kCPU));
  }
  // Counts left to auto are resolved once, together, against what the GPUs can still
  // allocate before anything of this plan is; then the resident units, so that the
  // workers' buffers come after them.
  ResolveAutoCounts(devices);
  if (absl::Status s = BuildResident(devices); !s.ok()) return s;
  if (absl::Status s = BuildStaged(devices); !s.ok()) return s;
  for (int w = 0; w < W; ++w) {
    const at::Device& device = devices[w];
    absl::StatusOr<std::unique_ptr<Worker>> worker =
        Worker::Create(w, config_, state_.get(), pipeline_.get(), shared_.get(), device, trace_.get(), stop_.get());
    if (!worker.ok()) {
      return absl::Status(worker.status().code(),
                          absl::StrCat("worker ", w, " (", device.str(), "): ", worker.status().message()));
    }
    workers_.push_back(std::move(*worker));
  }
  // The counts the engine resolved against the devices (left to auto, policy.auto
  // off), so that the prediction and the plan show what runs.
  plan_.SetResidentUnits(resident_ != nullptr ? resident_->placement().units : 0);
  plan_.SetKeptBlocks(workers_[0]->kept_blocks());
  return absl::OkStatus();
}

absl::Status EngineTrainer::AfterStep(const StepUpdateSummary& u, StepStats& s) {
  tokens_seen_ += s.tokens;
  if (s.skipped) {
    ++skipped_steps_;
    ++bad_in_row_;
    s.bad_unit = u.bad_unit;
    if (u.bad_unit >= 0) s.bad_unit_name = UnitName(u.bad_unit, state_->num_units());
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

absl::StatusOr<std::vector<WorkerBatch>> EngineTrainer::Split(const TokenBatch& b, int64_t* target_tokens) const {
  const int64_t mbs = config_.micro_batch_size;
  if (b.rows != config_.job_batch_sequences() || b.seq_len != config_.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the dataset gave a batch of ", b.rows, " x ", b.seq_len,
                                                   " tokens for ", config_.job_batch_sequences(), " x ",
                                                   config_.seq_len));
  }
  if (absl::Status s = CheckBatch(b); !s.ok()) return s;
  const BatchTensors t = ToTensors(b);
  *target_tokens = t.target_tokens;  // of the whole job's batch: gradients of its mean loss
  std::vector<WorkerBatch> out(config_.workers);
  // Over several hosts each takes its own rows of the job's batch.
  int64_t row = config_.hosts.rank * config_.global_batch_sequences();
  for (int w = 0; w < config_.workers; ++w) {
    for (int64_t k = 0; k < config_.grad_accum; ++k, row += mbs) {
      out[w].inputs.push_back(t.inputs.narrow(0, row, mbs));
      out[w].targets.push_back(t.targets.narrow(0, row, mbs));
      if (t.positions.defined()) out[w].positions.push_back(t.positions.narrow(0, row, mbs));
    }
  }
  return out;
}

absl::StatusOr<std::vector<WorkerStepResult>> EngineTrainer::OnEveryWorker(
    const std::string& what, const std::function<absl::StatusOr<WorkerStepResult>(int)>& run) {
  std::vector<absl::StatusOr<WorkerStepResult>> results(workers_.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] { results[w] = run(static_cast<int>(w)); });
  }
  for (std::thread& t : threads) t.join();
  std::vector<absl::Status> statuses;
  for (const absl::StatusOr<WorkerStepResult>& r : results) statuses.push_back(r.status());
  if (const int failed = FailureToReport(statuses); failed >= 0) {
    const absl::Status& s = results[failed].status();
    return absl::Status(s.code(), absl::StrCat(what, ", worker ", failed, ": ", s.message()));
  }
  std::vector<WorkerStepResult> out;
  for (absl::StatusOr<WorkerStepResult>& r : results) out.push_back(*std::move(r));
  return out;
}

absl::Status EngineTrainer::Evaluate(StepStats& s) {
  const double t0 = MonotonicSeconds();
  const std::string what = absl::StrCat("evaluation after step ", step_);
  if (absl::Status st = eval_.dataset->Restore(eval_start_); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(what, ": restarting the eval data: ", st.message()));
  }
  double loss_sum = 0.0;
  int64_t tokens = 0;
  for (int64_t b = 0; b < eval_.batches; ++b) {
    if (absl::Status st = CheckStop(stop_.get(), absl::StrCat(what, ", batch ", b + 1)); !st.ok()) return st;
    absl::StatusOr<TokenBatch> batch = eval_.dataset->Next(config_.job_batch_sequences());
    int64_t batch_tokens = 0;
    absl::StatusOr<std::vector<WorkerBatch>> parts =
        batch.ok() ? Split(*batch, &batch_tokens) : absl::StatusOr<std::vector<WorkerBatch>>(batch.status());
    if (!parts.ok()) {
      return absl::Status(parts.status().code(), absl::StrCat(what, ", batch ", b + 1, ": ", parts.status().message()));
    }
    absl::StatusOr<std::vector<WorkerStepResult>> results =
        OnEveryWorker(what, [&](int w) { return workers_[w]->RunEval(step_, (*parts)[w]); });
    if (!results.ok() && StopRequested(stop_.get())) {
      return CheckStop(stop_.get(), absl::StrCat(what, ", batch ", b + 1));
    }
    if (!results.ok()) return results.status();
    for (const WorkerStepResult& r : *results) loss_sum += r.loss_sum;
    tokens += batch_tokens;
  }
  absl::StatusOr<double> all = SumOverHosts(loss_sum);
  if (!all.ok()) return all.status();
  loss_sum = *all;
  s.eval_loss = tokens > 0 ? loss_sum / static_cast<double>(tokens) : std::nan("");
  s.eval_tokens = tokens;
  s.eval_seconds = MonotonicSeconds() - t0;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkerStepResult>> EngineTrainer::RunWorkers(const TokenBatch& batch, double lr,
                                                                         int64_t* tokens) {
  const std::string what = absl::StrCat("step ", step_ + 1);
  absl::StatusOr<std::vector<WorkerBatch>> parts = Split(batch, tokens);
  if (!parts.ok()) return absl::Status(parts.status().code(), absl::StrCat(what, ": ", parts.status().message()));
  const double inv_tokens = *tokens > 0 ? 1.0 / static_cast<double>(*tokens) : 0.0;
  pipeline_->BeginStep(step_, lr, /*hold=*/probe_);
  return OnEveryWorker(what, [&](int w) { return workers_[w]->RunStep(step_, (*parts)[w], inv_tokens); });
}

absl::Status EngineTrainer::CheckWholeState(const char* what) const {
  if (!partial_state_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "no ", what, ": step ", step_ + 1, " was stopped after some of its updates were applied (no clipping), so the "
      "host state is not that of any step"));
}

absl::Status EngineTrainer::AfterStoppedStep(absl::Status stopped) {
  // As after an out-of-memory: the step's landings are forgotten when none of its
  // updates was issued (with clipping they wait for its last landing).
  if (!pipeline_->AbortStep(step_).ok()) partial_state_ = true;
  pipeline_->Drain();
  if (!partial_state_ && !state_->fp32_grad()) state_->RefreshAllParams();
  return stopped;
}

absl::StatusOr<StepStats> EngineTrainer::RunStep() {
  if (absl::Status st = CheckWholeState("step"); !st.ok()) return st;
  if (absl::Status st = CheckStop(stop_.get(), absl::StrCat("step ", step_ + 1)); !st.ok()) return st;
  const double t0 = MonotonicSeconds();
  absl::StatusOr<TokenBatch> batch = data_->Next(config_.job_batch_sequences());
  if (!batch.ok()) return batch.status();
  const double lr = LearningRate(config_.optimizer, step_, config_.steps);
  int64_t tokens = 0;
  absl::StatusOr<std::vector<WorkerStepResult>> results = RunWorkers(*batch, lr, &tokens);
  // A GPU out of memory with policy.auto (or kept blocks left to auto): a smaller plan,
  // the same step again.
  while (!results.ok() && absl::IsResourceExhausted(results.status()) && CanShrinkAfterOutOfMemory() &&
         !StopRequested(stop_.get())) {
    if (absl::Status s = RecoverFromOutOfMemory(results.status()); !s.ok()) return s;
    results = RunWorkers(*batch, lr, &tokens);
  }
  // Stopped in the workers (their error may be a peer's abort): CANCELLED.
  if (!results.ok() && StopRequested(stop_.get())) {
    return AfterStoppedStep(CheckStop(stop_.get(), absl::StrCat("step ", step_ + 1)));
  }
  if (!results.ok() && absl::IsResourceExhausted(results.status()) && hosts_.trainer != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        results.status().message(), "; a job over several hosts does not run a step again with a smaller plan (the "
        "other hosts have made part of its exchanges): lower micro_batch_size, policy.kept_blocks or "
        "policy.resident_units in every host's spec"));
  }
  if (!results.ok()) return results.status();

  const StepUpdateSummary u = pipeline_->Summary(step_);
  if (absl::Status st = pipeline_->status(); !st.ok()) return st;
  StepStats s;
  s.step = ++step_;
  for (const WorkerStepResult& r : *results) {
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
    d.memory_reserved_peak_bytes = r.memory_reserved_peak_bytes;
    d.memory_total_bytes = r.memory_total_bytes;
    s.workers.push_back(d);
  }
  if (hosts_.trainer != nullptr) {
    // The other hosts' parts of the mean loss.
    absl::StatusOr<double> all = SumOverHosts(s.loss);
    if (!all.ok()) return all.status();
    s.loss = *all;
  }
  s.grad_norm = u.grad_norm;
  s.lr = lr;
  s.skipped = u.skipped || !std::isfinite(s.loss);
  s.tokens = tokens;
  s.update_busy_seconds = pipeline_->TakeBusySeconds();
  if (hosts_.trainer != nullptr) {
    // This step's reductions and losses, and the gathers of the previous step's updates
    // (done by now: this step's forward fetched every unit; this step's own gathers
    // count in the next step's figure, the first step's none).
    const int64_t reduced = hosts_.trainer->bytes_sent() + hosts_.link->bytes_sent();
    s.host_bytes_sent = reduced - host_bytes_before_ + pipeline_->TakeGatheredBytes(step_ - 2);
    host_bytes_before_ = reduced;
  }
  s.step_seconds = MonotonicSeconds() - t0;
  s.tokens_per_second = s.step_seconds > 0 ? tokens / s.step_seconds : 0.0;
  if (trace_ != nullptr && step_ <= kTraceSteps) {
    // The first steps only, rewritten after each, so a long job's trace stays small.
    if (absl::Status w = trace_->Write(config_.trace_file); !w.ok()) return w;
  }
  if (absl::Status st = AfterStep(u, s); !st.ok()) return st;
  const bool eval_due = step_ == config_.steps || (eval_.interval > 0 && step_ % eval_.interval == 0);
  if (eval_.dataset != nullptr && eval_due) {
    if (absl::Status st = Evaluate(s); !st.ok()) return st;
  }
  // A plan's first step (and the job's) warms up: not a measure of the plan.
  const bool first_of_plan = probe_ || s.step == 1;
  probe_ = false;
  if (std::optional<PlanKnobs> replanned = ReportStep(plan_, s, first_of_plan)) {
    if (absl::Status st = ApplyKnobs(*replanned); !st.ok()) return st;
  }
  return s;
}

}  // namespace trainer_internal

namespace {

using trainer_internal::EngineTrainer;

// Builds the engine for `config` (the knobs of `plan` applied to `requested`), on the
// datasets of `inputs` where given.
absl::StatusOr<std::unique_ptr<Trainer>> CreateEngine(const TrainConfig& requested, const TrainConfig& config,
                                                      const ModelConfig& model_config, bool from_dir,
                                                      PlanManager plan, TrainerInputs inputs) {
  const ModelConfig* model = &model_config;
  const bool cuda = config.device == DeviceKind::kCuda;
  const at::ScalarType dtype = config.computed_in() == ComputeDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  // Gradients land in bf16 in the streamed copy (14 bytes a parameter) unless asked
  // otherwise or unless the host must sum several workers' gradients.
  const bool device_reduces = DeviceReducesGradient(config.policy.grad_route, config.workers);
  bool bf16_landing =
      LandsInBf16(config.policy.grad_landing, config.policy.grad_route, cuda, config.workers);
  if (bf16_landing && dtype != at::kBFloat16) {
    return absl::InvalidArgumentError("policy.grad_landing: bf16 needs bf16 compute (compute_dtype: bf16, or device: cuda)");
  }
  if (bf16_landing && !device_reduces) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.grad_landing: bf16 needs a gradient route whose devices reduce; gather_host with ", config.workers,
        " workers sums on the host in fp32 (use grad_route: reduce_scatter or reduce_one, or grad_landing: fp32)"));
  }
  const StopToken* stop = inputs.stop.get();
  // Several hosts: meet the others first (a host that does not come fails the job here).
  EngineTrainer::HostLinks hosts;
  if (config.hosts.count > 1) {
    absl::StatusOr<EngineTrainer::HostLinks> links = trainer_internal::ConnectHosts(config.hosts, plan);
    if (!links.ok()) return links.status();
    hosts = std::move(*links);
  }
  MaybeInjectHostAllocationFailure();
  const MomentDtype moments = config.optimizer.state_dtype;
  auto state = std::make_unique<HostState>(*model, dtype, config.policy.chunk_elems, /*pin=*/cuda,
                                           /*fp32_grad=*/!bf16_landing, moments, config.hosts.rank,
                                           config.hosts.count);
  if (!config.resume_from.empty()) {
    // Every buffer comes from the checkpoint below.
  } else if (from_dir) {
    if (absl::Status s = state->LoadHf(config.model, stop); !s.ok()) return s;
  } else {
    if (absl::Status s = state->InitRandom(config.seed, stop); !s.ok()) return s;
  }
  const DataModel data_model{model->vocab_size, model->family, from_dir ? config.model : ""};
  if (inputs.train == nullptr) {
    absl::StatusOr<std::unique_ptr<Dataset>> data =
        OpenDataset(config.data, data_model, config.seq_len, config.seed, stop);
    if (!data.ok()) return data.status();
    inputs.train = std::move(*data);
  }
  if (inputs.eval.dataset == nullptr && !config.data.eval_path.empty()) {
    // Held-out data: every eval_interval steps, and after the last step in any case.
    absl::StatusOr<std::unique_ptr<Dataset>> eval =
        OpenEvalDataset(config.data, data_model, config.seq_len, config.seed, stop);
    if (!eval.ok()) return eval.status();
    inputs.eval = EvalOptions{std::move(*eval), config.eval_interval, config.eval_batches};
  }
  if (absl::Status s = CheckStop(stop, "setting up the job"); !s.ok()) return s;
  plan.FixLanding(bf16_landing);
  auto trainer = std::make_unique<EngineTrainer>(requested, config, *model, std::move(state), std::move(inputs.train),
                                                 std::move(inputs.eval), std::move(plan), std::move(inputs.stop));
  trainer->SetHosts(std::move(hosts));
  try {
    if (absl::Status s = trainer->Init(); !s.ok()) return s;
  } catch (...) {
    return CurrentExceptionStatus("setting up the workers");
  }
  if (!config.resume_from.empty()) {
    if (absl::Status s = trainer->Restore(config.resume_from); !s.ok()) return s;
  }
  return std::unique_ptr<Trainer>(std::move(trainer));
}

absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const TrainConfig& config, TrainerInputs inputs) {
  if (absl::Status s = ValidateTrainConfig(config); !s.ok()) return s;
  if (inputs.eval.interval < 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval_interval ", inputs.eval.interval, " is not >= 0"));
  }
  if (inputs.eval.batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("eval_batches ", inputs.eval.batches, " is not >= 1"));
  }
  const bool cuda = config.device == DeviceKind::kCuda;
  if (cuda && (!at::hasCUDA() || at::getNumGPUs() < static_cast<size_t>(config.workers))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: cuda with ", config.workers, " workers needs as many GPUs and a CUDA-enabled LibTorch; ",
        at::hasCUDA() ? absl::StrCat(at::getNumGPUs(), " GPUs are visible") : "this build has no CUDA"));
  }
  bool from_dir = false;
  absl::StatusOr<ModelConfig> model = ResolveModel(config.model, &from_dir);
  if (!model.ok()) return model.status();
  if (absl::Status s = CheckSequenceLength(*model, config.seq_len); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", config.model, ": ", s.message()));
  }
  // Before anything is allocated: does the job fit in the host's memory now?
  if (absl::Status s = AdmitJob(config, *model, AdmitAgainst::kAvailable); !s.ok()) return s;
  // The plan: the job's knobs, or with policy.auto those the policy chooses.
  absl::StatusOr<PlanManager> plan = StartPlan(*model, config, inputs.stop.get());
  if (!plan.ok()) return plan.status();
  const TrainConfig effective = WithKnobs(config, plan->knobs());
  return CreateEngine(config, effective, *model, from_dir, *std::move(plan), std::move(inputs));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config) {
  return Create(config, TrainerInputs{});
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, TrainerInputs inputs) {
  // Whatever LibTorch or an allocation throws on the way (the host state of a model
  // too large for admission to have seen it coming, say) is a status, never an abort.
  return GuardExceptions("the engine", [&] { return CreateTrainer(config, std::move(inputs)); });
}

}  // namespace slidedp
