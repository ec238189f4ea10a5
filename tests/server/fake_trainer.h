// FakeTrainer: a Trainer whose steps are scripted by the test (through a shared
// FakeControl), for the job manager's failure and timing paths. Never used by the
// integration tests, which run the real engine. Step() runs on the job thread; the
// test thread changes FakeControl under its mutex.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/engine/trainer.h"
#include "runtime/state/checkpoint.h"
#include "server/job_manager.h"
#include "server/spec_translation.h"

namespace slidedp::server::testing {

struct FakeControl {
  absl::Mutex mu;
  // Step() blocks while completed steps >= allowed_steps (the test releases steps).
  int64_t allowed_steps ABSL_GUARDED_BY(mu) = INT64_MAX;
  int64_t fail_at_step ABSL_GUARDED_BY(mu) = -1;  // Step() number (1-based) that fails
  std::string fail_message ABSL_GUARDED_BY(mu) = "fake step failure";  // its status message
  // > 0: WeightsDigest() is this many characters long (a record that needs more pages).
  size_t digest_bytes ABSL_GUARDED_BY(mu) = 0;
  bool fail_create ABSL_GUARDED_BY(mu) = false;
  // The factory waits (after counting the create) while this is true: a job held in the
  // creation of its trainer, before any step.
  bool hold_create ABSL_GUARDED_BY(mu) = false;
  bool fail_export ABSL_GUARDED_BY(mu) = false;
  // > 0: steps whose number is a multiple report a held-out eval loss of 20 / step.
  int64_t eval_interval ABSL_GUARDED_BY(mu) = 0;
  int creates ABSL_GUARDED_BY(mu) = 0;
  int destroyed ABSL_GUARDED_BY(mu) = 0;
  int drains ABSL_GUARDED_BY(mu) = 0;
  // Step() calls now blocked waiting for allowed_steps: a test that must act while a step
  // is in flight waits for this to become 1 (a job seen RUNNING, or at step N, may not
  // have entered its next Step() yet).
  int blocked ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::string> created_models ABSL_GUARDED_BY(mu);  // config.model per Create
  std::vector<TrainConfig> created_configs ABSL_GUARDED_BY(mu);  // the config per Create
  std::vector<std::string> exports ABSL_GUARDED_BY(mu);

  void Allow(int64_t steps) {
    absl::MutexLock lock(&mu);
    allowed_steps = steps;
  }
};

class FakeTrainer final : public Trainer {
 public:
  // With config.resume_from (a checkpoint file or directory, as the job manager sets it
  // for a restored job) it continues at the step and tokens of that checkpoint's
  // header (a directory: its newest readable one); the weights are not read.
  FakeTrainer(TrainConfig config, std::shared_ptr<FakeControl> control)
      : config_(std::move(config)), control_(std::move(control)) {
    if (config_.resume_from.empty()) return;
    CheckpointMeta meta;
    absl::StatusOr<std::string> path = config_.resume_from;
    if (std::filesystem::is_directory(config_.resume_from)) {
      path = NewestReadableCheckpoint(config_.resume_from, &meta);
    } else if (absl::StatusOr<CheckpointMeta> m = ReadCheckpointMeta(config_.resume_from); m.ok()) {
      meta = *m;
    }
    if (!path.ok()) return;
    steps_ = meta.step;
    tokens_ = meta.tokens_seen;
    resumed_ = ResumeReport{*path, meta.step, {}};
  }
  ~FakeTrainer() override {
    absl::MutexLock lock(&control_->mu);
    ++control_->destroyed;
  }

