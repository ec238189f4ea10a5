// StepReplay: the step model's replay of one engine step (step_model.h says what it
// models): operations on resources and threads with their start, end and cause, issued in
// the engine's order (the StepSchedule, the update and gather threads), and the costs of
// the exchanges between hosts. Internal to the step model (step_model.cc); one replay
// per call, on the caller's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/plan_shapes.h"
#include "runtime/plan/residency.h"
#include "runtime/plan/step_model.h"
#include "runtime/state/host_shards.h"
#include "runtime/plan/step_schedule.h"

namespace slidedp::step_model_internal {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------
// Exchanges between hosts (JobShape::hosts > 1), as runtime/engine/host_group.cc makes
// them over Gloo: every host's buffer is cut into slices by runtime/state/host_shards.h's
// rule; host 0's shard is the largest, and host 0 receives the most in a reduce-scatter
// and sends the most in an all-gather (the figures below are its).

inline int64_t ShardOf(int64_t numel, int hosts) { return HostShardOf(numel, hosts, 0).second; }

// Bytes one host sends (and receives) in the reduce-scatter of a unit's gradient
// (`grad_bytes` an element: 4 landed in fp32, 2 landed in bf16 in the streamed copy,
// GradBytes): the other hosts' slices (point-to-point sends).
inline int64_t ReduceScatterBytes(int64_t numel, int hosts, int grad_bytes) {
  return grad_bytes * ShardOf(numel, hosts) * (hosts - 1);
}
// ... in the all-gather of its streamed copy (`param_bytes` an element): its own slice
// to each of the others, theirs back.
inline int64_t AllGatherBytes(int64_t numel, int hosts, int param_bytes) {
  return param_bytes * ShardOf(numel, hosts) * (hosts - 1);
}

// Bytes of a landed gradient's element on the host: 2 where it lands in bf16
// (Bf16Landing), else 4.
inline int GradBytes(bool bf16_landing) { return bf16_landing ? 2 : 4; }

// Seconds on the network: the bytes each way at once at cross_host_gbps, and the
// latency of each collective (the reduce-scatter's sends and its norm's sum; the
// all-gather).
inline double ReduceScatterSeconds(int64_t numel, const JobShape& job, const Rates& r, int grad_bytes) {
  return 2 * r.cross_host_latency_s +
         static_cast<double>(ReduceScatterBytes(numel, job.hosts, grad_bytes)) / (r.cross_host_gbps * 1e9);
}
inline double AllGatherSeconds(int64_t numel, const JobShape& job, const Rates& r, int elem_bytes) {
  return r.cross_host_latency_s +
         static_cast<double>(AllGatherBytes(numel, job.hosts, elem_bytes)) / (r.cross_host_gbps * 1e9);
}
// A resident unit over several hosts: its owner's fp32 gradient summed whole on every
// host (a reduce-scatter, then an all-gather of the sum; no copy gathered after the
// update, each host's replica takes the same one): the bytes one host sends, the
// seconds on the network, and the host memory a parameter's exchange moves besides
// (ExchangeHostBytesPerParam's count for 4-byte elements both ways, and the gradient's
// copy down and back up).
inline int64_t ResidentSumBytes(int64_t numel, int hosts) {
  return ReduceScatterBytes(numel, hosts, 4) + AllGatherBytes(numel, hosts, 4);
}
inline double ResidentSumSeconds(int64_t numel, const JobShape& job, const Rates& r) {
  return ReduceScatterSeconds(numel, job, r, 4) + AllGatherSeconds(numel, job, r, 4);
}

// Host memory bytes a parameter's exchanges move on each host besides the network's own
// (what is sent read, what is received written: 2g for the reduce-scatter's g bytes an
// element, 2e for the all-gather's e). The reduce-scatter sends straight from the
// gradient and sums the received slices into the shard (reads g, writes g/H), then
// reads the shard for its squared norm (g/H); a bf16 gradient is summed through an fp32
// accumulator (written and read, 8/H). The all-gather broadcasts views of the streamed
// copy in place (nothing more).
inline double ReduceScatterCopyBytes(int hosts, int grad_bytes) {
  return grad_bytes + 2.0 * grad_bytes / hosts + (grad_bytes < 4 ? 8.0 / hosts : 0.0);
}
inline double AllGatherCopyBytes(int, int) { return 0.0; }
inline double ExchangeHostBytesPerParam(int hosts, int param_bytes, int grad_bytes) {
  return 2.0 * grad_bytes + ReduceScatterCopyBytes(hosts, grad_bytes) + 2.0 * param_bytes +
         AllGatherCopyBytes(hosts, param_bytes);
}
inline double ResidentSumHostBytesPerParam(int hosts) { return ExchangeHostBytesPerParam(hosts, 4, 4) + 8.0; }

// The exchanges' copies and sums in host memory, on the thread that runs the exchange
// (the link thread, the update thread): named host memory on the critical path.
inline constexpr const char* kExchangeCopy = "exchange copy";
// Per-thread lanes of the network: the link thread's reduce-scatters and the gather
// thread's all-gathers run at once (a Gloo group each).
inline constexpr const char* kLinkLane = "link thread";
inline constexpr const char* kGatherLane = "gather";

// ---------------------------------------------------------------------------------
// The replay.

struct Op {
  std::string resource;
  std::string what;
  double start = 0.0;
  double end = 0.0;
  int cause = -1;  // the operation whose end started this one; -1: the replay's origin
};

class Replay {
 public:
  // Adds an operation on `resource` lasting `seconds`, starting when `resource` is free
  // and every operation of `deps` (indices, -1 ignored) has ended, not before `host`
  // (the issuing thread's time and the op that set it). Operations of one `lane` (the
  // resource when null) run one at a time, in the order they are added. Returns its index.
  int Add(const std::string& resource, std::string what, double seconds, std::initializer_list<int> deps,
          double host, int host_cause, const char* lane = nullptr) {
    Op op;
    op.resource = resource;
    op.what = std::move(what);
    op.start = host;
    op.cause = host_cause;
    auto take = [&](double t, int cause) {
      if (t > op.start) {
        op.start = t;
        op.cause = cause;
      }
    };
    const std::string queue = lane != nullptr ? std::string(lane) : resource;
    auto it = last_.find(queue);
    if (it != last_.end()) take(ops_[it->second].end, it->second);
    for (int d : deps) {
      if (d >= 0) take(ops_[d].end, d);
    }
    op.end = op.start + std::max(0.0, seconds);
    ops_.push_back(std::move(op));
    const int id = static_cast<int>(ops_.size()) - 1;
    last_[queue] = id;
    return id;
  }
  const Op& op(int i) const { return ops_[i]; }
  int size() const { return static_cast<int>(ops_.size()); }

