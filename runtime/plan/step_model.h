// StepModel: the analytic step-time model of DESIGN.md ("Step-time model and policy").
// From a model's shape, the job's batch, a plan (the knobs) and measured rates it
// replays the step as the engine runs it (the StepSchedule that runtime/engine/worker.cc
// executes, and update_pipeline.cc): the worker thread issuing fetches, compute, offloads and
// landings onto the H2D, compute, D2H and collective streams, blocking where the engine
// blocks (a fetch waits for the unit's update of the previous step); the update thread
// running AdamW earliest deadline first, after the last landing (clipping) or as each
// unit lands (no clipping). Units resident on a GPU (policy.resident_units,
// runtime/plan/residency.h) are neither uploaded nor landed: with several workers the
// owner broadcasts their parameters and the others reduce their gradient to it over the
// collective stream; their update runs on the owner's GPU update stream, launched by the
// update thread ahead of the streamed units' CPU updates, and the next forward waits only
// for it. With several hosts (JobShape::hosts, hosts.count) each host replays its own
// engine on its rows; a unit that has landed is reduce-scattered over the hosts on the
// link thread (in landing order, on the network) before it counts as landed, the update
// thread updates the host's 1/H shard of it and the gather thread then all-gathers the
// streamed copy (on the network, in update order; the next forward's fetch waits for
// it, the next update does not), the
// exchanges' own copies and sums in host memory (host_group.cc's) count against host
// memory, and gradients land in fp32. Three steps are replayed and the last one is
// measured: its duration, each resource's busy time, the critical path (walked back through the
// dependency that started each operation), the bottleneck (the resource with most time
// on that path), the GPU's idle time by cause, and the plan's GPU memory.
// Pure C++ (no LibTorch); stateless functions, any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/step_schedule.h"
#include "runtime/train_config.h"

namespace slidedp {

// Resource names, as StepStats::bottleneck and slidedp_bottleneck{resource} use them.
inline constexpr const char* kResGpu = "gpu";
inline constexpr const char* kResH2d = "h2d";
inline constexpr const char* kResD2h = "d2h";
inline constexpr const char* kResCollective = "collective";
inline constexpr const char* kResCpuUpdate = "cpu_update";
// The update stream of the GPU that owns resident units (their AdamW); on the cpu device
// resident updates run on the update thread (kResCpuUpdate).
inline constexpr const char* kResGpuUpdate = "gpu_update";
inline constexpr const char* kResHostMemory = "host_memory";
// The network between hosts (JobShape::hosts > 1): the reduce-scatter of each landed
// unit's fp32 gradient and the all-gather of each updated unit's streamed copy.
inline constexpr const char* kResNetwork = "network";

struct ModelShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t ffn = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool tied = false;
  std::vector<int64_t> unit_params;  // [embedding, block 0..L-1, head]: the engine's units

  int64_t total_params() const;
  int num_units() const { return static_cast<int>(unit_params.size()); }
};

// The shape of `config` with the engine's unit split (runtime/model/param_layout.h).
ModelShape ShapeOf(const ModelConfig& config);

// The job's batch and the fixed facts of its engine, on one host.
struct JobShape {
  int64_t sequences = 0;  // this host's batch, sequences a step (the job's: hosts times it)
  int64_t seq_len = 0;
  int workers = 1;
  bool clip = true;       // optimizer.max_grad_norm > 0
  bool cuda = true;       // false: the CPU device (compute and copies on the worker's thread)
  int param_bytes = 2;    // bytes of the streamed copy per parameter (2: bf16, 4: fp32)
  // Host bytes the CPU update moves per parameter: the master and the streamed copy
  // (gradient in, parameter out) read and written, 12, and m and v as
  // optimizer.state_dtype stores them, read and written: 28 (fp32), 20 (bf16), ~16 (int8).
  double update_bytes_per_param = 28.0;
  // optimizer.state_dtype is fp32: units may be resident on a GPU (policy.resident_units
  // needs it).
  bool fp32_moments = true;
  // Hosts of the job (hosts.count), each running this shape on its own rows and holding
  // 1/hosts of the master, m and v (the CPU update's work and its host traffic divided).
  int hosts = 1;
};

// The knobs a plan sets.
struct PlanKnobs {
  int64_t micro_batch_size = 1;
  int64_t grad_accum = 1;
  PolicyConfig policy;  // chunk_elems, prefetch_depth, routes, activations, loss chunk, ...
};