  absl::StatusOr<StepStats> Step() override {
    int64_t eval_interval = 0;
    {
      absl::MutexLock lock(&control_->mu);
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_->mu) {
        return steps_ < control_->allowed_steps;
      };
      if (!released()) {
        ++control_->blocked;
        control_->mu.Await(absl::Condition(&released));
        --control_->blocked;
      }
      if (control_->fail_at_step == steps_ + 1) return absl::InternalError(control_->fail_message);
      eval_interval = control_->eval_interval;
    }
    ++steps_;
    tokens_ += config_.tokens_per_step();
    digest_ = digest_ * 31 + static_cast<uint64_t>(steps_);
    StepStats s;
    s.step = steps_;
    s.loss = 10.0 / static_cast<double>(steps_);
    s.lr = 1e-3;
    s.tokens = config_.tokens_per_step();
    s.step_seconds = 0.001;
    s.tokens_per_second = static_cast<double>(s.tokens) / s.step_seconds;
    s.h2d_bytes = 1000;
    s.d2h_bytes = 500;
    if (eval_interval > 0 && steps_ % eval_interval == 0) {
      s.eval_loss = 20.0 / static_cast<double>(steps_);
      s.eval_tokens = 64;
    }
    return s;
  }
  absl::Status Drain() override {
    absl::MutexLock lock(&control_->mu);
    ++control_->drains;
    return absl::OkStatus();
  }
  int64_t completed_steps() const override { return steps_; }
  int64_t tokens_seen() const override { return tokens_; }
  ResumeReport resumed() const override { return resumed_; }
  const TrainConfig& config() const override { return config_; }
  const ModelConfig& model_config() const override { return model_; }
  int64_t num_parameters() const override { return 1000; }
  std::string WeightsDigest() override {
    std::string digest = std::to_string(digest_);
    absl::MutexLock lock(&control_->mu);
    if (control_->digest_bytes > 0) digest.resize(control_->digest_bytes, 'd');
    return digest;
  }
  // A fixed plan: the config's knobs, 2 ms predicted against the 1 ms fake steps, two
  // candidates of which the first is chosen.
  PlanReport Plan() const override {
    PlanReport r;
    r.available = true;
    r.knobs.micro_batch_size = config_.micro_batch_size;
    r.knobs.grad_accum = config_.grad_accum;
    r.knobs.policy = config_.policy;
    r.knobs.policy.kept_blocks = 1;
    r.blocks = 2;
    r.knobs.policy.resident_units = 1;
    r.units = 4;
    r.prediction.memory.resident = 1 << 20;
    r.prediction.step_seconds = 0.002;
    r.prediction.bottleneck = "gpu";
    r.prediction.busy = {{"gpu", 0.0015}, {"h2d", 0.0005}, {"cpu_update", 0.001}};
    r.prediction.critical = {{"gpu", 0.0015}, {"h2d", 0.0005}};
    r.prediction.exposed = {{"h2d", 0.0005}};
    r.prediction.critical_path = {{"h2d", "upload embedding", 0.0005}, {"gpu", "forward embedding .. backward embedding", 0.0015}};
    r.prediction.memory.total = 3 << 20;
    r.budget_bytes = 8 << 20;
    r.rates.gpu_update_params_per_s = 1.5e11;
    r.rates.cross_host_gbps = 12.5;
    r.rates.cross_host_latency_s = 2e-4;
    r.measured_step_seconds = steps_ > 0 ? 0.001 : 0.0;
    r.steps = steps_;
    r.last_change = "fake";
    Candidate chosen{r.knobs, r.prediction, true};
    Candidate other = chosen;
    other.knobs.policy.prefetch_depth += 1;
    other.prediction.step_seconds = 0.003;
    r.candidates = {chosen, other};
    return r;
  }
  absl::Status ExportHf(const std::string& dir) override {
    absl::MutexLock lock(&control_->mu);
    if (control_->fail_export) return absl::PermissionDeniedError("fake export failure");
    control_->exports.push_back(dir);
    return absl::OkStatus();
  }

 private:
  TrainConfig config_;
  ModelConfig model_;
  std::shared_ptr<FakeControl> control_;
  int64_t steps_ = 0;
  int64_t tokens_ = 0;
  ResumeReport resumed_;
  uint64_t digest_ = 7;
};

// A JobManager over the job store at `db`, with `factory`, specs translated without
// path checks, and every step persisted (persist_interval 0); `metrics` may be null.
struct ManagerOnStore {
  std::unique_ptr<JobStore> store;
  std::unique_ptr<JobManager> manager;  // uses `store`: destroy it first
};
inline absl::StatusOr<ManagerOnStore> OpenManagerOnStore(const std::string& db, TrainerFactory factory,
                                                         Metrics* metrics = nullptr) {
  ManagerOnStore m;
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db);
  if (!store.ok()) return store.status();
  m.store = *std::move(store);
  JobManagerOptions options;
  options.store = m.store.get();
  options.trainer_factory = std::move(factory);
  options.translator = [](const v1::JobSpec& spec) -> absl::StatusOr<TrainConfig> {
    return JobSpecToTrainConfigUnchecked(spec);
  };
  options.metrics = metrics;
  options.persist_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<JobManager>> manager = JobManager::Start(std::move(options));
  if (!manager.ok()) return manager.status();
  m.manager = *std::move(manager);
  return m;
}

// A TrainerFactory that makes FakeTrainers sharing `control`.
inline TrainerFactory FakeFactory(std::shared_ptr<FakeControl> control) {
  return [control](const TrainConfig& config,
                   std::shared_ptr<const StopToken>) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    absl::MutexLock lock(&control->mu);
    ++control->creates;
    control->created_models.push_back(config.model);
    control->created_configs.push_back(config);
    auto released = [&control]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control->mu) {
      return !control->hold_create;
    };
    control->mu.Await(absl::Condition(&released));
    if (control->fail_create) return absl::InvalidArgumentError("fake: cannot create");
    return std::unique_ptr<Trainer>(new FakeTrainer(config, control));
  };
}

}  // namespace slidedp::server::testing
