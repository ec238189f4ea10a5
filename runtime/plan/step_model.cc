// StepModel: see step_model.h. The replay keeps every operation with its start, end
// and the operation whose end let it start (its "cause"), so the critical path is a walk
// back from the step's end.
#include "runtime/plan/step_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "runtime/plan/activation_policy.h"
#include "runtime/model/param_layout.h"
#include "runtime/plan/step_schedule.h"

namespace slidedp {

int64_t ModelShape::total_params() const {
  int64_t n = 0;
  for (int64_t p : unit_params) n += p;
  return n;
}

ModelShape ShapeOf(const ModelConfig& config) {
  ModelShape s;
  s.layers = config.num_layers;
  s.hidden = config.hidden_size;
  s.ffn = config.intermediate_size;
  s.heads = config.num_heads;
  s.kv_heads = config.num_kv_heads;
  s.head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size / std::max<int64_t>(1, config.num_heads);
  s.vocab = config.vocab_size;
  s.tied = config.tie_word_embeddings;
  for (const UnitLayout& u : BuildLayout(config).units) s.unit_params.push_back(u.numel);
  return s;
}

double BlockForwardFlopsPerToken(const ModelShape& shape, int64_t seq_len) {
  const double block_params = shape.layers > 0 ? static_cast<double>(shape.unit_params.at(1)) : 0.0;
  // Matmuls: 2 FLOPs a weight; causal attention: QK^T and AV over seq/2 keys on average.
  return 2.0 * block_params + 2.0 * static_cast<double>(seq_len) * shape.heads * shape.head_dim;
}

Rates DefaultRates(const ModelShape& shape, const JobShape& job) {
  Rates r;
  const double fwd_flops = BlockForwardFlopsPerToken(shape, job.seq_len);
  const double head_flops = 6.0 * shape.hidden * shape.vocab;  // logits forward and backward
  if (job.cuda) {
    // Fitted to the H200 runs of tests/bench/RESULTS.md (qwen2.5-3b: forward 6.6 ms and
    // backward 28 ms a block at 4 x 4096 tokens; qwen2.5-7b at 16 x 4096): the matmuls'
    // efficiency grows with the hidden size, hidden / (hidden + 1024) of these rates.
    // The per-parameter gradient work (zeroing, fp32 accumulation, the bf16 landing
    // copy, the norm) and the per-pass overhead are fitted to the plan sweeps of
    // 2026-12-03 (StepModel.MatchesTheH200Sweeps).
    const double eff = static_cast<double>(shape.hidden) / static_cast<double>(shape.hidden + 1024);
    r.forward_s = fwd_flops / (900e12 * eff);
    r.recompute_s = r.forward_s;
    r.backward_s = 2.0 * fwd_flops / (620e12 * eff);
    r.head_s = head_flops / (480e12 * eff);
    r.embed_s = 4.0 * shape.hidden / 1e12;
    r.grad_s_per_param = 2e-11;
    r.launch_s = 3e-4;
    r.adamw_params_per_s *= 28.0 / job.update_bytes_per_param;  // memory-bound: fp32's rate scaled
    return r;
  }
  // The CPU device: memcpy for transfers, one core's worth of FLOPs per worker.
  r.h2d_gbps = r.d2h_gbps = 8.0;
  r.duplex_gbps = 8.0;
  r.collective_gbps = 8.0;
  r.forward_s = fwd_flops / 20e9;
  r.recompute_s = r.forward_s;
  r.backward_s = 2.0 * r.forward_s;
  r.head_s = head_flops / 20e9;
  r.embed_s = 4.0 * shape.hidden / 1e9;
  r.grad_s_per_param = 1e-9;
  r.launch_s = 2e-5;
  r.adamw_params_per_s = 3e8 * 28.0 / job.update_bytes_per_param;
  r.gpu_update_params_per_s = r.adamw_params_per_s;  // the same AdamW, on the update thread
  r.host_memory_gbps = 10.0;
  r.cross_host_gbps = 5.0;  // loopback TCP
  r.cross_host_latency_s = 5e-5;
  return r;
}

int64_t MlpTile(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs) {
  return ChooseMlpTile(knobs.policy, knobs.micro_batch_size, job.seq_len, shape.ffn, job.param_bytes);
}

double MlpShare(const ModelShape& shape, int64_t seq_len) {
  const double block = BlockForwardFlopsPerToken(shape, seq_len);
  return block > 0 ? std::min(1.0, 6.0 * static_cast<double>(shape.hidden) * shape.ffn / block) : 0.0;
}

bool Bf16Landing(const JobShape& job, const PolicyConfig& policy) {
  return LandsInBf16(policy.grad_landing, policy.grad_route, job.cuda, job.workers, job.hosts);
}

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------
// Exchanges between hosts (JobShape::hosts > 1), as runtime/engine/host_group.cc makes
// them over Gloo: every host's buffer is cut into `hosts` equal slices (the last padded),
// SliceOf's; host 0's shard is the largest.

int64_t ShardOf(int64_t numel, int hosts) { return CeilDiv(numel, hosts); }

// Bytes one host sends (and receives) in the reduce-scatter of a unit's fp32 gradient:
// the other hosts' slices (point-to-point sends).
int64_t ReduceScatterBytes(int64_t numel, int hosts) { return 4 * ShardOf(numel, hosts) * (hosts - 1); }
// ... in the all-gather of its streamed copy (`param_bytes` an element): its own slice
// to each of the others, theirs back.
int64_t AllGatherBytes(int64_t numel, int hosts, int param_bytes) {
  return param_bytes * ShardOf(numel, hosts) * (hosts - 1);
}

// Seconds on the network: the bytes each way at once at cross_host_gbps, and the
// latency of each collective (the reduce-scatter's sends and its norm's sum; the
// all-gather).
double ReduceScatterSeconds(int64_t numel, const JobShape& job, const Rates& r) {
  return 2 * r.cross_host_latency_s +
         static_cast<double>(ReduceScatterBytes(numel, job.hosts)) / (r.cross_host_gbps * 1e9);
}
double AllGatherSeconds(int64_t numel, const JobShape& job, const Rates& r) {
  return r.cross_host_latency_s +
         static_cast<double>(AllGatherBytes(numel, job.hosts, job.param_bytes)) / (r.cross_host_gbps * 1e9);
}

// Host memory bytes a parameter's exchanges move on each host besides the network's own
// (what is sent read, what is received written: 8 for the reduce-scatter's fp32, 2e for
// the all-gather's e bytes an element). The reduce-scatter sends straight from the
// gradient and sums the received slices into the shard (reads 4, writes 4/H), then
// reads the shard for its squared norm (4/H); the all-gather broadcasts views of the
// streamed copy in place (nothing more).
double ReduceScatterCopyBytes(int hosts) { return 4.0 + 8.0 / hosts; }
double AllGatherCopyBytes(int, int) { return 0.0; }
double ExchangeHostBytesPerParam(int hosts, int param_bytes) {
  return 8.0 + ReduceScatterCopyBytes(hosts) + 2.0 * param_bytes + AllGatherCopyBytes(hosts, param_bytes);
}

// The exchanges' copies and sums in host memory, on the thread that runs the exchange
// (the link thread, the update thread): named host memory on the critical path.
constexpr const char* kExchangeCopy = "exchange copy";
// Per-thread lanes of the network: the link thread's reduce-scatters and the gather
// thread's all-gathers run at once (a Gloo group each).
constexpr const char* kLinkLane = "link thread";
constexpr const char* kGatherLane = "gather";

struct Sizes {
  int64_t tokens_worker = 0;  // tokens a worker computes a step
  int64_t tokens_micro = 0;   // tokens of one micro-batch
  int64_t max_numel = 0;
  int64_t max_rest = 0;       // largest unit but the embedding
};

Sizes SizesOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  Sizes s;
  s.tokens_micro = k.micro_batch_size * job.seq_len;
  s.tokens_worker = s.tokens_micro * k.grad_accum;
  for (int u = 0; u < shape.num_units(); ++u) {
    s.max_numel = std::max(s.max_numel, shape.unit_params[u]);
    if (u > 0) s.max_rest = std::max(s.max_rest, shape.unit_params[u]);
  }
  return s;
}

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
        schedule_(U_, shape.tied, k.policy.prefetch_depth),
        kept_(KeptBlocks(shape, job, k, 0)),
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
  // prefetch unless that follows its release.
  int Acquire(int item) {
    slot_events.push_back({StepSchedule::Op::kAcquire, item});
    const int fetched = fetched_[item];
    if (!schedule_.item(item).prefetch_after_release) Prefetch(item);
    return fetched;
  }
  // The compute op `op` frees item's slot; issues the item's prefetch if it follows.
  void Release(int item, int op) {
    slot_events.push_back({StepSchedule::Op::kRelease, item});
    slot_free_[schedule_.item(item).slot] = op;
    if (schedule_.item(item).prefetch_after_release) Prefetch(item);
  }
  void Prefetch(int item) {
    Fetch(schedule_.item(item).prefetch, schedule_.item(item).use != StepSchedule::Use::kForward);
  }
  std::string Name(int u) const { return schedule_.unit_name(u); }
  // Unit u (a block) keeps its graph: one of the last kept_ blocks.
  bool Kept(int u) const { return u >= U_ - 1 - kept_ && u < U_ - 1; }
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

  const ModelShape& shape_;
  const JobShape& job_;
  const PlanKnobs& k_;
  const Rates& rates_;
  const Sizes sizes_;
  const int U_, W_, H_;
  const bool bf16_landing_;
  Replay r_;
  HostThread host_;
  const StepSchedule schedule_;  // the engine's: fetch order, slots, prefetch points
  const int64_t kept_;           // blocks that keep their graph (the last ones)
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

