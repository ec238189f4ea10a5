// Policy: see policy.h.
#include "runtime/plan/policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace slidedp {

std::vector<PlanKnobs> EnumerateKnobs(const JobShape& job, const PlanKnobs& base, const SearchSpace& space) {
  const int W = std::max(1, job.workers);
  const int64_t per_worker = std::max<int64_t>(1, job.sequences / W);
  std::vector<int64_t> micro = {base.micro_batch_size};
  if (space.vary_micro_batch) {
    micro.clear();
    for (int64_t d = per_worker; d >= 1; --d) {
      if (per_worker % d == 0) micro.push_back(d);
    }
  }
  std::vector<ParamRoute> param_routes = {base.policy.param_route};
  std::vector<GradRoute> grad_routes = {base.policy.grad_route};
  if (space.vary_routes && W > 1) {
    param_routes = {ParamRoute::kReplicate, ParamRoute::kScatterAllGather};
    grad_routes = {GradRoute::kGatherHost, GradRoute::kReduceScatter, GradRoute::kReduceOne};
  }
  std::vector<PlanKnobs> out;
  for (int64_t mbs : micro) {
    for (int depth : space.prefetch_depths) {
      for (const ActivationPlacement act : space.activations) {
        for (const ParamRoute pr : param_routes) {
          for (const GradRoute gr : grad_routes) {
            PlanKnobs k = base;
            k.micro_batch_size = mbs;
            k.grad_accum = space.vary_micro_batch ? per_worker / mbs : base.grad_accum;
            k.policy.prefetch_depth = depth;
            k.policy.activations = act;
            k.policy.param_route = pr;
            k.policy.grad_route = gr;
            // bf16 landing needs a route whose devices reduce.
            if (k.policy.grad_landing == GradLanding::kBf16 && !DeviceReducesGradient(gr, W)) continue;
            out.push_back(std::move(k));
          }
        }
      }
    }
  }
  return out;
}

absl::StatusOr<PlanChoice> ChoosePlan(const ModelShape& shape, const JobShape& job, const PlanKnobs& base,
                                      const Rates& rates, int64_t budget_bytes, const SearchSpace& space) {
  PlanChoice choice;
  choice.budget_bytes = budget_bytes;
  int best = -1;
  int smallest = -1;
  for (PlanKnobs& k : EnumerateKnobs(job, base, space)) {
    // The resident units worth their memory, then as many kept blocks as the budget
    // leaves room for with these knobs (ResidentUnits weighs the two together).
    if (k.policy.resident_units < 0) k.policy.resident_units = ResidentUnits(shape, job, k, budget_bytes, rates);
    if (k.policy.kept_blocks < 0) k.policy.kept_blocks = KeptBlocks(shape, job, k, budget_bytes);
    Candidate c;
    c.knobs = k;
    c.prediction = PredictStep(shape, job, k, rates);
    c.fits = budget_bytes <= 0 || c.prediction.memory.total <= budget_bytes;
    choice.candidates.push_back(std::move(c));
    const int i = static_cast<int>(choice.candidates.size()) - 1;
    const Candidate& now = choice.candidates[i];
    if (smallest < 0 || now.prediction.memory.total < choice.candidates[smallest].prediction.memory.total) {
      smallest = i;
    }
    if (!now.fits) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const StepPrediction& b = choice.candidates[best].prediction;
    // Strictly faster, or as fast (within a part in a million) with fewer bytes over
    // PCIe (traffic the model prices at nothing when it hides, such as offloaded
    // activations, measured 0-5% slower on the H200 host), then with less memory.
    const double tol = 1e-6 * b.step_seconds;
    const int64_t now_pcie = now.prediction.h2d_bytes + now.prediction.d2h_bytes;
    const int64_t best_pcie = b.h2d_bytes + b.d2h_bytes;
    if (now.prediction.step_seconds < b.step_seconds - tol ||
        (std::abs(now.prediction.step_seconds - b.step_seconds) <= tol &&
         (now_pcie < best_pcie || (now_pcie == best_pcie && now.prediction.memory.total < b.memory.total)))) {
      best = i;
    }
  }
  if (best < 0) {
    const int64_t need = smallest >= 0 ? choice.candidates[smallest].prediction.memory.total : 0;
    return absl::ResourceExhaustedError(absl::StrCat(
        "no plan fits the GPU memory budget of ", budget_bytes, " bytes; the smallest needs about ", need,
        " bytes (lower seq_len, or raise policy.gpu_memory_budget_bytes)"));
  }
  choice.knobs = choice.candidates[best].knobs;
  choice.prediction = choice.candidates[best].prediction;
  return choice;
}

