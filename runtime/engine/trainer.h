// Trainer: one training job on the engine. Owns the host state, the workers (devices),
// the dataset and the update pipeline. Step() runs one optimizer step of DESIGN.md's
// step; it is called from one thread at a time (the job's thread). Updates of the last
// step may still be running on the update thread when Step() returns; Drain() waits.
// With an eval dataset (TrainerInputs), Step() also evaluates on held-out data every
// eval interval (see EvalOptions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/data/dataset.h"
#include "runtime/io/stop_token.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/plan_report.h"
#include "runtime/train_config.h"

namespace slidedp {

// One worker's device figures for a step (bytes this worker moved; memory of its GPU).
struct WorkerDeviceStats {
  int64_t h2d_bytes = 0;              // parameter bytes host -> this device
  int64_t d2h_bytes = 0;              // gradient bytes this device -> host
  double h2d_busy_seconds = 0.0;      // time its H2D stream was copying (0 if unmeasured)
  double d2h_busy_seconds = 0.0;      // time its D2H stream was copying (0 if unmeasured)
  int64_t memory_allocated_bytes = 0; // device memory held by the engine at step end (0 on cpu)
  int64_t memory_peak_bytes = 0;      // peak device memory during the step (0 on cpu)
  int64_t memory_reserved_peak_bytes = 0;  // peak held by the caching allocator (allocated plus
                                           // its cached and fragmented blocks; 0 on cpu)
  int64_t memory_total_bytes = 0;     // the device's capacity (0 on cpu)
};

struct StepStats {
  int64_t step = 0;             // number of completed steps, this one included (1-based)
  double loss = 0.0;            // mean token loss over the global batch
  double grad_norm = 0.0;       // global gradient L2 norm before clipping
  double lr = 0.0;              // learning rate applied by this step's update
  int64_t tokens = 0;           // tokens with a loss in this step
  double step_seconds = 0.0;    // wall time of Step()
  double tokens_per_second = 0.0;
  bool skipped = false;         // non-finite loss or gradient: no update was applied
  int bad_unit = -1;            // skipped: the first unit with a non-finite gradient, or -1
  std::string bad_unit_name;    // ... as "embedding", "block 3", "head" (UnitName)
  int64_t bad_steps_in_row = 0; // skipped steps in a row ending with this one
  std::string checkpoint_path;  // the checkpoint written after this step, if any
  double checkpoint_seconds = 0.0;  // time it took (not in step_seconds)
  // Held-out evaluation after this step (EvalOptions): the mean loss over the eval
  // batches' target tokens, with the weights this step produced. Absent (nullopt, and
  // eval_tokens 0) at steps without an evaluation. NaN when the eval batches held no
  // target token.
  std::optional<double> eval_loss;
  int64_t eval_tokens = 0;      // target tokens evaluated
  double eval_seconds = 0.0;    // time it took (not in step_seconds)
  // Parts of the step (seconds, summed over workers where parallel).
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double update_wait_seconds = 0.0;  // workers waiting for CPU updates of the previous step
  double update_busy_seconds = 0.0;  // CPU AdamW time of this step's updates
  int64_t h2d_bytes = 0;             // parameter bytes to devices (all workers)
  int64_t d2h_bytes = 0;             // gradient bytes to the host (all workers)
  // Several hosts: bytes this host sent to the others during the step (its slices of
  // each unit's gradient reduce-scatter and of its updated copy's all-gather, norms,
  // losses); 0 on one host.
  int64_t host_bytes_sent = 0;
  std::vector<WorkerDeviceStats> workers;  // per worker (GPU), in rank order
  // The step-time model's prediction for this step's knobs and its bottleneck resource
  // ("gpu", "h2d", "d2h", "collective", "cpu_update", "host_memory"; runtime/plan/).
  double predicted_step_seconds = 0.0;
  std::string bottleneck;
};

// Held-out evaluation: after every `interval` steps and after the last step (step ==
// TrainConfig::steps), a forward-only pass (no gradient, no update, no change to the
// training state or its data order) over `batches` batches of
// TrainConfig::global_batch_sequences() rows of `dataset`, split over the workers as
// training batches are. Each evaluation restarts the dataset where it stood when the
// trainer was created (Dataset::Cursor/Restore), so every evaluation sees the same
// batches. Reported in StepStats::eval_loss.
struct EvalOptions {
  std::unique_ptr<Dataset> dataset;  // null: no evaluation
  int64_t interval = 0;              // >= 0; 0: after the last step only
  int64_t batches = 1;               // >= 1
};

// Where a trainer created with TrainConfig::resume_from continued from.
struct ResumeReport {
  std::string path;   // the checkpoint file its state came from; empty: not resumed
  int64_t step = 0;   // ... at this step
  // resume_from a directory: its newer checkpoints that failed verification (corrupt or
  // truncated) and were passed over, newest first, each as its DATA_LOSS message (which
  // names the file and what is wrong with it).
  std::vector<std::string> passed_over;
};

// What the trainer reads besides its config.
struct TrainerInputs {
  std::unique_ptr<Dataset> train;  // null: OpenDataset(config.data, ...)
  EvalOptions eval;
  // Asks the trainer to stop early (a cancel, a shutdown); null: never. Create() (model
  // loading, tokenization, token caches, calibration) and Step() (its units, the
  // evaluation's batches) return CANCELLED within about a second of RequestStop().
  // After a CANCELLED Step() the trainer is left at its last completed step when the
  // step's updates could be held back (always with clipping), so that SaveCheckpoint()
  // still writes a consistent state; otherwise SaveCheckpoint() and ExportHf() are
  // FAILED_PRECONDITION. The trainer keeps the token alive.
  std::shared_ptr<const StopToken> stop;
};

// Every entry point below returns an exception thrown inside the engine (LibTorch, an
// allocation) as a status: RESOURCE_EXHAUSTED for a failed allocation, INTERNAL else.
class Trainer {
 public:
  // Validates the config, builds or loads the model, opens the data, allocates the host
  // state and per-worker buffers. Errors name the field or file at fault. Before any
  // allocation, a job whose host memory (runtime/engine/admission.h) exceeds what is
  // available now is RESOURCE_EXHAUSTED naming the numbers.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config);
  // The same with the training data and held-out evaluation given by the caller. Its
  // datasets must be for config.seq_len and the model's vocabulary; an eval interval
  // < 0 or eval batches < 1 is InvalidArgument.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config, TrainerInputs inputs);
  virtual ~Trainer() = default;