void StepReplay::Fetch(int item, bool backward_phase) {
  if (item < 0 || item >= schedule_.size()) return;
  slot_events.push_back({StepSchedule::Op::kFetch, item});
  const int u = schedule_.item(item).unit;
  const int64_t numel = shape_.unit_params[u];
  if (Resident(u)) {
    // Nothing to upload: the compute waits for the unit's GPU update of the previous step
    // on its stream (no host wait); the other GPUs receive it from the owner.
    int op = updated_[u];
    if (W_ > 1) {
      op = r_.Add(kResCollective, "broadcast " + Name(u), RootedSeconds(numel * job_.param_bytes),
                  {op, slot_free_[schedule_.item(item).slot]}, host_.t, host_.cause);
      Sync(op);
    }
    fetched_[item] = op;
    return;
  }
  host_.WaitFor(r_, updated_[u]);  // WaitParamsReady: the previous step's update of u
  const bool scatter = W_ > 1 && k_.policy.param_route == ParamRoute::kScatterAllGather;
  const int64_t bytes = (scatter ? CeilDiv(numel, W_) : numel) * job_.param_bytes;
  h2d_bytes += bytes;
  const std::string what = absl::StrCat("upload ", Name(u));
  int op = r_.Add(kResH2d, what, H2dSeconds(bytes, backward_phase), {slot_free_[schedule_.item(item).slot]}, host_.t,
                  host_.cause);
  Sync(op);
  if (scatter) {
    op = r_.Add(kResCollective, "all-gather " + Name(u), CollectiveSeconds(numel * job_.param_bytes), {op},
                host_.t, host_.cause);
    Sync(op);
  }
  fetched_[item] = op;
}