std::optional<PlanKnobs> Shrink(const PlanKnobs& knobs) {
  PlanKnobs k = knobs;
  // Kept graphs first: they are the largest part that only costs time to give up.
  if (k.policy.kept_blocks > 0) {
    k.policy.kept_blocks /= 2;
    return k;
  }
  // Then resident units: their state goes back to host memory, the CPU updates them.
  if (k.policy.resident_units > 0) {
    k.policy.resident_units /= 2;
    return k;
  }
  if (k.micro_batch_size > 1) {
    // The largest divisor below the current size keeps the worker's sequences.
    const int64_t seqs = k.micro_batch_size * k.grad_accum;
    for (int64_t d = k.micro_batch_size - 1; d >= 1; --d) {
      if (k.micro_batch_size % d == 0) {
        k.micro_batch_size = d;
        k.grad_accum = seqs / d;
        return k;
      }
    }
  }
  if (k.policy.activations != ActivationPlacement::kHost) {
    k.policy.activations = ActivationPlacement::kHost;
    return k;
  }
  if (k.policy.prefetch_depth > 1) {
    --k.policy.prefetch_depth;
    return k;
  }
  if (k.policy.loss_chunk_tokens > 64) {
    k.policy.loss_chunk_tokens /= 2;
    return k;
  }
  return std::nullopt;
}

int64_t MemoryBudget(int64_t configured, int64_t device_free) {
  // Leave room for what the engine does not own (other processes' growth, fragmentation).
  const int64_t reserve = int64_t{1} << 30;
  const int64_t free_budget = device_free > 0 ? std::max<int64_t>(device_free - reserve, 0) : 0;
  if (configured > 0 && free_budget > 0) return std::min(configured, free_budget);
  if (configured > 0) return configured;
  return free_budget;
}

bool DriftMonitor::Observe(double predicted_seconds, double measured_seconds) {
  if (predicted_seconds <= 0 || measured_seconds <= 0) return false;
  const double d = measured_seconds / predicted_seconds - 1.0;
  drift_ = have_ ? smoothing_ * drift_ + (1 - smoothing_) * d : d;
  have_ = true;
  const double mag = std::abs(drift_);
  if (!armed_) {
    if (mag < threshold_ / 2) armed_ = true;
    return false;
  }
  over_ = mag > threshold_ ? over_ + 1 : 0;
  if (over_ < patience_) return false;
  over_ = 0;
  armed_ = false;
  return true;
}

void DriftMonitor::Reset() {
  have_ = false;
  drift_ = 0.0;
  over_ = 0;
}

std::string DescribeKnobs(const PlanKnobs& k) {
  std::string text = absl::StrCat(k.micro_batch_size, " x ", k.grad_accum, " micro-batches, prefetch ",
                                  k.policy.prefetch_depth, ", activations ", NameOf(k.policy.activations), ", ",
                                  NameOf(k.policy.param_route), "/", NameOf(k.policy.grad_route));
  if (k.policy.kept_blocks > 0) absl::StrAppend(&text, ", ", k.policy.kept_blocks, " blocks kept");
  if (k.policy.resident_units > 0) absl::StrAppend(&text, ", ", k.policy.resident_units, " units resident");
  return text;
}

}  // namespace slidedp
