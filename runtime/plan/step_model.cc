// StepModel: see step_model.h. The replay (step_replay.h) keeps every operation with its
// start, end and cause; the prediction walks the critical path back from the step's end.
#include "runtime/plan/step_model.h"

#include <algorithm>
#include <cmath>

#include "runtime/plan/step_replay.h"

namespace slidedp {

using namespace step_model_internal;  // NOLINT: the replay's types and exchange costs

int64_t ResidentUnits(const ModelShape& shape, const JobShape& job, const PlanKnobs& knobs, int64_t memory_bytes,
                      const Rates& rates) {
  const int64_t units = shape.num_units();
  const int64_t requested = knobs.policy.resident_units;
  if (requested >= 0) return std::min(requested, units);
  if (!job.cuda || job.hosts > 1) return 0;
  // The most that fit beside the plan without kept blocks, with the kept blocks' headroom.
  int64_t most = units;
  if (memory_bytes > 0) {
    PlanKnobs bare = knobs;
    bare.policy.resident_units = 0;
    bare.policy.kept_blocks = 0;
    const int64_t usable = AutoCountsBytes(memory_bytes);
    const int64_t base = EstimateMemory(shape, job, bare).total;
    if (base >= usable) return 0;
    most = ResidentUnitsWithin(shape.unit_params, job.workers, usable - base, job.moments);
  }
  // Every count from none to the most (a prediction costs tens of microseconds), each
  // with the kept blocks the memory then leaves; ascending, so that ties keep fewer
  // resident units.
  int64_t best = -1;
  double best_s = 0.0;
  for (int64_t n = 0; n <= most; ++n) {
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
  const Staging staging = PlaceStaged(shape.unit_params, residency, knobs.policy.staged_updates, job.workers,
                                      job.param_bytes, job.moments, knobs.policy.chunk_elems);
  for (int u = 0; u < shape.num_units(); ++u) {
    if (residency.resident(u)) p.resident_params += shape.unit_params[u];
    if (staging.lane[u] >= 0) p.staged_params += shape.unit_params[u];
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
    const int grad_bytes = GradBytes(Bf16Landing(job, knobs.policy));
    for (int u = 0; u < shape.num_units(); ++u) {
      const int64_t n = shape.unit_params[u];
      if (residency.resident(u)) {
        // Its gradient summed whole on every host, nothing gathered after the update.
        p.network_bytes += ResidentSumBytes(n, H);
        network_s += ResidentSumSeconds(n, job, rates);
        continue;
      }
      p.network_bytes += ReduceScatterBytes(n, H, grad_bytes) + AllGatherBytes(n, H, job.param_bytes);
      network_s += ReduceScatterSeconds(n, job, rates, grad_bytes) + AllGatherSeconds(n, job, rates, job.param_bytes);
    }
    p.busy[kResNetwork] = network_s;
    host_bytes += static_cast<double>(streamed_params) * ExchangeHostBytesPerParam(H, job.param_bytes, grad_bytes) +
                  static_cast<double>(p.resident_params) * ResidentSumHostBytesPerParam(H);
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