void StepReplay::Land(int u, int compute_op) {
  const int64_t numel = shape_.unit_params[u];
  if (Resident(u)) {
    // The gradient stays on the GPU: its own fp32 buffer on the owner, reduced there from
    // the other GPUs' accumulators (the ring's, freed by the reduce).
    landed_[u] = compute_op;
    if (W_ > 1) {
      landed_[u] = r_.Add(kResCollective, "reduce " + Name(u), RootedSeconds(numel * 4), {compute_op}, host_.t,
                          host_.cause);
      Sync(landed_[u]);
      if (u > 0) {
        gacc_free_[next_gacc_] = landed_[u];
        next_gacc_ = 1 - next_gacc_;
      }
    }
    return;
  }
  const GradRoute route = k_.policy.grad_route;
  const bool host_sum = W_ > 1 && route == GradRoute::kGatherHost;
  if (host_sum) host_.WaitFor(r_, lander_);  // the host sums from one buffer per rank
  int dep = compute_op;
  int64_t down = numel;
  if (W_ > 1 && route == GradRoute::kReduceScatter) {
    dep = r_.Add(kResCollective, "reduce-scatter " + Name(u), CollectiveSeconds(numel * 4), {dep},
                 host_.t, host_.cause);
    down = CeilDiv(numel, W_);
  } else if (W_ > 1 && route == GradRoute::kReduceOne) {
    dep = r_.Add(kResCollective, "reduce " + Name(u), CollectiveSeconds(numel * 4), {dep}, host_.t,
                 host_.cause);
  }
  const int64_t bytes = down * (bf16_landing_ ? 2 : 4);
  d2h_bytes += bytes;
  const int copy = r_.Add(kResD2h, "land " + Name(u), D2hSeconds(bytes, true), {dep}, host_.t, host_.cause);
  Sync(copy);
  if (u == 0) {
    emb_free_ = copy;
  } else {
    gacc_free_[next_gacc_] = copy;
    next_gacc_ = 1 - next_gacc_;
  }
  // The landing thread: waits for the copy, sums W buffers on the host if the route
  // does (fp32 reads of W buffers and a write).
  const double sum_s = host_sum ? static_cast<double>(numel) * 4 * (W_ + 1) / (rates_.host_memory_gbps * 1e9) : 0.0;
  lander_ = r_.Add("landing", "landed " + Name(u), sum_s, {copy, lander_}, host_.t, host_.cause);
  landed_[u] = lander_;
  Sync(lander_);
  if (H_ > 1) ReduceOverHosts(u);
}

