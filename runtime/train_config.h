// TrainConfig: everything one training job needs, as plain data. Parsed from YAML or
// JSON by slidedp-train and the CLI, translated from the API's JobSpec by the daemon;
// its fields are listed once, in train_config_fields.h.
// Plain data; no threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/train_config_enums.h"

namespace slidedp {

struct DataConfig {
  // synthetic: the built-in corpus with learnable structure (no path).
  // tokens:    flat binary token file (`path`, `token_dtype` uint16 or uint32).
  // jsonl:     JSON lines, each an array of token ids or {"tokens": [...]}.
  // Text, tokenized with `tokenizer` (runtime/data/document_encoder.h):
  // text:      JSON lines {"text": ...}, loss on every token.
  // prompt_completion: {"prompt": ..., "completion": ...}, loss on the completion.
  // chat:      {"messages": [{"role": ..., "content": ...}]} in the model family's chat
  //            format, loss on the assistant messages.
  DataFormat format = DataFormat::kSynthetic;
  std::string path;
  TokenDtype token_dtype = TokenDtype::kUint16;
  bool shuffle = true;
  // Text formats: a tokenizer.json or a directory holding one; empty: the model
  // directory's (a preset has none).
  std::string tokenizer;
  // Text formats: where token caches go; empty: `.slidedp-cache` beside the data file,
  // else $XDG_CACHE_HOME/slidedp (~/.cache/slidedp) when that is not writable.
  std::string cache_dir;
  // Text formats: skip (and count) malformed lines instead of failing on the first.
  bool skip_bad_lines = false;
  // Fill TokenBatch.positions (position inside the document) so that attention and
  // RoPE restart at document boundaries. Formats with documents: jsonl and the text ones.
  bool document_mask = false;
  // Held-out evaluation data in `format`, never shuffled; empty: none.
  std::string eval_path;
};

struct OptimizerConfig {
  double lr = 3e-4;
  double min_lr_ratio = 0.1;   // cosine/linear decay to lr * min_lr_ratio
  int64_t warmup_steps = 0;
  LrScheduleKind schedule = LrScheduleKind::kCosine;  // constant | linear | cosine
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0 disables clipping
  // How AdamW's m and v are stored in host memory (runtime/state/moment_codec.h):
  // "fp32" (8 bytes a parameter), "bf16" (4), "int8" (8-bit codes with an fp32 scale per
  // 256 elements, about 2). The update's math is fp32 in every case.
  MomentDtype state_dtype = MomentDtype::kFp32;
};

// Elements per quantization block of int8 moments (one fp32 scale each); the update
// works on whole blocks, so policy.chunk_elems is a multiple of it with int8 moments.
inline constexpr int64_t kInt8MomentBlock = 256;

struct PolicyConfig {
  int64_t chunk_elems = 0;          // 0: one chunk per unit
  int prefetch_depth = 1;           // units fetched ahead of compute
  ParamRoute param_route = ParamRoute::kReplicate;
  GradRoute grad_route = GradRoute::kGatherHost;
  // Where layer inputs wait for backward: device | host | auto (host when one step's
  // inputs would take more than 40% of the GPU's memory, or the least plan keeping them
  // there is predicted over policy.gpu_memory_budget_bytes; activation_policy.h).
  ActivationPlacement activations = ActivationPlacement::kAuto;
  int64_t loss_chunk_tokens = 1024;         // sequence positions per LM-head chunk
  // Sequence positions per MLP tile (its [rows, tile, FFN] intermediates are the largest
  // tensors of a block; tiles are recomputed in backward). 0: the whole sequence while
  // one intermediate fits in 1 GiB, else the tile that does (AutoMlpTile).
  int64_t mlp_tile_tokens = 0;
  // Decoder blocks that keep what their backward needs from forward to backward instead
  // of recomputing their forward there: the last ones, which run micro-batch-major with
  // the head (each micro-batch through them, the loss and back: one micro-batch's graph
  // held at a time; runtime/plan/step_schedule.h). -1: auto, as many as the GPU memory budget
  // leaves room for (runtime/plan/activation_policy.h's KeptBlocks; none on the cpu
  // device, whose activations are host memory); 0: every block recomputes; N: the last
  // N (all when N >= the layers).
  int64_t kept_blocks = -1;
  // Units whose whole training state (fp32 master and gradient, m and v: 16 bytes a
  // parameter with fp32 moments, about 10 with int8; their parameters cast from the
  // master into a slot when used) lives on a GPU instead of host memory: not streamed,
  // their gradient not copied down, updated there by the same AdamW arithmetic
  // (runtime/engine/resident_state.h). The first units of the forward (embedding =
  // unit 0, block i = unit i + 1, the head last), whose CPU update is the one the next
  // forward waits for. -1: auto, as many as the policy finds worth the GPU memory the
  // plan leaves within the budget (none on the cpu device and over several hosts); 0:
  // none; N: the first N (all when N >= the units; over several hosts a replica on
  // every host, the same N in each host's spec; there optimizer.state_dtype fp32).
  int64_t resident_units = -1;
  // Streamed units whose AdamW a GPU runs instead of the CPU, beside the CPU's updates of
  // the others: the last N units of the forward that are not resident (the head, the
  // blocks before it); their master, m and v and landed gradient are copied to the GPU
  // chunk by chunk, updated by the resident units' kernels (the CPU's arithmetic, bit
  // for bit) and copied back with the new streamed copy (runtime/engine/staged_updates.h),
  // so the next forward waits for the slower of the two. Two chunks' buffers on each
  // GPU. 0 (default): none; not over several hosts. The step model does not predict them
  // yet (as if the CPU ran them): set by hand, measured with step_bench.
  int64_t staged_updates = 0;
  int update_threads = 0;                   // CPU AdamW threads, 0: all cores
  // Where gradients land in host memory: "fp32" (a 4-byte buffer per parameter),
  // "bf16" (in the streamed bf16 copy: 14 bytes per parameter in all, needs bf16
  // compute and a route whose devices reduce, i.e. not gather_host with several
  // workers), "auto" (bf16 on cuda where allowed, else fp32).
  GradLanding grad_landing = GradLanding::kAuto;
  // The policy manager (runtime/plan/): with `auto`, the job calibrates at start, picks
  // micro_batch_size/grad_accum (same global batch), prefetch_depth, activations and
  // the routes that fit the GPU memory budget and minimize the predicted step time,
  // re-plans when the measured step time drifts from the prediction by more than
  // replan_threshold (relative), and on a GPU out-of-memory shrinks the plan and
  // retries the step. Off: the knobs above as given (the step time is still predicted).
  bool auto_plan = false;                   // "policy.auto" in job files
  int64_t gpu_memory_budget_bytes = 0;      // per GPU; 0: the device's free memory
  double replan_threshold = 0.15;
};

// A job over several hosts (issue 24): each host runs this engine on its own GPUs and
// its rows of every batch, and holds 1/count of the optimizer state; they meet through
// PyTorch's c10d (a TCPStore at address:port on host 0, Gloo between the hosts'
// memories), as torchrun's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK.
struct HostsConfig {
  int count = 1;                  // hosts of the job; 1: this host alone
  int rank = 0;                   // this host's, 0 .. count-1 (host 0 serves the rendezvous)
  std::string address;            // host 0's address; needed when count > 1
  int port = 29500;               // host 0's rendezvous port
  double timeout_seconds = 300;   // rendezvous, and any exchange between the hosts
};

struct TrainConfig {
  std::string model = "tiny";   // a preset name or a Hugging Face model directory
  DataConfig data;
  int64_t seq_len = 128;
  int64_t micro_batch_size = 4;  // sequences per micro-batch
  int64_t grad_accum = 1;        // micro-batches per worker per step
  int workers = 1;               // data-parallel workers (GPUs, or CPU threads on the CPU device)
  DeviceKind device = DeviceKind::kCpu;
  ComputeDtype compute_dtype = ComputeDtype::kFp32;  // bf16 always on cuda
  int64_t steps = 100;
  OptimizerConfig optimizer;
  uint64_t seed = 1234;
  std::string checkpoint_dir;     // empty: no checkpoints
  int64_t checkpoint_interval = 0;
  int keep_checkpoints = 3;
  // A checkpoint file, or a directory whose newest checkpoint is taken; empty: start
  // from the model. The checkpoint's job must match this one in everything that shapes
  // the trajectory (model, data, batch, steps, optimizer, seed).
  std::string resume_from;
  // The run this job is, recorded in every checkpoint it writes: a resume refuses a
  // checkpoint of another run (naming both) and pruning deletes only this run's. The
  // daemon sets it to the job id; not a job-file field (slidedp-train leaves it empty:
  // its checkpoints have no run id, and it may resume from any checkpoint).
  std::string run_id;
  int max_bad_steps = 5;          // non-finite steps in a row before the job fails
  std::string output_dir;         // empty: no export
  PolicyConfig policy;
  int64_t log_every = 1;
  double collective_timeout_seconds = 600;  // a GPU collective not done by then fails the job
  std::string trace_file;         // non-empty: write a Chrome-trace JSON of every step there
  int64_t eval_interval = 0;      // steps between evaluations on data.eval_path; 0: none
  int64_t eval_batches = 8;       // batches (of global_batch_sequences()) per evaluation
  HostsConfig hosts;

