// Translation between the API's slidedp.v1.JobSpec and the engine's TrainConfig.
// Unset (proto3 optional) fields take the TrainConfig defaults. Stateless; any thread.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/train_config.h"
#include "server/path_policy.h"
#include "server/peer_policy.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::server {

// Longest string accepted in any spec field (paths included).
inline constexpr size_t kMaxSpecStringBytes = 4096;

// `spec` with every field the daemon knows: INVALID_ARGUMENT naming the field when it
// carries unknown fields (a client built from a newer .proto) or an over-long string.
absl::Status CheckSpecWellFormed(const v1::JobSpec& spec);

// The TrainConfig `spec` asks for: defaults applied, ValidateTrainConfig passed
// (INVALID_ARGUMENT naming the field), the model a preset or a directory under the
// model roots, data/checkpoint/output paths under their roots and, for a job of several
// hosts, its rendezvous allowed by `peers` (PERMISSION_DENIED otherwise), the paths made
// canonical.
absl::StatusOr<TrainConfig> JobSpecToTrainConfig(const v1::JobSpec& spec, const PathPolicy& paths,
                                                 const PeerPolicy& peers = PeerPolicy::None());

// A stored job's spec (validated by JobSpecToTrainConfig when it was submitted) as the
// config to run: JobSpecToTrainConfig without validating the values again, but with the
// path and peer checks again (the files may have changed since, the roots and the
// allowed hosts with a restart). Trainer::Create checks the config it is given.
absl::StatusOr<TrainConfig> StoredSpecToTrainConfig(const v1::JobSpec& spec, const PathPolicy& paths,
                                                    const PeerPolicy& peers = PeerPolicy::None());

// Defaults only, no validation and no path checks (for tests and round trips).
TrainConfig JobSpecToTrainConfigUnchecked(const v1::JobSpec& spec);

// Where job `job_id` keeps its checkpoints: its own directory inside the spec's
// `checkpoint_dir` ("<checkpoint_dir>/<job_id>"), so that jobs naming the same
// checkpoint_dir never prune or continue from each other's checkpoints.
std::string JobCheckpointDir(const std::string& checkpoint_dir, const std::string& job_id);

// Binds `config` (translated from job `job_id`'s spec) to the job: run_id is the job id
// (recorded in its checkpoints, checked on resume) and, when it has a checkpoint_dir,
// checkpoints go to JobCheckpointDir. The job's spec keeps the checkpoint_dir as given.
void BindConfigToJob(const std::string& job_id, TrainConfig* config);

// Every field set, so that the result shows the defaults that were applied.
v1::JobSpec TrainConfigToJobSpec(const TrainConfig& config);

// What a job keeps and shows of `spec`: the spec as submitted (paths as given; the
// job resolves them when it starts), each field it leaves unset shown with its default.
v1::JobSpec SpecAsSubmitted(const v1::JobSpec& spec);

}  // namespace slidedp::server