void StepReplay::ReduceOverHosts(int u) {
  const int64_t numel = shape_.unit_params[u];
  const int net = r_.Add(kResNetwork, "reduce-scatter " + Name(u) + " over hosts",
                         ReduceScatterSeconds(numel, job_, rates_), {landed_[u]}, host_.t, host_.cause, kLinkLane);
  linker_ = r_.Add(kExchangeCopy, "sum " + Name(u) + " over hosts",
                   static_cast<double>(numel) * ReduceScatterCopyBytes(H_) / (rates_.host_memory_gbps * 1e9), {net},
                   host_.t, host_.cause, kLinkLane);
  landed_[u] = linker_;
}

int StepReplay::Step(double start, int start_cause) {
  const int head = U_ - 1;
  const bool tied = shape_.tied;
  const int64_t MB = k_.grad_accum;
  const double T = static_cast<double>(sizes_.tokens_worker);
  const bool offload = k_.policy.activations == ActivationPlacement::kHost;
  const int64_t act_bytes = sizes_.tokens_worker * shape_.hidden * job_.param_bytes;
  host_ = HostThread{start, start_cause};
  compute_ops.clear();
  h2d_bytes = d2h_bytes = 0;
  landed_.assign(U_, -1);
  slot_events.clear();
  fetched_.assign(schedule_.size(), -1);
  for (int i = 0; i < schedule_.prefetch_depth(); ++i) Fetch(i, false);
  const double launch = rates_.launch_s * static_cast<double>(MB);

  // Forward, layer-major.
  const int emb = schedule_.forward_item(0);
  int c = Compute("forward embedding", T * rates_.embed_s * 0.25 + launch, {Acquire(emb)});
  Release(emb, c);
  std::vector<int> saved(U_, -1);
  for (int u = 1; u < head; ++u) {
    const int item = schedule_.forward_item(u);
    const int acquire = Acquire(item);
    if (offload && !Kept(u)) {
      // The unit's input goes down once the compute stream produced it.
      saved[u] = r_.Add(kResD2h, "offload " + Name(u), D2hSeconds(act_bytes, false), {c}, host_.t,
                        host_.cause);
      d2h_bytes += act_bytes;
      Sync(saved[u]);
    }
    c = Compute("forward " + Name(u), T * rates_.forward_s + launch, {acquire});
    Release(item, c);
  }

  // Head: loss and its backward in chunks, then the blocks in reverse.
  const int head_item = schedule_.head_item();
  const int table_item = schedule_.table_item();
  // Both of the head's fetches are read before the head's prefetches are issued. The
  // engine takes the table after the head's prefetch; at prefetch depth 1 that is the
  // table's own fetch, which the head's compute then waits for and this replay does
  // not. Kept as the model was fitted: waiting for it here raises tied models' depth-1
  // predictions by 0.2-1.6% and turns the policy's pick for the 3B at batch 4 to
  // prefetch 2, measured 10% slower (StepModel.PredictsTheH200ProofSweeps).
  const int head_fetch = fetched_[head_item];
  const int table_fetch = tied ? fetched_[table_item] : -1;
  Acquire(head_item);
  if (tied) Acquire(table_item);
  const int64_t chunks = CeilDiv(job_.seq_len, std::max<int64_t>(1, k_.policy.loss_chunk_tokens / std::max<int64_t>(1, k_.micro_batch_size)));
  c = Compute("loss and head backward", T * rates_.head_s + launch * static_cast<double>(chunks) +
                  rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[head]),
              {head_fetch, table_fetch, gacc_free_[next_gacc_], emb_free_});
  Release(head_item, c);
  if (tied) Release(table_item, c);
  Land(head, c);

  int restored = -1;
  if (offload && head > 1 && !Kept(head - 1)) {
    restored = r_.Add(kResH2d, "restore " + Name(head - 1), H2dSeconds(act_bytes, true), {saved[head - 1]},
                      host_.t, host_.cause);
    h2d_bytes += act_bytes;
    Sync(restored);
  }
  // MLP tiles: backward recomputes each tile's MLP once more (runtime/model/tiled_mlp.h).
  const double mlp_recompute =
      MlpTile(shape_, job_, k_) < job_.seq_len ? T * rates_.recompute_s * MlpShare(shape_, job_.seq_len) : 0.0;
  // A kept block's backward does not run its forward again.
  const double block_bwd = T * rates_.backward_s + mlp_recompute + 2 * launch;
  for (int u = head - 1; u >= 1; --u) {
    const int it = schedule_.backward_item(u);
    const int acquire = Acquire(it);
    const int inputs = Kept(u) ? -1 : restored;
    if (offload && u > 1 && !Kept(u - 1)) {
      restored = r_.Add(kResH2d, "restore " + Name(u - 1), H2dSeconds(act_bytes, true), {saved[u - 1]},
                        host_.t, host_.cause);
      h2d_bytes += act_bytes;
      Sync(restored);
    }
    // A resident unit on one GPU accumulates into its own gradient, not the ring's.
    const int accumulator = Resident(u) && W_ == 1 ? -1 : gacc_free_[next_gacc_];
    c = Compute("backward " + Name(u),
                block_bwd + (Kept(u) ? 0.0 : T * rates_.recompute_s) +
                    rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[u]),
                {acquire, inputs, accumulator});
    Release(it, c);
    Land(u, c);
  }
  c = Compute("backward embedding", T * rates_.embed_s * 0.75 + launch +
                  rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[0]), {});
  Land(0, c);
  // The step ends when the compute stream is done and every landing is complete.
  return r_.Add("step end", "step end", 0.0, {c, lander_, linker_}, host_.t, host_.cause);
}

