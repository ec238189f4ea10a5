// EngineTrainer's plan changes (engine_trainer.h): the counts left to auto and the units
// resident on the GPUs for a plan, UsePlan's forced plans, the policy's re-plans and,
// with policy.auto, the shrinking of a plan after a GPU out of memory so that the same
// step can run again. Step() in trainer.cc calls in here; the
// job's thread only.
#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/engine/engine_trainer.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/resident_state.h"
#include "runtime/engine/routes.h"
#include "runtime/engine/staged_updates.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace trainer_internal {
namespace {

// Parameters per unit, in the engine's unit order (what residency.h places).
std::vector<int64_t> UnitParams(const ModelLayout& layout) {
  std::vector<int64_t> n;
  for (const UnitLayout& u : layout.units) n.push_back(u.numel);
  return n;
}

}  // namespace

void EngineTrainer::ResolveAutoCounts(const std::vector<at::Device>& devices) {
  if (config_.policy.resident_units >= 0 && config_.policy.kept_blocks >= 0) return;
  // The GPU that can allocate least (the workers' devices are alike).
  int64_t total = 0, available = 0;
  for (const at::Device& d : devices) {
    if (!d.is_cuda()) break;
    absl::StatusOr<std::unique_ptr<DeviceStreams>> s = DeviceStreams::Create(d, /*timing=*/false);
    if (!s.ok()) break;
    const int64_t t = (*s)->MemoryTotal(), a = (*s)->MemoryAvailable();
    total = total == 0 ? t : std::min(total, t);
    available = available == 0 ? a : std::min(available, a);
  }
  const ActivationPlan plan =
      ChooseActivations(config_, state_->config(), static_cast<int64_t>(at::elementSize(state_->compute_dtype())),
                        total, available);
  if (config_.policy.resident_units < 0) config_.policy.resident_units = plan.resident_units;
  if (config_.policy.kept_blocks < 0) config_.policy.kept_blocks = plan.kept_blocks;
}

absl::Status EngineTrainer::BuildResident(const std::vector<at::Device>& devices) {
  if (resident_ != nullptr) {
    // Several hosts keep the units placed at the job's start through plan changes (a
    // change on one host must not start exchanges the others do not join).
    shared_->resident = resident_.get();
    return absl::OkStatus();
  }
  const int64_t n = std::max<int64_t>(config_.policy.resident_units, 0);
  const Residency placement =
      PlaceResident(UnitParams(state_->layout()), n, config_.workers, config_.optimizer.state_dtype);
  // Several hosts agree on the count in Create, even when it is none.
  if (placement.units == 0 && hosts_.trainer == nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<ResidentState>> r =
      ResidentState::Create(state_.get(), placement, devices, hosts_.trainer.get());
  if (!r.ok()) return r.status();
  resident_ = std::move(*r);
  shared_->resident = resident_.get();
  pipeline_->set_resident(resident_.get());
  return absl::OkStatus();
}

absl::Status EngineTrainer::BuildStaged(const std::vector<at::Device>& devices) {
  const int64_t n = config_.policy.staged_updates;
  if (n <= 0) return absl::OkStatus();
  const Residency none;
  const Staging staging =
      PlaceStaged(UnitParams(state_->layout()), resident_ != nullptr ? resident_->placement() : none, n, config_.workers,
                  static_cast<int>(at::elementSize(state_->compute_dtype())), config_.optimizer.state_dtype,
                  config_.policy.chunk_elems);
  if (staging.chunk_elems == 0) return absl::OkStatus();  // every unit resident
  absl::StatusOr<std::unique_ptr<StagedUpdates>> s = StagedUpdates::Create(state_.get(), staging, devices);
  if (!s.ok()) return s.status();
  staged_ = std::move(*s);
  pipeline_->set_staged(staged_.get());
  return absl::OkStatus();
}

void EngineTrainer::DropResident() {
  pipeline_->Drain();
  pipeline_->set_staged(nullptr);
  staged_.reset();
  if (resident_ == nullptr || hosts_.trainer != nullptr) return;
  resident_->ToHost();
  pipeline_->set_resident(nullptr);
  if (shared_ != nullptr) shared_->resident = nullptr;
  resident_.reset();
}

absl::Status EngineTrainer::ApplyKnobs(const PlanKnobs& knobs) {
  pipeline_->Drain();
  workers_.clear();
  DropResident();
  shared_.reset();
  config_ = WithKnobs(config_, knobs);
  probe_ = true;
  return GuardExceptions("setting up the workers", [&] { return BuildWorkers(); });
}

absl::Status EngineTrainer::ChangePlan(const PlanKnobs& knobs) {
  if (knobs.micro_batch_size * knobs.grad_accum != config_.micro_batch_size * config_.grad_accum) {
    return absl::InvalidArgumentError(absl::StrCat("plan: ", knobs.micro_batch_size, " x ", knobs.grad_accum,
                                                   " sequences a worker; the job has ",
                                                   config_.micro_batch_size * config_.grad_accum));
  }
  TrainConfig next = WithKnobs(config_, knobs);
  next.policy.grad_landing = config_.policy.grad_landing;
  if (absl::Status s = ValidateTrainConfig(next); !s.ok()) return s;
  if (!state_->fp32_grad() && !DeviceReducesGradient(next.policy.grad_route, next.workers)) {
    return absl::InvalidArgumentError("plan: gradients land in bf16, which needs a route whose devices reduce");
  }
  plan_.Force(knobs);
  return ApplyKnobs(plan_.knobs());
}

absl::Status EngineTrainer::RecoverFromOutOfMemory(absl::Status error) {
  // Nothing of this step was applied: its updates wait for its last landing (with
  // clipping always, without it in a plan's first step).
  if (absl::Status s = pipeline_->AbortStep(step_); !s.ok()) {
    return absl::Status(error.code(), absl::StrCat(error.message(), "; ", s.message()));
  }
  pipeline_->Drain();
  // bf16 landings wrote gradients into the streamed copies: rewrite them from the
  // master weights, which this step has not touched.
  if (!state_->fp32_grad()) state_->RefreshAllParams();
  return ShrinkUntilBuilt(std::move(error), step_);
}

bool EngineTrainer::CanShrinkAfterOutOfMemory() const {
  // Several hosts cannot run a step again: the others have made part of its exchanges.
  if (hosts_.trainer != nullptr) return false;
  if (requested_.policy.auto_plan) return true;
  const bool auto_kept = requested_.policy.kept_blocks < 0 && plan_.knobs().policy.kept_blocks > 0;
  const bool auto_resident = requested_.policy.resident_units < 0 && plan_.knobs().policy.resident_units > 0;
  return (auto_kept || auto_resident) && (config_.optimizer.max_grad_norm > 0 || probe_);
}

absl::Status EngineTrainer::ShrinkUntilBuilt(absl::Status error, int64_t step) {
  while (absl::IsResourceExhausted(error)) {
    absl::StatusOr<PlanKnobs> smaller = plan_.AfterOutOfMemory(error, step + 1);
    if (!smaller.ok()) return smaller.status();
    error = ApplyKnobs(*smaller);
  }
  return error;
}

}  // namespace trainer_internal
}  // namespace slidedp