// Measured (or assumed) rates. GPU times are per token per decoder layer at the job's
// seq_len; transfer rates per GPU in GB/s (1e9 bytes).
struct Rates {
  double h2d_gbps = 54.5;          // pinned host -> device, alone
  double d2h_gbps = 55.1;          // pinned device -> host, alone
  double duplex_gbps = 78.5;       // both directions at once, the two together
  double collective_gbps = 150.0;  // NCCL bus bandwidth per GPU
  double forward_s = 0.0;          // per token per layer
  double recompute_s = 0.0;
  double backward_s = 0.0;         // backward only (recompute excluded)
  double head_s = 0.0;             // per token: final norm, logits, loss, and their backward
  double embed_s = 0.0;            // per token: embedding forward + its scatter-add backward
  double grad_s_per_param = 0.0;   // per unit and step: zeroing, fp32 accumulation, landing
  double launch_s = 0.0;           // per micro-batch per unit pass: launches, small kernels
  double adamw_params_per_s = 3.6e9;  // CPU AdamW on the update thread, all its threads
  double host_memory_gbps = 150.0;    // read + write bytes per second
  // AdamW of resident units on their GPU's update stream, parameters per second: a fused
  // kernel moving ~30 bytes a parameter (fp32 master, m, v read and written, the fp32
  // gradient read, the compute copy written) at HBM bandwidth. On the cpu device the
  // CPU AdamW rate.
  double gpu_update_params_per_s = 1.2e11;
  // Between hosts (JobShape::hosts > 1): one host's network bandwidth, each direction at
  // once, GB/s (50: 400 Gb/s; on the cpu device 5, loopback), and the latency of one
  // exchange (one Gloo collective: a unit's reduce-scatter takes two, its norm's sum).
  double cross_host_gbps = 50.0;
  double cross_host_latency_s = 1e-4;
};

// Rates without measurements: the H200 host's (../GPU_HOST.md, tests/bench/RESULTS.md)
// for cuda (the GPU update: 30 bytes a parameter at about 3.6 TB/s of the H200's HBM), with GPU times scaled from the qwen2.5-3b trace by FLOPs per token; rough
// figures for the CPU device. Calibration replaces them at job start.
Rates DefaultRates(const ModelShape& shape, const JobShape& job);

// Forward FLOPs per token of one decoder block at `seq_len` (causal attention).
double BlockForwardFlopsPerToken(const ModelShape& shape, int64_t seq_len);

// Sequence positions per MLP tile the engine will use for `knobs` (job.seq_len or more:
// whole): runtime/plan/activation_policy.h's ChooseMlpTile.
int64_t MlpTile(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// The MLP's share of one block's forward FLOPs at `seq_len` (what tiles recompute).
double MlpShare(const ModelShape& shape, int64_t seq_len);

// Bytes autograd keeps from a decoder block's forward to its backward when the block
// keeps its graph (policy.kept_blocks), for the tokens one worker computes a step (every
// micro-batch: the forward is layer-major), as the CUDA device's fused path saves them:
// the block's input, the two norms' outputs, q and k before and after their norm and
// RoPE, v, attention's output (and its transposed copy), the residual sum, and the
// MLP's gate and up (its product is recomputed in backward; only the MLP's input when it
// runs in tiles), in the compute dtype; the norms' and attention's fp32 statistics.
int64_t KeptBlockBytes(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// The number of decoder blocks that keep their graph for `knobs` (the last ones):
// policy.kept_blocks when >= 0 (at most the layers). For -1 (auto): none on the cpu
// device (its activations are host memory); on cuda the most whose EstimateMemory fits
// in 90% of `memory_bytes`, all of them when `memory_bytes` is 0 (no limit known).
// EstimateMemory counts the resident units of knobs.policy.resident_units, so kept
// blocks get what they leave (-1 counts as none: resolve it first, ResidentUnits).
int64_t KeptBlocks(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes);

// The number of units resident on a GPU for `knobs` (the first ones, forward order;
// runtime/plan/residency.h places them): policy.resident_units when >= 0 (at most the
// units). For -1 (auto): none on the cpu device, without fp32 moments and over several
// hosts (the engine refuses them there); on cuda the
// count with the least predicted step time (PredictStep with `rates`) among none and
// eighths of the most that fit: whose resident bytes (on the rank holding most) and the
// EstimateMemory of the plan with no kept blocks fit in 90% of `memory_bytes` (all
// units when `memory_bytes` is 0, no limit known). Kept blocks and resident units
// compete for the same memory: with policy.kept_blocks -1 each count is predicted with
// the kept blocks KeptBlocks leaves it, so the pair is chosen jointly; ties go to fewer
// resident units. The engine resolves the kept blocks after this, with the count
// returned, and gets the same pair.
int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes,
                      const Rates& rates);
// As above with DefaultRates(shape, job).
int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes);