void StepReplay::Updates() {
  // Availability of each unit's update: as it lands (no clipping) or once all have.
  std::vector<double> avail(U_);
  std::vector<int> avail_cause(U_);
  int last = landed_[0];
  for (int u = 0; u < U_; ++u) {
    if (r_.op(landed_[u]).end > r_.op(last).end) last = landed_[u];
  }
  for (int u = 0; u < U_; ++u) {
    avail_cause[u] = job_.clip ? last : landed_[u];
    avail[u] = r_.op(avail_cause[u]).end;
  }
  // Earliest deadline first: among the available units, the lowest. A resident unit's
  // update is a launch on its GPU's update stream that takes the thread no time (on the
  // cpu device the thread runs it); a streamed unit's is the thread's CPU AdamW. Several
  // hosts update in the order units land (each update ends in an all-gather that every
  // host must join in the same order): forward order with clipping.
  std::vector<bool> done(U_, false);
  for (int n = 0; n < U_; ++n) {
    const double free = update_thread_.t;
    int pick = -1;
    for (int u = 0; u < U_ && H_ == 1; ++u) {
      if (!done[u] && avail[u] <= free) {
        pick = u;
        break;
      }
    }
    if (pick < 0) {  // idle until the next landing; several hosts: the first landed
      for (int u = 0; u < U_; ++u) {
        if (!done[u] && (pick < 0 || avail[u] < avail[pick])) pick = u;
      }
    }
    done[pick] = true;
    const double params = static_cast<double>(shape_.unit_params[pick]);
    if (Resident(pick)) {
      const int op = r_.Add(update_resource_, "update " + Name(pick), params / rates_.gpu_update_params_per_s,
                            {avail_cause[pick]}, update_thread_.t, update_thread_.cause);
      updated_[pick] = op;
      if (job_.cuda) {
        update_thread_.WaitFor(r_, avail_cause[pick]);  // launched once available
      } else {
        update_thread_.WaitFor(r_, op);
      }
      continue;
    }
    if (H_ == 1) {
      const int op = r_.Add(kResCpuUpdate, "update " + Name(pick), params / rates_.adamw_params_per_s,
                            {avail_cause[pick]}, update_thread_.t, update_thread_.cause);
      update_thread_.WaitFor(r_, op);
      updated_[pick] = op;
      continue;
    }
    // Several hosts: this host's shard, then the streamed copy gathered from all on the
    // gather thread (update_pipeline.cc), in update order, while the update thread goes
    // on to the next unit; the next forward's fetch waits for the gather.
    const int64_t numel = shape_.unit_params[pick];
    const int op = r_.Add(kResCpuUpdate, "update " + Name(pick),
                          static_cast<double>(ShardOf(numel, H_)) / rates_.adamw_params_per_s, {avail_cause[pick]},
                          update_thread_.t, update_thread_.cause);
    update_thread_.WaitFor(r_, op);
    const int net = r_.Add(kResNetwork, "all-gather " + Name(pick) + " over hosts",
                           AllGatherSeconds(numel, job_, rates_), {op}, gather_thread_.t, gather_thread_.cause,
                           kGatherLane);
    const int copy = r_.Add(kExchangeCopy, "gathered " + Name(pick),
                            static_cast<double>(numel) * AllGatherCopyBytes(H_, job_.param_bytes) /
                                (rates_.host_memory_gbps * 1e9),
                            {net}, gather_thread_.t, gather_thread_.cause, kGatherLane);
    gather_thread_.WaitFor(r_, copy);
    updated_[pick] = copy;
  }
}

}  // namespace