 private:
  std::vector<Op> ops_;
  std::map<std::string, int> last_;
};

// The worker thread's time: it only blocks where the engine blocks.
struct HostThread {
  double t = 0.0;
  int cause = -1;
  void WaitFor(const Replay& r, int op) {
    if (op >= 0 && r.op(op).end > t) {
      t = r.op(op).end;
      cause = op;
    }
  }
};

class StepReplay {
 public:
  StepReplay(const ModelShape& shape, const JobShape& job, const PlanKnobs& k, const Rates& rates)
      : shape_(shape), job_(job), k_(k), rates_(rates), sizes_(SizesOf(shape, job, k)),
        U_(shape.num_units()), W_(std::max(1, job.workers)), H_(std::max(1, job.hosts)),
        bf16_landing_(Bf16Landing(job, k.policy)),
        schedule_(U_, shape.tied, k.policy.prefetch_depth, static_cast<int>(KeptBlocks(shape, job, k, 0))),
        residency_(ResidencyOf(shape, job, k)),
        update_resource_(job.cuda ? kResGpuUpdate : kResCpuUpdate),
        slot_free_(schedule_.num_slots(), -1),
        updated_(U_, -1) {}

  // Replays one step starting at `start` on the worker thread (`start_cause`: the op
  // that ended the previous step); returns the op that ends it.
  int Step(double start, int start_cause);
  // Runs the update thread over the last step's landings (fills updated_).
  void Updates();

  const Replay& replay() const { return r_; }
  std::vector<int> compute_ops;  // of the last replayed step
  std::vector<StepSchedule::Event> slot_events;  // of the last replayed step
  int64_t h2d_bytes = 0, d2h_bytes = 0;

