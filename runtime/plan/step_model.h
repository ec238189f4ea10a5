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
// memory, and gradients land as on one host (bf16 in the streamed copy where the devices
// reduce, so the reduce-scatter moves 2 bytes an element). A resident unit over several
// hosts: the link thread copies its fp32 gradient down from its GPU, sums it whole over
// the hosts (a reduce-scatter and an all-gather of 4 bytes an element) and copies it
// back up before its GPU update; nothing is gathered after. Three steps are replayed and the last one is
// measured: its duration, each resource's busy time, the critical path (walked back through the
// dependency that started each operation), the bottleneck (the resource with most time
// on that path), the GPU's idle time by cause, and the plan's GPU memory.
// Pure C++ (no LibTorch); stateless functions, any thread.
// The shapes and rates it reads are plan_shapes.h's, the GPU memory of a plan
// memory_estimate.h's; the replay itself is step_replay.h (internal).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/plan_shapes.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/step_schedule.h"

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
// unit's gradient (fp32 or bf16, as it landed) and the all-gather of each updated unit's streamed copy.
inline constexpr const char* kResNetwork = "network";
// The number of units resident on a GPU for `knobs` (the first ones, forward order;
// runtime/plan/residency.h places them): policy.resident_units when >= 0 (at most the
// units). For -1 (auto): none on the cpu device and over several hosts (each host
// would choose from its own GPUs, and their sums through host memory are predicted
// slower than streaming there); on cuda the count with the least predicted step time
// (PredictStep with `rates`) among none to the most that fit: whose resident bytes (on
// the rank holding most) and the EstimateMemory of the plan with no kept blocks fit in
// AutoCountsBytes(`memory_bytes`) (memory_estimate.h; all
// units when `memory_bytes` is 0, no limit known). Kept blocks and resident units
// compete for the same memory: with policy.kept_blocks -1 each count is predicted with
// the kept blocks KeptBlocks leaves it, so the pair is chosen jointly; ties go to fewer
// resident units. The engine resolves the kept blocks after this, with the count
// returned, and gets the same pair.
int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes,
                      const Rates& rates);
// As above with DefaultRates(shape, job).
int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes);

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
  int64_t staged_params = 0;   // streamed parameters whose update a GPU runs, staged
                               // (policy.staged_updates); the replay still counts their
                               // update as the CPU's (not modelled yet)
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

// The slot events (fetch, take, release of the StepSchedule's items) of one replayed
// step, in the order the replay issues them: the engine's worker issues
// StepSchedule::Events(), and a test checks that the two agree.
std::vector<StepSchedule::Event> ReplaySlotEvents(const ModelShape& shape, const JobShape& job,
                                                  const PlanKnobs& knobs);

}  // namespace slidedp
