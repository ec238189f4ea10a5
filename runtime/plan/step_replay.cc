// StepReplay: see step_replay.h. The replay keeps every operation with its start, end
// and the operation whose end let it start (its "cause"), so the critical path is a walk
// back from the step's end (step_model.cc).
#include "runtime/plan/step_replay.h"

#include "absl/strings/str_cat.h"

namespace slidedp::step_model_internal {

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
    if (H_ > 1) SumResidentOverHosts(u);
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
                         ReduceScatterSeconds(numel, job_, rates_, GradBytes(bf16_landing_)), {landed_[u]}, host_.t,
                         host_.cause, kLinkLane);
  linker_ = r_.Add(kExchangeCopy, "sum " + Name(u) + " over hosts",
                   static_cast<double>(numel) * ReduceScatterCopyBytes(H_, GradBytes(bf16_landing_)) /
                       (rates_.host_memory_gbps * 1e9),
                   {net}, host_.t, host_.cause, kLinkLane);
  landed_[u] = linker_;
}

void StepReplay::SumResidentOverHosts(int u) {
  const int64_t numel = shape_.unit_params[u];
  const int64_t bytes = numel * 4;
  const int down = r_.Add(kResD2h, "copy " + Name(u) + " gradient down", D2hSeconds(bytes, true), {landed_[u]},
                          host_.t, host_.cause, kLinkLane);
  const int net = r_.Add(kResNetwork, "sum " + Name(u) + " over hosts", ResidentSumSeconds(numel, job_, rates_),
                         {down}, host_.t, host_.cause, kLinkLane);
  const int copy = r_.Add(kExchangeCopy, "sum " + Name(u) + " in host memory",
                          static_cast<double>(numel) * ExchangeHostBytesPerParam(H_, 4, 4) /
                              (rates_.host_memory_gbps * 1e9),
                          {net}, host_.t, host_.cause, kLinkLane);
  linker_ = r_.Add(kResH2d, "copy " + Name(u) + " gradient up", H2dSeconds(bytes, true), {copy}, host_.t,
                   host_.cause, kLinkLane);
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

  // Forward, layer-major, up to the kept blocks.
  const int first_kept = schedule_.first_kept_unit();
  const int emb = schedule_.forward_item(0);
  int c = Compute("forward embedding", T * rates_.embed_s * 0.25 + launch, {Acquire(emb)});
  Release(emb, c);
  std::vector<int> saved(U_, -1);
  for (int u = 1; u < first_kept; ++u) {
    const int item = schedule_.forward_item(u);
    const int acquire = Acquire(item);
    if (offload) {
      // The unit's input goes down once the compute stream produced it.
      saved[u] = r_.Add(kResD2h, "offload " + Name(u), D2hSeconds(act_bytes, false), {c}, host_.t,
                        host_.cause);
      d2h_bytes += act_bytes;
      Sync(saved[u]);
    }
    c = Compute("forward " + Name(u), T * rates_.forward_s + launch, {acquire});
    Release(item, c);
  }

  // The kept blocks and the head, micro-batch-major: micro-batch 0 takes each kept block
  // (its forward waits for the fetch), then the head's items; the rest of the
  // micro-batches' forwards, losses and backwards follow on the compute stream, and the
  // last micro-batch's backward through each kept block completes its gradient.
  const double Tm = T / static_cast<double>(MB);  // one micro-batch's tokens
  const double launch_mb = rates_.launch_s;
  // MLP tiles: backward recomputes each tile's MLP once more (runtime/model/tiled_mlp.h).
  const double mlp_recompute =
      MlpTile(shape_, job_, k_) < job_.seq_len ? rates_.recompute_s * MlpShare(shape_, job_.seq_len) : 0.0;
  // A block's backward per token without its recompute (a kept block's).
  const double bwd_per_token = rates_.backward_s + mlp_recompute;
  double kept_rest = 0.0;  // compute of the kept blocks between micro-batch 0's forward and the last backward
  for (int u = first_kept; u < head; ++u) {
    const int item = schedule_.forward_item(u);
    c = Compute("forward " + Name(u) + ", micro-batch 0", Tm * rates_.forward_s + launch_mb, {Acquire(item)});
    Prefetch(item);  // once the first micro-batch's compute is issued
    kept_rest += (T - Tm) * (rates_.forward_s + bwd_per_token) + 3 * launch_mb * static_cast<double>(MB - 1);
  }

  // Head: loss and its backward in chunks (every micro-batch's), with the kept blocks'
  // compute of the micro-batches before the last.
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
  c = Compute(first_kept < head ? "loss and head backward, kept blocks" : "loss and head backward",
              T * rates_.head_s + launch * static_cast<double>(chunks) + kept_rest +
                  rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[head]),
              {head_fetch, table_fetch, gacc_free_[next_gacc_], emb_free_});
  Release(head_item, c);
  if (tied) Release(table_item, c);
  Land(head, c);
  for (int u = head - 1; u >= first_kept; --u) {
    // The landing waits for the ring's landing buffers (Worker::Land).
    c = Compute("backward " + Name(u) + ", last micro-batch",
                Tm * bwd_per_token + 2 * launch_mb + rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[u]),
                {Resident(u) && W_ == 1 ? -1 : gacc_free_[next_gacc_]});
    Release(schedule_.forward_item(u), c);
    Land(u, c);
  }

  // The other blocks in reverse, recomputing from their inputs.
  const int top = first_kept - 1;
  int restored = -1;
  if (offload && top >= 1) {
    restored = r_.Add(kResH2d, "restore " + Name(top), H2dSeconds(act_bytes, true), {saved[top]},
                      host_.t, host_.cause);
    h2d_bytes += act_bytes;
    Sync(restored);
  }
  const double block_bwd = T * (bwd_per_token + rates_.recompute_s) + 2 * launch;
  for (int u = top; u >= 1; --u) {
    const int it = schedule_.backward_item(u);
    const int acquire = Acquire(it);
    const int inputs = restored;
    if (offload && u > 1) {
      restored = r_.Add(kResH2d, "restore " + Name(u - 1), H2dSeconds(act_bytes, true), {saved[u - 1]},
                        host_.t, host_.cause);
      h2d_bytes += act_bytes;
      Sync(restored);
    }
    // A resident unit on one GPU accumulates into its own gradient, not the ring's.
    const int accumulator = Resident(u) && W_ == 1 ? -1 : gacc_free_[next_gacc_];
    c = Compute("backward " + Name(u),
                block_bwd + rates_.grad_s_per_param * static_cast<double>(shape_.unit_params[u]),
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
                           AllGatherSeconds(numel, job_, rates_, job_.param_bytes), {op}, gather_thread_.t, gather_thread_.cause,
                           kGatherLane);
    const int copy = r_.Add(kExchangeCopy, "gathered " + Name(pick),
                            static_cast<double>(numel) * AllGatherCopyBytes(H_, job_.param_bytes) /
                                (rates_.host_memory_gbps * 1e9),
                            {net}, gather_thread_.t, gather_thread_.cause, kGatherLane);
    gather_thread_.WaitFor(r_, copy);
    updated_[pick] = copy;
  }
}

}  // namespace slidedp::step_model_internal