  // Runs the next optimizer step, then the held-out evaluation when one is due
  // (StepStats::eval_loss). A step with a non-finite loss or gradient applies no
  // update (StepStats.skipped); the config's max_bad_steps of them in a row fail the
  // step with FAILED_PRECONDITION naming the step and the unit. Every
  // checkpoint_interval steps it writes a checkpoint (StepStats.checkpoint_path); a
  // failed write fails the step (the previous checkpoints are kept).
  virtual absl::StatusOr<StepStats> Step() = 0;

  // Waits until every update issued so far has been applied to the host state.
  virtual absl::Status Drain() = 0;

  virtual int64_t completed_steps() const = 0;
  virtual const TrainConfig& config() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  virtual int64_t num_parameters() const = 0;

  // 64-bit FNV-1a digest of every unit's fp32 master weights (after Drain()), as 16 hex
  // digits: equal digests mean bit-identical weights.
  virtual std::string WeightsDigest() = 0;

  // Writes the trained weights as a Hugging Face directory (config.json,
  // model.safetensors or shards + index), after Drain().
  virtual absl::Status ExportHf(const std::string& dir) = 0;

  // Writes a checkpoint of the state after completed_steps() into the config's
  // checkpoint_dir (after Drain()), recording config.run_id, and keeps the run's
  // keep_checkpoints newest; returns the path. Create() with config.resume_from set
  // continues from one bit-exactly (runtime/state/checkpoint.h): from that file, or
  // from a directory's newest checkpoint that verifies (newer corrupt ones are passed
  // over and reported in resumed(); none verifying is DATA_LOSS naming each). With a
  // config.run_id, a checkpoint of another run is FAILED_PRECONDITION naming both.
  virtual absl::StatusOr<std::string> SaveCheckpoint() {
    return absl::UnimplementedError("this trainer cannot write checkpoints");
  }

  // Where Create() with resume_from continued from; empty path if it did not.
  virtual ResumeReport resumed() const { return ResumeReport(); }

  // Tokens with a loss in the completed steps (restored from a checkpoint).
  virtual int64_t tokens_seen() const { return 0; }

  // Several hosts (hosts.count): `mine` summed element-wise over every host, so that
  // all take the same decision between steps (the daemon's pause, resume, cancel and
  // shutdown). Every host must call it at the same point; one host: `mine`.
  virtual absl::StatusOr<std::vector<double>> AgreeOverHosts(std::vector<double> mine) { return mine; }

  // Bytes of host memory the training state takes on this host (over several hosts its
  // shard of the master, m and v, and the whole streamed copy and gradient).
  virtual int64_t host_state_bytes() const { return 0; }

  // The plan in use, its prediction beside the last measured step, and the policy's
  // candidates (runtime/plan/plan_report.h); not available from trainers without one.
  // From the job's thread, between steps.
  virtual PlanReport Plan() const { return PlanReport(); }

  // Runs the next steps with `knobs` (after the updates issued so far are applied),
  // whatever policy.auto says: for benchmarks that sweep plans over one host state.
  // INVALID_ARGUMENT for knobs the host state cannot serve (another global batch, a
  // gradient route that needs fp32 landing when gradients land in bf16).
  virtual absl::Status UsePlan(const PlanKnobs& knobs) {
    (void)knobs;
    return absl::UnimplementedError("this trainer has no plan to change");
  }
};

}  // namespace slidedp