  // Sequences a step on this host (its workers'); the job's step takes hosts.count
  // times as many (job_batch_sequences), each host its own rows.
  int64_t global_batch_sequences() const { return micro_batch_size * grad_accum * workers; }
  int64_t job_batch_sequences() const { return global_batch_sequences() * hosts.count; }
  int64_t tokens_per_step() const { return global_batch_sequences() * seq_len; }
  // The dtype the model computes in: bf16 on cuda whatever compute_dtype says (the fp32
  // master weights stay on the host), compute_dtype on the CPU device.
  ComputeDtype computed_in() const { return device == DeviceKind::kCuda ? ComputeDtype::kBf16 : compute_dtype; }
};

// Checks ranges and enumerations; the error names the field.
absl::Status ValidateTrainConfig(const TrainConfig& config);

// Parses YAML (a superset of JSON). Unknown fields and wrong types are errors naming
// the field (nested fields as "optimizer.lr"). `source` names the file in messages.
// Text over kMaxJobFileBytes, or nested deeper than kMaxYamlNesting (runtime/io/
// json_nesting.h), is refused before YAML parsing.
absl::StatusOr<TrainConfig> ParseTrainConfig(std::string_view text, std::string_view source);

// How messages place a line of the file: " in job.yaml at line 3" (kProse) or
// " in job.yaml:3" (kFileColonLine, as compilers do; the CLI's style).
enum class LineStyle { kProse, kFileColonLine };

// A parsed job file: the config, and the fields the file sets (full names, sections
// included, e.g. "optimizer" and "optimizer.lr") with the line of each.
struct JobFile {
  TrainConfig config;
  std::map<std::string, int> lines;
};

// ParseTrainConfig, with the fields the file sets and messages in `style`.
absl::StatusOr<JobFile> ParseJobFile(std::string_view text, std::string_view source, LineStyle style);
absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);

// JSON with every field, for logs and checkpoints.
std::string TrainConfigToJson(const TrainConfig& config);

}  // namespace slidedp