 private:
  double H2dSeconds(int64_t bytes, bool duplex) const {
    const double alone = rates_.h2d_gbps;
    const double rate = duplex ? std::min(alone, rates_.duplex_gbps / 2) : alone;
    return static_cast<double>(bytes) / (rate * 1e9);
  }
  double D2hSeconds(int64_t bytes, bool duplex) const {
    const double alone = rates_.d2h_gbps;
    const double rate = duplex ? std::min(alone, rates_.duplex_gbps / 2) : alone;
    return static_cast<double>(bytes) / (rate * 1e9);
  }
  double CollectiveSeconds(int64_t bytes) const {
    return static_cast<double>(bytes) * (W_ - 1) / W_ / (rates_.collective_gbps * 1e9);
  }
  // A broadcast or a reduce to one rank: NCCL's bus bandwidth is its algorithm
  // bandwidth (no (W-1)/W).
  double RootedSeconds(int64_t bytes) const {
    return static_cast<double>(bytes) / (rates_.collective_gbps * 1e9);
  }
  // The CPU device runs every operation on the worker's thread.
  void Sync(int op) {
    if (!job_.cuda) host_.WaitFor(r_, op);
  }
  // The schedule's fetch of `item` (none past the step's end), issued by the worker
  // thread in the forward or the backward phase (duplex copies); sets fetched_[item].
  void Fetch(int item, bool backward_phase);
  // The compute stream takes `item`: the op its compute waits for. Issues the item's
  // prefetch if it comes with the taking.
  int Acquire(int item) {
    slot_events.push_back({StepSchedule::Op::kAcquire, item});
    const int fetched = fetched_[item];
    if (schedule_.item(item).prefetch_at == StepSchedule::PrefetchAt::kAcquire) Prefetch(item);
    return fetched;
  }
  // The compute op `op` frees item's slot; issues the item's prefetch if it follows.
  void Release(int item, int op) {
    slot_events.push_back({StepSchedule::Op::kRelease, item});
    slot_free_[schedule_.item(item).slot] = op;
    if (schedule_.item(item).prefetch_at == StepSchedule::PrefetchAt::kRelease) Prefetch(item);
  }
  // Fetches issued from the head on share the bus with the landings (duplex).
  void Prefetch(int item) {
    const StepSchedule::Use use = schedule_.item(item).use;
    Fetch(schedule_.item(item).prefetch, use == StepSchedule::Use::kHead || use == StepSchedule::Use::kBackward);
  }
  std::string Name(int u) const { return schedule_.unit_name(u); }
  // Unit u (a block) keeps its graph: one of the last kept blocks.
  bool Kept(int u) const { return schedule_.kept(u); }
  // Unit u's state lives on a GPU (policy.resident_units).
  bool Resident(int u) const { return residency_.resident(u); }
  int Compute(const std::string& what, double seconds, std::initializer_list<int> deps) {
    const int op = r_.Add(kResGpu, what, seconds, deps, host_.t, host_.cause);
    compute_ops.push_back(op);
    Sync(op);
    return op;
  }
  void Land(int u, int compute_op);
  // Several hosts: the link thread reduce-scatters unit u's landed gradient over them.
  void ReduceOverHosts(int u);
  // Several hosts: the link thread sums resident unit u's gradient over them (down from
  // its GPU, over the network, back up) before its update.
  void SumResidentOverHosts(int u);

  const ModelShape& shape_;
  const JobShape& job_;
  const PlanKnobs& k_;
  const Rates& rates_;
  const StepSizes sizes_;
  const int U_, W_, H_;
  const bool bf16_landing_;
  Replay r_;
  HostThread host_;
  // The engine's: fetch order, slots, prefetch points, the kept blocks (the last ones).
  const StepSchedule schedule_;
  const Residency residency_;    // units whose state lives on a GPU (the first ones)
  const char* const update_resource_;  // where resident units update
  std::vector<int> slot_free_;   // slot -> the compute op that released it last
  std::vector<int> fetched_;     // item -> its fetch op in this step
  std::vector<int> updated_;       // unit -> op of its latest update
  std::vector<int> landed_;        // unit -> op after which its gradient is in host memory
  int gacc_free_[2] = {-1, -1};
  int next_gacc_ = 0;
  int emb_free_ = -1;
  int lander_ = -1;               // the landing thread's last operation
  int linker_ = -1;               // the link thread's last operation (several hosts)
  HostThread update_thread_;       // the update thread: CPU updates, resident launches
  HostThread gather_thread_;       // several hosts: the all-gathers of updated units, in order
};

}  // namespace slidedp::step_model_internal
