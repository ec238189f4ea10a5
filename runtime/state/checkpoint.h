// Checkpoint: one job's training state on disk, so that a run can stop (pause, cancel,
// daemon crash) and continue bit-exactly: per unit the fp32 master weights and AdamW
// moments m and v, plus the step, the AdamW step count, the data cursor, the seed (the
// only random state the engine has: initialization and shuffling derive from it) and
// the job's config. One file per checkpoint, "<dir>/ckpt-<step, 9 digits>.slidedp":
//   "SLDPCKPT" | u32 version | u32 0 | u64 header bytes | header (JSON) |
//   per unit: master (numel little-endian fp32), m, v as stored (the header's
//   "moment_dtype", moment_codec.h: fp32, bf16, or int8 codes followed by m's and v's
//   block scales) | u64 checksum | "SLDPEND\0"
// The checksum covers every byte before it. A checkpoint is written to "<name>.tmp",
// fsynced, renamed into place and the directory fsynced, so a crash or a full disk at
// any point leaves the previous checkpoints as they were. No threads of its own; the
// functions may be called from any one thread per directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {

class StopToken;

inline constexpr int kCheckpointVersion = 1;

struct CheckpointMeta {
  int64_t step = 0;        // completed optimizer steps
  int64_t adam_steps = 0;  // AdamW steps applied (bias correction); skipped steps do not count
  int64_t tokens_seen = 0;
  int64_t skipped_steps = 0;     // steps skipped for a non-finite loss or gradient, in total
  int64_t bad_steps_in_row = 0;  // ... ending with this step
  uint64_t seed = 0;
  std::string data_cursor;  // Dataset::Cursor()
  std::string config_json;  // TrainConfigToJson of the job
  // The run that wrote it (TrainConfig::run_id; the daemon's job id). Empty: no run id
  // (slidedp-train, or a checkpoint written before run ids were recorded).
  std::string run_id;
};

// One unit's buffers: for writing they are read, for reading they are filled. `master`
// points at `numel` floats, `moments` at the unit's stored moments (every unit of a
// checkpoint has the same moment dtype).
struct CheckpointUnit {
  std::string name;  // UnitName: "embedding", "block 3", "head"; must match on reading
                    // (an older file's "block.3" reads as "block 3")
  int64_t numel = 0;
  float* master = nullptr;
  MomentView moments;
};

// fp32 moments m and v (numel floats each), as a CheckpointUnit's `moments`.
inline MomentView Fp32Moments(float* m, float* v) {
  MomentView mv;
  mv.m = m;
  mv.v = v;
  return mv;
}

// "<dir>/ckpt-000000120.slidedp" for step 120.
std::string CheckpointPath(const std::string& dir, int64_t step);

// Writes a checkpoint of `meta` and `units` into `dir` (created if missing), then
// deletes all but the `keep` newest checkpoints of the same run (meta.run_id; the one
// just written is always kept; checkpoints of other runs, and files whose header does
// not read, are never deleted) and any leftover "*.tmp" file. Returns the path written. On any failure (e.g. ENOSPC, EFBIG) the partial file is removed,
// the previous checkpoints are untouched, and the error names the file and the cause.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                            const std::vector<CheckpointUnit>& units, int keep);

// The checkpoints in `dir`, oldest (lowest step) first; files being written (".tmp")
// and other names are ignored. An absent directory has none.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& dir);

// The newest checkpoint in `dir`; NOT_FOUND if it has none. It may not verify: a resume
// tries the newest first and passes over those that do not (EngineTrainer::Restore).
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// The checkpoint a resume from `dir` starts from unless its payload turns out corrupt:
// the newest whose header reads, with its meta in `*meta`. NOT_FOUND when `dir` holds no
// checkpoint whose header reads (or none at all). Reads headers only (cheap).
absl::StatusOr<std::string> NewestReadableCheckpoint(const std::string& dir, CheckpointMeta* meta);

// Reads only the header of checkpoint `path` (cheap): its meta. Not verified against
// the checksum (ReadCheckpoint does that); a header that does not parse is DATA_LOSS.
absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path);

// Reads checkpoint `path` into `units`, whose names, sizes and moment dtype must match
// the file's (else FAILED_PRECONDITION naming the unit, or both dtypes). A truncated file or a wrong checksum is
// DATA_LOSS naming the file. On error the buffers may be partly overwritten. `stop`
// (may be null) is checked every 64 MiB: CANCELLED when it asks to stop.
absl::StatusOr<CheckpointMeta> ReadCheckpoint(const std::string& path,
                                              const std::vector<CheckpointUnit>& units,
                                              const StopToken* stop = nullptr);

}  // namespace slidedp