// Predicted GPU memory of a plan on one worker, in bytes. The same for every
// JobShape::hosts but for the bf16 landing buffers, which several hosts do not use.
struct MemoryEstimate {
  int64_t slots = 0;         // prefetch_depth + 2 parameter slots of the largest unit
  int64_t grad_buffers = 0;  // fp32 accumulators, landing buffers
  int64_t activations = 0;   // saved block inputs (device placement) or those in flight, and
                             // the graphs of the blocks that keep them (KeptBlockBytes each)
  int64_t working = 0;       // one micro-batch through one block, hidden states, their grads
  int64_t loss_chunk = 0;    // logits of one loss chunk, the LM head's gradient
  int64_t margin = 0;        // CUDA context, allocator
  int64_t resident = 0;      // resident units' state on the rank holding most (ResidentBytesPerParam each)
  int64_t total = 0;
};

// One resource's time on the step's critical path, in order.
struct PathSegment {
  std::string resource;
  std::string what;  // e.g. "update block 3", "backward block 7"
  double seconds = 0.0;
};

struct StepPrediction {
  double step_seconds = 0.0;       // steady state (the third replayed step)
  double first_step_seconds = 0.0; // the first step, parameters ready at its start
  std::string bottleneck;          // the resource with most time on the critical path
  std::map<std::string, double> busy;      // resource -> busy seconds a step (per GPU for GPU
                                           // resources; the network's per host, both threads')
  std::map<std::string, double> critical;  // resource -> seconds on the critical path
  std::map<std::string, double> exposed;   // cause -> seconds the GPU's compute stream idles
  double fill_seconds = 0.0;   // step start to the first unit's compute: the previous step's
                               // update of unit 0 and its upload
  double drain_seconds = 0.0;  // last compute to the step's end: the last gradient's landing
  std::vector<PathSegment> critical_path;  // consecutive segments of one resource merged
  int64_t h2d_bytes = 0;       // per worker and step
  int64_t d2h_bytes = 0;
  int64_t network_bytes = 0;   // per host and step, sent to the other hosts (as many received)
  int64_t resident_params = 0; // parameters updated on a GPU (resident units); the CPU
                               // update thread updates the others
  MemoryEstimate memory;
};

// Predicts the step of `knobs` for `job` on `shape` with `rates`. policy.kept_blocks -1
// counts as KeptBlocks(..., 0) (the engine resolves it against the GPU's memory; the
// trainer and the policy pass the count it runs with). policy.resident_units -1 counts
// as none, not as ResidentUnits(..., 0): resolving it predicts steps itself, and with
// no memory limit it would make every unit resident, far from what a GPU holds; the
// trainer (PlanManager::SetResidentUnits) and the policy pass the count the engine
// runs with.
StepPrediction PredictStep(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs,
                           const Rates& rates);

// policy.resident_units -1 counts as none here too.
MemoryEstimate EstimateMemory(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// The resident units of `knobs` (policy.resident_units; -1 counts as none) placed on
// the job's workers (runtime/plan/residency.h's PlaceResident).
Residency ResidencyOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs);

// The slot events (fetch, take, release of the StepSchedule's items) of one replayed
// step, in the order the replay issues them: the engine's worker issues
// StepSchedule::Events(), and a test checks that the two agree.
std::vector<StepSchedule::Event> ReplaySlotEvents(const ModelShape& shape, const JobShape& job,
                                                  const PlanKnobs& knobs);

// Whether gradients land in bf16 in the streamed copy with these knobs (grad_landing
// "auto" resolved as runtime/engine/trainer.cc does; never over several hosts).
bool Bf16Landing(const JobShape& job, const PolicyConfig& policy);

}  // namespace slidedp