int64_t KeptBlockBytes(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  const Sizes s = SizesOf(shape, job, k);
  const int64_t q = shape.heads * shape.head_dim, kv = shape.kv_heads * shape.head_dim;
  const bool tiled = MlpTile(shape, job, k) < job.seq_len;
  // The MLP keeps gate and up, not their product (fused_ops.h's lean FusedSwigluDown).
  const int64_t elements = 4 * shape.hidden + 3 * q + 3 * kv + (tiled ? 0 : 2 * shape.ffn);
  const int64_t fp32_stats = (2 + shape.heads) * 4;
  return s.tokens_worker * (elements * job.param_bytes + fp32_stats);
}

int64_t KeptBlocks(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes) {
  const int64_t requested = knobs.policy.kept_blocks;
  if (requested >= 0) return std::min(requested, shape.layers);
  if (!job.cuda) return 0;
  if (memory_bytes <= 0) return shape.layers;
  PlanKnobs none = knobs;
  none.policy.kept_blocks = 0;
  const int64_t base = EstimateMemory(shape, job, none).total;
  // Each kept block adds its graph and, with inputs on the device, no longer keeps its input apart.
  const int64_t act_unit = SizesOf(shape, job, knobs).tokens_worker * shape.hidden * job.param_bytes;
  const int64_t per_block = std::max<int64_t>(
      1, KeptBlockBytes(shape, job, knobs) - (knobs.policy.activations == ActivationPlacement::kHost ? 0 : act_unit));
  // A tenth of the memory stays free: the caching allocator's fragmentation grows with
  // the many differently sized tensors a kept graph holds.
  const int64_t usable = memory_bytes / 10 * 9;
  if (base >= usable) return 0;
  return std::min(shape.layers, (usable - base) / per_block);
}

int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes,
                      const Rates& rates) {
  const int64_t units = shape.num_units();
  const int64_t requested = knobs.policy.resident_units;
  if (requested >= 0) return std::min(requested, units);
  if (!job.cuda || !job.fp32_moments || job.hosts > 1) return 0;
  // The most that fit beside the plan without kept blocks, with the kept blocks' headroom.
  int64_t most = units;
  if (memory_bytes > 0) {
    PlanKnobs bare = knobs;
    bare.policy.resident_units = 0;
    bare.policy.kept_blocks = 0;
    const int64_t usable = memory_bytes / 10 * 9;
    const int64_t base = EstimateMemory(shape, job, bare).total;
    if (base >= usable) return 0;
    most = ResidentUnitsWithin(shape.unit_params, job.workers, job.param_bytes, usable - base);
  }
  // None and eighths of the most, each with the kept blocks the memory then leaves;
  // ascending, so that ties keep fewer resident units.
  constexpr int kParts = 8;
  int64_t best = -1;
  double best_s = 0.0;
  int64_t previous = -1;
  for (int i = 0; i <= kParts; ++i) {
    const int64_t n = most * i / kParts;
    if (n == previous) continue;
    previous = n;
    PlanKnobs k = knobs;
    k.policy.resident_units = n;
    if (k.policy.kept_blocks < 0) k.policy.kept_blocks = KeptBlocks(shape, job, k, memory_bytes);
    const double s = PredictStep(shape, job, k, rates).step_seconds;
    if (best < 0 || s < best_s - 1e-6 * best_s) {
      best = n;
      best_s = s;
    }
  }
  return best;
}

int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes) {
  return ResidentUnits(shape, job, knobs, memory_bytes, DefaultRates(shape, job));
}

