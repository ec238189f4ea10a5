// Policy: the plan search of DESIGN.md ("Step-time model and policy"). Enumerates the
// knobs (micro-batch size and count for the same global batch, prefetch depth,
// activation placement, and with several workers the parameter and gradient routes;
// with policy.resident_units -1 each candidate keeps the resident units ResidentUnits
// finds worth their GPU memory, and with policy.kept_blocks -1 as many blocks' graphs
// as then fit),
// predicts each candidate with the step model, drops those over the GPU memory budget
// and picks the fastest (ties: fewer PCIe bytes, then less memory, then enumeration
// order), deterministically.
// Also the OOM fallback (Shrink) and the re-plan trigger (DriftMonitor).
// Pure C++; Choose/Shrink are stateless, a DriftMonitor belongs to one job's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/step_model.h"

namespace slidedp {

struct Candidate {
  PlanKnobs knobs;
  StepPrediction prediction;
  bool fits = false;  // predicted memory within the budget
};

struct PlanChoice {
  PlanKnobs knobs;
  StepPrediction prediction;
  int64_t budget_bytes = 0;           // 0: unlimited
  std::vector<Candidate> candidates;  // every candidate evaluated, in enumeration order
};

// What the search may vary; the rest of `base` is kept.
struct SearchSpace {
  std::vector<int> prefetch_depths = {1, 2, 3, 4};
  std::vector<ActivationPlacement> activations = {ActivationPlacement::kDevice, ActivationPlacement::kHost};
  bool vary_micro_batch = true;
  bool vary_routes = true;  // only with several workers
};

// Every candidate: `base` with the knobs of `space` varied. Micro-batch sizes are the
// divisors of the sequences a worker gets (grad_accum the quotient).
std::vector<PlanKnobs> EnumerateKnobs(const JobShape& job, const PlanKnobs& base, const SearchSpace& space);

// The fastest candidate whose memory fits `budget_bytes` (0: no limit).
// RESOURCE_EXHAUSTED when none fits, naming the smallest plan's memory.
absl::StatusOr<PlanChoice> ChoosePlan(const ModelShape& shape, const JobShape& job, const PlanKnobs& base,
                                      const Rates& rates, int64_t budget_bytes,
                                      const SearchSpace& space = SearchSpace());

// After a GPU out-of-memory with `knobs`: the next smaller plan, in this order: half
// the kept blocks (down to none), half the resident units (down to none), fewer
// sequences per micro-batch (more micro-batches, same global batch), activations to
// host memory, a smaller prefetch depth, a smaller loss chunk. Empty when nothing is
// left to shrink.
std::optional<PlanKnobs> Shrink(const PlanKnobs& knobs);

// The budget the plan must fit: the job's `configured` budget if set (> 0), capped by
// the device's free memory less a reserve when known (> 0); 0: unlimited.
int64_t MemoryBudget(int64_t configured, int64_t device_free);

// Text of the knobs, e.g. "4 x 2 micro-batches, prefetch 2, activations device,
// replicate/gather_host", ", 12 blocks kept" when blocks keep their graph and ", 5 units
// resident" when units live on a GPU.
std::string DescribeKnobs(const PlanKnobs& knobs);

// Re-plan trigger with hysteresis: the relative drift of measured against predicted
// step time, smoothed over steps, must exceed `threshold` for `patience` steps in a row;
// after a trigger it stays quiet until the drift has been back under threshold / 2
// (a new plan's prediction is then judged afresh).
class DriftMonitor {
 public:
  DriftMonitor(double threshold, int patience, double smoothing = 0.5)
      : threshold_(threshold), patience_(patience), smoothing_(smoothing) {}
  // One step's figures; true when the plan should be recomputed now.
  bool Observe(double predicted_seconds, double measured_seconds);
  // The smoothed relative drift (measured / predicted - 1).
  double drift() const { return drift_; }
  // After a re-plan: the next prediction starts a fresh average.
  void Reset();

 private:
  const double threshold_;
  const int patience_;
  const double smoothing_;
  double drift_ = 0.0;
  bool have_ = false;
  int over_ = 0;
  bool armed_ = true;
};

}  // namespace slidedp
