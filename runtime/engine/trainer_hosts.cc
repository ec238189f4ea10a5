// EngineTrainer's part for a job over several hosts (engine_trainer.h, issue 24): the
// rendezvous and the network's measurement, the whole masters and streamed copies
// gathered from every host's shard, sums over the hosts, each host's checkpoint folder
// and a resume that every host must agree on. The job's thread only.
#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/engine/clock.h"
#include "runtime/engine/engine_trainer.h"
#include "runtime/engine/host_group.h"
#include "runtime/plan/plan_manager.h"

namespace slidedp {
namespace trainer_internal {
namespace {

struct CrossHostRate {
  double gbps = 0;             // bytes a host sends a second (1e9) in an all-gather
  double latency_seconds = 0;  // one small exchange
};

// Times exchanges between the hosts at job start: a few 8-byte all-reduces (the
// latency) and all-gathers of 64 MiB (the bandwidth), the fastest of each; every host
// takes host 0's figures (summed with zeros), so that all predict alike.
absl::StatusOr<CrossHostRate> MeasureCrossHost(HostGroup& g) {
  CrossHostRate r;
  double best_small = 1e30, best_big = 1e30;
  std::vector<double> one{0.0};
  at::Tensor big = at::zeros({int64_t{16} << 20}, at::kFloat);
  for (int i = 0; i < 3; ++i) {
    double t0 = MonotonicSeconds();
    if (absl::Status s = g.AllReduceSum(one); !s.ok()) return s;
    best_small = std::min(best_small, MonotonicSeconds() - t0);
    const int64_t before = g.bytes_sent();
    t0 = MonotonicSeconds();
    if (absl::Status s = g.AllGather(big); !s.ok()) return s;
    const double t = MonotonicSeconds() - t0;
    if (t < best_big) {
      best_big = t;
      r.gbps = static_cast<double>(g.bytes_sent() - before) / std::max(t, 1e-9) / 1e9;
    }
  }
  r.latency_seconds = best_small;
  std::vector<double> host0{g.rank() == 0 ? r.gbps : 0.0, g.rank() == 0 ? r.latency_seconds : 0.0};
  if (absl::Status s = g.AllReduceSum(host0); !s.ok()) return s;
  r.gbps = host0[0];
  r.latency_seconds = host0[1];
  return r;
}

}  // namespace

absl::StatusOr<EngineTrainer::HostLinks> ConnectHosts(const HostsConfig& h, PlanManager& plan) {
  HostGroupOptions o;
  o.address = h.address;
  o.port = h.port;
  o.hosts = h.count;
  o.rank = h.rank;
  o.timeout_seconds = h.timeout_seconds;
  absl::StatusOr<std::unique_ptr<HostGroup>> trainer = HostGroup::Connect(o);
  if (!trainer.ok()) return trainer.status();
  EngineTrainer::HostLinks links;
  absl::StatusOr<std::unique_ptr<HostGroup>> link = (*trainer)->Channel("link");
  if (!link.ok()) return link.status();
  absl::StatusOr<std::unique_ptr<HostGroup>> update = (*trainer)->Channel("update");
  if (!update.ok()) return update.status();
  // The network between the hosts, for the step model (the same figures on every host).
  absl::StatusOr<CrossHostRate> rate = MeasureCrossHost(**trainer);
  if (!rate.ok()) return rate.status();
  plan.SetCrossHostRate(rate->gbps, rate->latency_seconds);
  links.trainer = std::move(*trainer);
  links.link = std::move(*link);
  links.update = std::move(*update);
  return links;
}

absl::StatusOr<std::vector<at::Tensor>> EngineTrainer::WholeMasters() {
  std::vector<at::Tensor> whole;
  for (int u = 0; u < state_->num_units(); ++u) {
    const int64_t sb = state_->shard_begin(u), se = state_->shard_end(u);
    at::Tensor w = at::zeros({state_->layout().units[u].numel}, at::kFloat);
    if (se > sb) w.narrow(0, sb, se - sb).copy_(state_->unit(u).master);
    if (absl::Status s = hosts_.trainer->AllGather(w); !s.ok()) return s;
    whole.push_back(std::move(w));
  }
  return whole;
}

absl::Status EngineTrainer::GatherParams() {
  if (hosts_.trainer == nullptr) return absl::OkStatus();
  for (int u = 0; u < state_->num_units(); ++u) {
    if (absl::Status s = hosts_.trainer->AllGather(state_->unit(u).params); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> EngineTrainer::SumOverHosts(double value) {
  if (hosts_.trainer == nullptr) return value;
  std::vector<double> v{value};
  if (absl::Status s = hosts_.trainer->AllReduceSum(v); !s.ok()) return s;
  return v[0];
}

std::string EngineTrainer::HostCheckpointDir(const std::string& dir) const {
  if (hosts_.trainer == nullptr) return dir;
  return (std::filesystem::path(dir) / absl::StrCat("host-", hosts_.trainer->rank(), "-of-", hosts_.trainer->hosts()))
      .string();
}

std::vector<CheckpointUnit> EngineTrainer::CheckpointUnits() {
  std::vector<CheckpointUnit> units;
  for (int u = 0; u < state_->num_units(); ++u) {
    UnitState& us = state_->unit(u);
    // This host's shard of the unit (all of it on one host).
    units.push_back(CheckpointUnit{UnitName(u, state_->num_units()), us.master.numel(), us.master.data_ptr<float>(),
                                   state_->moments(u)});
  }
  return units;
}

absl::Status EngineTrainer::Restore(const std::string& job_from) {
  if (hosts_.trainer != nullptr && !std::filesystem::is_directory(job_from)) {
    return absl::InvalidArgumentError(absl::StrCat("resume_from: ", job_from, " is not a folder; a job over ",
                                                   hosts_.trainer->hosts(),
                                                   " hosts resumes from its checkpoint folder (each host its shard)"));
  }
  absl::Status restored = RestoreHere(HostCheckpointDir(job_from));
  if (hosts_.trainer == nullptr) return restored;
  // Every host must continue from the same step, a failed restore counting as step -1.
  absl::StatusOr<bool> same = SameOnEveryHost(*hosts_.trainer, restored.ok() ? static_cast<double>(step_) : -1.0);
  if (!same.ok()) return same.status();
  if (!restored.ok()) return restored;
  if (!*same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resume_from: host ", hosts_.trainer->rank(), " found step ", step_,
        " but not every host has a checkpoint of that step (or one failed to restore)"));
  }
  if (absl::Status s = GatherParams(); !s.ok()) return s;
  // The resident units' replicas from every host's restored shard.
  if (resident_ != nullptr) {
    if (absl::Status s = resident_->FromHost(); !s.ok()) return s;
  }
  ForgetHostBytes();
  return absl::OkStatus();
}

}  // namespace trainer_internal
}  // namespace slidedp