MemoryEstimate EstimateMemory(const ModelShape& shape, const JobShape& job, const PlanKnobs& k) {
  const Sizes s = SizesOf(shape, job, k);
  const int W = std::max(1, job.workers);
  const int64_t pb = job.param_bytes;
  auto padded = [&](int64_t n) { return W * CeilDiv(std::max<int64_t>(n, 1), W); };
  MemoryEstimate m;
  m.slots = StepSchedule::SlotsFor(k.policy.prefetch_depth) * padded(s.max_numel) * pb;
  const int64_t emb = shape.unit_params.empty() ? 0 : shape.unit_params[0];
  m.grad_buffers = 2 * padded(s.max_rest) * 4 + padded(emb) * 4;
  const int64_t ring[3] = {s.max_rest, s.max_rest, emb};
  for (int64_t n : ring) {
    if (Bf16Landing(job, k.policy)) m.grad_buffers += padded(n) * pb;
    if (W > 1 && k.policy.grad_route == GradRoute::kReduceScatter) m.grad_buffers += CeilDiv(n, W) * 4;
    if (W > 1 && k.policy.grad_route == GradRoute::kReduceOne) m.grad_buffers += n * 4;
  }
  const int64_t act_unit = s.tokens_worker * shape.hidden * pb;
  // Kept blocks hold their graph (their input in it) and are never offloaded.
  const int64_t kept = KeptBlocks(shape, job, k, 0);
  m.activations = (k.policy.activations == ActivationPlacement::kHost ? 2 * act_unit : (shape.layers - kept) * act_unit) +
                  kept * KeptBlockBytes(shape, job, k);
  // A micro-batch through a block with autograd (q, k, v, attention, the MLP's gate, up
  // and product, norms, residuals, and their gradients), the hidden states and their
  // gradients of every micro-batch, and the block's parameter gradients.
  const int64_t block_act = (7 * shape.hidden + 4 * shape.ffn) * pb;
  m.working = 2 * s.tokens_micro * block_act + 2 * act_unit + s.max_rest * pb;
  const int64_t chunk_tokens = std::min(k.policy.loss_chunk_tokens, s.tokens_micro);
  m.loss_chunk = chunk_tokens * shape.vocab * 12 + shape.vocab * shape.hidden * pb;
  m.margin = job.cuda ? 2 * kGiB : 0;
  m.resident = ResidencyOf(shape, job, k).max_bytes();
  m.total = m.slots + m.grad_buffers + m.activations + m.working + m.loss_chunk + m.margin + m.resident;
  return m;
}

Residency ResidencyOf(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs) {
  return PlaceResident(shape.unit_params, std::max<int64_t>(0, knobs.policy.resident_units), job.workers,
                       job.param_bytes);
}

std::vector<StepSchedule::Event> ReplaySlotEvents(const ModelShape& shape, const JobShape& job,
                                                  const PlanKnobs& knobs) {
  if (shape.num_units() < 2) return {};
  const Rates rates = DefaultRates(shape, job);
  StepReplay replay(shape, job, knobs, rates);
  replay.Step(0.0, -1);
  return replay.slot_events;
}

StepPrediction PredictStep(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs,
                           const Rates& rates) {
  StepPrediction p;
  p.memory = EstimateMemory(shape, job, knobs);
  if (shape.num_units() < 2 || job.sequences <= 0) return p;
  StepReplay replay(shape, job, knobs, rates);
  constexpr int kSteps = 3;
  std::vector<int> ends;
  int begin_cause = -1;
  double begin = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    const int end = replay.Step(begin, begin_cause);
    replay.Updates();
    ends.push_back(end);
    begin = replay.replay().op(end).end;
    begin_cause = end;
  }
  const Replay& r = replay.replay();
  const double t0 = r.op(ends[kSteps - 2]).end, t1 = r.op(ends[kSteps - 1]).end;
  p.first_step_seconds = r.op(ends[0]).end;
  p.step_seconds = t1 - t0;
  p.h2d_bytes = replay.h2d_bytes;
  p.d2h_bytes = replay.d2h_bytes;

  // Busy time of each resource within the last step's window [t0, t1] (updates of this
  // step run into the next one: count each step's updates once, by their durations).
  for (int i = 0; i < r.size(); ++i) {
    const Op& op = r.op(i);
    if (op.resource == "step end" || op.resource == "landing") continue;
    if (op.resource == kResCpuUpdate || op.resource == kResGpuUpdate) continue;
    if (op.resource == kResNetwork || op.resource == kExchangeCopy) continue;  // below, per step
    if (op.start >= t0 && op.start < t1) p.busy[op.resource] += op.end - op.start;
  }
  const Residency residency = ResidencyOf(shape, job, knobs);
  for (int u = 0; u < shape.num_units(); ++u) {
    if (residency.resident(u)) p.resident_params += shape.unit_params[u];
  }
  // The streamed units' parameters this host updates: its shard of each (host 0's, the
  // largest), all of them on one host.
  const int H = std::max(1, job.hosts);
  int64_t streamed_params = 0, shard_params = 0;
  for (int u = 0; u < shape.num_units(); ++u) {
    if (residency.resident(u)) continue;
    streamed_params += shape.unit_params[u];
    shard_params += ShardOf(shape.unit_params[u], H);
  }
  const double streamed = static_cast<double>(shard_params);
  const double resident_s = static_cast<double>(p.resident_params) / rates.gpu_update_params_per_s;
  p.busy[kResCpuUpdate] = streamed / rates.adamw_params_per_s + (job.cuda ? 0.0 : resident_s);
  if (job.cuda && p.resident_params > 0) p.busy[kResGpuUpdate] = resident_s;
  const int W = std::max(1, job.workers);
  // Host memory: every worker's DMA reads and writes, AdamW of the streamed units (28
  // bytes a parameter with fp32 moments: p, m, v read and written, the gradient read and
  // the streamed copy written; JobShape::update_bytes_per_param), of this host's shard.
  double host_bytes = static_cast<double>(W) * (p.h2d_bytes + p.d2h_bytes) + job.update_bytes_per_param * streamed;
  if (H > 1) {
    // Each unit's reduce-scatter and all-gather on the network (the link thread's and
    // the update thread's, at once), and their bytes in host memory.
    double network_s = 0.0;
    for (int u = 0; u < shape.num_units(); ++u) {
      if (residency.resident(u)) continue;
      const int64_t n = shape.unit_params[u];
      p.network_bytes += ReduceScatterBytes(n, H) + AllGatherBytes(n, H, job.param_bytes);
      network_s += ReduceScatterSeconds(n, job, rates) + AllGatherSeconds(n, job, rates);
    }
    p.busy[kResNetwork] = network_s;
    host_bytes += static_cast<double>(streamed_params) * ExchangeHostBytesPerParam(H, job.param_bytes);
  }
  // The AdamW kernel's own traffic shows the bandwidth the host reaches at least (a
  // calibration copy counts no read-for-ownership and can read low).
  const double host_gbps =
      std::max(rates.host_memory_gbps, job.update_bytes_per_param * rates.adamw_params_per_s / 1e9);
  p.busy[kResHostMemory] = host_bytes / (host_gbps * 1e9);

  // Critical path: back from the step's end through the causes, clipped at t0.
  // Walking back, each segment grows at its front: `what` becomes "first .. last".
  std::vector<PathSegment> path;
  std::vector<std::string> last_what;
  for (int i = ends.back(); i >= 0; i = r.op(i).cause) {
    const Op& op = r.op(i);
    const double s = std::max(op.start, t0), e = std::min(op.end, t1);
    if (e > s) {
      const std::string res = op.resource == "landing" || op.resource == kExchangeCopy ? kResHostMemory : op.resource;
      p.critical[res] += e - s;
      if (!path.empty() && path.back().resource == res) {
        path.back().seconds += e - s;
        path.back().what = op.what + " .. " + last_what.back();
      } else {
        path.push_back({res, op.what, e - s});
        last_what.push_back(op.what);
      }
    }
    if (op.start <= t0) break;
  }
  std::reverse(path.begin(), path.end());
  p.critical_path = std::move(path);

  // GPU idle time by cause, and the fill before the first compute and drain after the
  // last.
  double prev = t0;
  const std::vector<int>& comp = replay.compute_ops;
  for (size_t i = 0; i < comp.size(); ++i) {
    const Op& op = r.op(comp[i]);
    if (op.start > prev + 1e-12) {
      std::string cause = kResGpu;
      // Walk back the causes to the first one that is not a host-thread hop on the
      // compute stream: that is what the GPU waited for.
      for (int c = op.cause; c >= 0; c = r.op(c).cause) {
        if (r.op(c).resource != kResGpu && r.op(c).resource != "step end") {
          cause = r.op(c).resource == "landing"       ? kResD2h
                  : r.op(c).resource == kExchangeCopy ? kResNetwork
                                                      : r.op(c).resource;
          break;
        }
      }
      p.exposed[cause] += op.start - prev;
      if (i == 0) p.fill_seconds = op.start - t0;
    }
    prev = std::max(prev, op.end);
  }
  p.drain_seconds = std::max(0.0, t1 - prev);
  if (p.drain_seconds > 0) {
    // The last landing, or with several hosts the last reduce-scatter over them.
    const int last = r.op(ends.back()).cause;
    const bool hosts = last >= 0 && (r.op(last).resource == kResNetwork || r.op(last).resource == kExchangeCopy);
    p.exposed[hosts ? kResNetwork : kResD2h] += p.drain_seconds;
  }

  // Host memory caps everything that shares it.
  if (p.busy[kResHostMemory] > p.step_seconds) {
    p.critical[kResHostMemory] += p.busy[kResHostMemory] - p.step_seconds;
    p.step_seconds = p.busy[kResHostMemory];
  }
  double most = -1.0;
  for (const auto& [res, s] : p.critical) {
    if (s > most) {
      most = s;
      p.bottleneck = res;
    }
  }
  return p;
}

}  // namespace slidedp
