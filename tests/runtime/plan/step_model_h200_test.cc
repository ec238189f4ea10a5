// The step-time model against the H200 figures of tests/bench/RESULTS.md: the step_bench
// runs, the plan sweeps it was fitted to, and the proof sweeps the policy is judged on
// (issue 5's criteria).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"
#include "tests/runtime/plan/plan_test_shapes.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // plan_test_shapes.h

// The step_bench figures of tests/bench/RESULTS.md (H200 host, 2026-12-03, prefetch 2)
// against the model with that engine's rates (RatesOf20261203): within 6% each (1.789 s for 1.764, 1.232 for
// 1.301 without clipping, 2.504 for 2.459, 4.073 for 4.222, 15.46 for 15.59, 7B 14.56
// for 15.25).
TEST(StepModel, MatchesTheH200Results) {
  struct Run {
    const char* model;
    int64_t sequences, mbs, accum;
    bool clip;
    double seconds, peak_gib;
  };
  const Run runs[] = {
      {"qwen2.5-3b", 4, 1, 4, true, 1.764, 16.7},   {"qwen2.5-3b", 4, 1, 4, false, 1.301, 16.7},
      {"qwen2.5-3b", 8, 4, 2, true, 2.459, 19.0},   {"qwen2.5-3b", 16, 4, 4, true, 4.222, 23.6},
      {"qwen2.5-3b", 64, 4, 16, true, 15.588, 51.4}, {"qwen2.5-7b", 32, 4, 8, true, 15.247, 48.1},
  };
  for (const Run& run : runs) {
    const ModelShape shape = ShapeOf(*PresetConfig(run.model));
    JobShape job;
    job.sequences = run.sequences;
    job.seq_len = 4096;
    job.clip = run.clip;
    PlanKnobs k = SweepKnobs(run.mbs, run.accum, 2);
    k.policy.loss_chunk_tokens = 4096;  // step_bench's
    const StepPrediction p = PredictStep(shape, job, k, RatesOf20261203(shape, job));
    SCOPED_TRACE(::testing::Message() << run.model << " " << run.sequences << " clip " << run.clip);
    std::printf("%s %lld clip %d: measured %.3f predicted %.3f (%+.1f%%) %s; GPU %.1f / %.1f GiB\n", run.model,
                (long long)run.sequences, run.clip, run.seconds, p.step_seconds, 100 * (p.step_seconds / run.seconds - 1),
                p.bottleneck.c_str(), p.memory.total / double(int64_t{1} << 30), run.peak_gib);
    EXPECT_NEAR(p.step_seconds / run.seconds, 1.0, 0.15) << p.step_seconds;
    // Memory decides what fits the budget, so it may err high but not low: within
    // [0.9, 1.25] of the measured peak.
    const double mem = p.memory.total / double(int64_t{1} << 30) / run.peak_gib;
    EXPECT_GE(mem, 0.9);
    EXPECT_LE(mem, 1.25);
  }
  // And the bytes of the 7B run: H2D 28.28 GB, D2H 15.23 GB.
  const ModelShape q7 = ShapeOf(*PresetConfig("qwen2.5-7b"));
  JobShape job;
  job.sequences = 16;
  job.seq_len = 4096;
  const StepPrediction p = PredictStep(q7, job, SweepKnobs(4, 4, 2), RatesOf20261203(q7, job));
  EXPECT_NEAR(p.h2d_bytes / 1e9, 28.28, 0.01);
  EXPECT_NEAR(p.d2h_bytes / 1e9, 15.23, 0.01);
}

// The plan sweeps of RESULTS.md ("Step-time model and policy", H200 host, 2026-12-03):
// plan_bench's calibrated rates for each shape and batch, and every plan's measured
// step time (one timed step each, after one warm-up step of the plan). The model was
// revised after these runs (MLP-tile recompute, the host bandwidth AdamW shows, the
// GPU's per-parameter gradient work and per-pass overhead, PCIe bytes breaking ties),
// so this is a fit, not yet the proof: plan_bench on the H200 with the revised model is.
struct SweepRates {
  double h2d, d2h, both, forward, backward, head, adamw, host_memory;
};
struct SweepRow {
  int64_t mbs, accum;
  int prefetch;
  const char* activations;
  bool policy;  // plan_bench's policy chose it
  double measured;
};
struct Sweep {
  const char* model;
  int64_t sequences;
  SweepRates rates;
  std::vector<SweepRow> rows;
};
PlanKnobs RowKnobs(const SweepRow& row) {
  PlanKnobs k = SweepKnobs(row.mbs, row.accum, row.prefetch);
  k.policy.activations = *EnumFromName<ActivationPlacement>(row.activations);
  k.policy.loss_chunk_tokens = 4096;  // plan_bench's
  return k;
}
const std::vector<Sweep>& H200Sweeps() {
  static const std::vector<Sweep>* sweeps = new std::vector<Sweep>{
    {"qwen2.5-3b", 4, {55.2, 55.2, 99.7, 3.46e-07, 7.01e-07, 4.32e-06, 3.78e+09, 64.5}, {
      {4, 1, 1, "device", false, 1.670},
      {4, 1, 1, "host", true, 2.089},
      {4, 1, 2, "device", false, 1.687},
      {4, 1, 2, "host", false, 1.722},
      {2, 2, 1, "device", false, 1.819},
      {2, 2, 1, "host", false, 1.864},
      {2, 2, 2, "device", false, 1.798},
      {2, 2, 2, "host", false, 1.815},
      {1, 4, 1, "device", false, 1.858},
      {1, 4, 1, "host", false, 1.802},
      {1, 4, 2, "device", false, 1.812},
      {1, 4, 2, "host", false, 1.820}}},
    {"qwen2.5-3b", 8, {55.2, 55.3, 95.3, 3.46e-07, 6.96e-07, 4.34e-06, 3.9e+09, 71.5}, {
      {8, 1, 1, "device", false, 2.387},
      {8, 1, 1, "host", true, 2.553},
      {8, 1, 2, "device", false, 2.601},
      {8, 1, 2, "host", false, 2.809},
      {4, 2, 1, "device", false, 2.656},
      {4, 2, 1, "host", false, 2.876},
      {4, 2, 2, "device", false, 2.513},
      {4, 2, 2, "host", false, 2.499},
      {2, 4, 1, "device", false, 2.542},
      {2, 4, 1, "host", false, 2.604},
      {2, 4, 2, "device", false, 2.541},
      {2, 4, 2, "host", false, 2.574},
      {1, 8, 1, "device", false, 2.646},
      {1, 8, 1, "host", false, 2.625},
      {1, 8, 2, "device", false, 2.683},
      {1, 8, 2, "host", false, 2.668}}},
    {"qwen2.5-3b", 16, {55.3, 55.3, 96.1, 3.42e-07, 7.02e-07, 4.33e-06, 3.75e+09, 72.9}, {
      {16, 1, 1, "device", false, 4.653},
      {16, 1, 1, "host", true, 4.611},
      {16, 1, 2, "device", false, 4.600},
      {16, 1, 2, "host", false, 4.712},
      {8, 2, 1, "device", false, 3.984},
      {8, 2, 1, "host", false, 3.961},
      {8, 2, 2, "device", false, 3.991},
      {8, 2, 2, "host", false, 4.023},
      {4, 4, 1, "device", false, 4.118},
      {4, 4, 1, "host", false, 4.081},
      {4, 4, 2, "device", false, 4.081},
      {4, 4, 2, "host", false, 4.100},
      {2, 8, 1, "device", false, 4.264},
      {2, 8, 1, "host", false, 4.172},
      {2, 8, 2, "device", false, 4.180},
      {2, 8, 2, "host", false, 4.214},
      {1, 16, 1, "device", false, 4.390},
      {1, 16, 1, "host", false, 4.455},
      {1, 16, 2, "device", false, 4.420},
      {1, 16, 2, "host", false, 4.438}}},
    {"qwen2.5-7b", 1, {55.3, 55.3, 100.9, 8.93e-07, 1.76e-06, 6.22e-06, 3.48e+09, 55.1}, {
      {1, 1, 1, "device", true, 2.754},
      {1, 1, 1, "host", false, 2.680},
      {1, 1, 2, "device", false, 2.599},
      {1, 1, 2, "host", false, 2.521}}},
    {"qwen2.5-7b", 2, {55.1, 55.3, 91.8, 8.39e-07, 1.68e-06, 6.23e-06, 3.44e+09, 58.3}, {
      {2, 1, 1, "device", false, 3.120},
      {2, 1, 1, "host", false, 3.290},
      {2, 1, 2, "device", false, 3.365},
      {2, 1, 2, "host", false, 3.187},
      {1, 2, 1, "device", true, 3.074},
      {1, 2, 1, "host", false, 3.162},
      {1, 2, 2, "device", false, 3.264},
      {1, 2, 2, "host", false, 3.373}}},
  };
  return *sweeps;
}

Rates RatesOf(const ModelShape& shape, const JobShape& job, const SweepRates& m) {
  Rates r = DefaultRates(shape, job);  // what calibration does not measure
  r.h2d_gbps = m.h2d;
  r.d2h_gbps = m.d2h;
  r.duplex_gbps = m.both;
  r.forward_s = r.recompute_s = m.forward;
  r.backward_s = m.backward;
  r.head_s = m.head;
  r.adamw_params_per_s = m.adamw;
  r.host_memory_gbps = m.host_memory;
  return r;
}

// A sweep as plan_bench ran it: its shape and job, its calibrated rates, and the plan
// ChoosePlan picks with them over plan_bench's space (every split, prefetch 1 and 2).
struct SweepSetup {
  ModelShape shape;
  JobShape job;
  Rates rates;
  PlanKnobs chosen;
};

absl::StatusOr<SweepSetup> SetUpSweep(const Sweep& sw) {
  SweepSetup s;
  s.shape = ShapeOf(*PresetConfig(sw.model));
  s.job.sequences = sw.sequences;
  s.job.seq_len = 4096;
  s.rates = RatesOf(s.shape, s.job, sw.rates);
  SearchSpace space;
  space.prefetch_depths = {1, 2};
  PlanKnobs base = SweepKnobs(sw.sequences, 1);
  base.policy.loss_chunk_tokens = 4096;
  absl::StatusOr<PlanChoice> choice = ChoosePlan(s.shape, s.job, base, s.rates, 0, space);
  if (!choice.ok()) return choice.status();
  s.chosen = choice->knobs;
  return s;
}

TEST(StepModel, MatchesTheH200Sweeps) {
  for (const Sweep& sw : H200Sweeps()) {
    absl::StatusOr<SweepSetup> set = SetUpSweep(sw);
    ASSERT_TRUE(set.ok()) << set.status();
    const auto& [shape, job, rates, chosen_knobs] = *set;
    double best = 1e30, chosen = 0;
    for (const SweepRow& row : sw.rows) {
      const PlanKnobs k = RowKnobs(row);
      const StepPrediction p = PredictStep(shape, job, k, rates);
      const double err = p.step_seconds / row.measured - 1;
      std::printf("%s %lld: %lld x %lld p%d %s measured %.3f predicted %.3f (%+.1f%%) %s\n", sw.model,
                  (long long)sw.sequences, (long long)row.mbs, (long long)row.accum, row.prefetch, row.activations,
                  row.measured, p.step_seconds, 100 * err, p.bottleneck.c_str());
      // Activations on the device within 15%; offloaded ones within 25% (they measured
      // 0-5% slower on average, which the model does not price, and single steps vary).
      EXPECT_LE(std::abs(err), std::string(row.activations) == "device" ? 0.15 : 0.25)
          << sw.model << " " << sw.sequences << ": " << DescribeKnobs(k);
      best = std::min(best, row.measured);
      if (DescribeKnobs(k) == DescribeKnobs(chosen_knobs)) chosen = row.measured;
    }
    std::printf("%s %lld: policy %s measured %.3f, best %.3f (%+.1f%%)\n", sw.model, (long long)sw.sequences,
                DescribeKnobs(chosen_knobs).c_str(), chosen, best, 100 * (chosen / best - 1));
    // The policy's plan was run, and is within 10% of the best measured one (4 of the 5
    // within 1.5%; the 7B at batch 1 +9.2%: prefetch 2 measured 6% faster than 1, which
    // the model does not see).
    EXPECT_GT(chosen, 0.0) << "the policy chose a plan the sweep did not run";
    EXPECT_LE(chosen / best, 1.10) << DescribeKnobs(chosen_knobs);
  }
}

// The proof (RESULTS.md, "the revised model on the H200", 2026-12-03, fourth and fifth
// device calls): plan_bench with the model above unchanged since, 3 timed steps a plan
// after a warm-up step (2 timed at 3.09B x 16, where the time cap stopped the sweep
// after 18 of its 20 plans), prefetch 1 and 2 x placement x every micro-batch split.
// The 7.62B shape at batch 1 ran twice: its policy plan measured 2.821 and 2.584 s, 9%
// apart, so one run cannot tell plans 5% apart there; the policy is judged on the
// two runs' mean of each plan.
const std::vector<Sweep>& H200ProofSweeps() {
  static const std::vector<Sweep>* sweeps = new std::vector<Sweep>{
    {"qwen2.5-3b", 4, {53.7, 54.7, 93.1, 3.46e-07, 7.12e-07, 4.42e-06, 3.42e+09, 60.4}, {
      {4, 1, 1, "device", true, 1.793},  {4, 1, 1, "host", false, 1.781},
      {4, 1, 2, "device", false, 1.945}, {4, 1, 2, "host", false, 1.761},
      {2, 2, 1, "device", false, 1.797}, {2, 2, 1, "host", false, 1.967},
      {2, 2, 2, "device", false, 1.877}, {2, 2, 2, "host", false, 1.850},
      {1, 4, 1, "device", false, 1.885}, {1, 4, 1, "host", false, 1.835},
      {1, 4, 2, "device", false, 1.891}, {1, 4, 2, "host", false, 1.932}}},
    {"qwen2.5-3b", 8, {54.7, 54.8, 89.9, 3.47e-07, 7.15e-07, 4.45e-06, 3.06e+09, 60.6}, {
      {8, 1, 1, "device", true, 2.524},  {8, 1, 1, "host", false, 2.585},
      {8, 1, 2, "device", false, 2.578}, {8, 1, 2, "host", false, 2.541},
      {4, 2, 1, "device", false, 2.518}, {4, 2, 1, "host", false, 2.471},
      {4, 2, 2, "device", false, 2.511}, {4, 2, 2, "host", false, 2.521},
      {2, 4, 1, "device", false, 2.541}, {2, 4, 1, "host", false, 3.042},
      {2, 4, 2, "device", false, 2.778}, {2, 4, 2, "host", false, 2.678},
      {1, 8, 1, "device", false, 2.741}, {1, 8, 1, "host", false, 2.699},
      {1, 8, 2, "device", false, 2.672}, {1, 8, 2, "host", false, 2.680}}},
    {"qwen2.5-3b", 16, {54.2, 55.3, 101.4, 3.47e-07, 7.04e-07, 4.39e-06, 3.76e+09, 69.6}, {
      {16, 1, 1, "device", false, 4.680}, {16, 1, 1, "host", false, 4.703},
      {16, 1, 2, "device", false, 4.752}, {16, 1, 2, "host", false, 4.718},
      {8, 2, 1, "device", true, 4.015},   {8, 2, 1, "host", false, 4.067},
      {8, 2, 2, "device", false, 4.048},  {8, 2, 2, "host", false, 4.140},
      {4, 4, 1, "device", false, 4.122},  {4, 4, 1, "host", false, 4.140},
      {4, 4, 2, "device", false, 4.150},  {4, 4, 2, "host", false, 4.206},
      {2, 8, 1, "device", false, 4.230},  {2, 8, 1, "host", false, 4.276},
      {2, 8, 2, "device", false, 4.295},  {2, 8, 2, "host", false, 4.315},
      {1, 16, 1, "device", false, 4.479}, {1, 16, 1, "host", false, 4.496}}},
    {"qwen2.5-7b", 1, {55.1, 55.4, 100.8, 8.8e-07, 1.78e-06, 6.32e-06, 4e+09, 66.3}, {
      {1, 1, 1, "device", true, 2.821},  {1, 1, 1, "host", false, 2.709},
      {1, 1, 2, "device", false, 2.529}, {1, 1, 2, "host", false, 2.694}}},
    {"qwen2.5-7b", 1, {55.4, 55.4, 101.5, 8.8e-07, 1.77e-06, 6.31e-06, 4.15e+09, 68.3}, {
      {1, 1, 1, "device", true, 2.584},  {1, 1, 1, "host", false, 2.767},
      {1, 1, 2, "device", false, 2.672}, {1, 1, 2, "host", false, 2.659},
      {1, 1, 3, "device", false, 2.621}, {1, 1, 3, "host", false, 2.604}}},
    {"qwen2.5-7b", 2, {55.5, 55.4, 101.4, 8.55e-07, 1.7e-06, 6.25e-06, 4.24e+09, 93.5}, {
      {2, 1, 1, "device", true, 2.766},  {2, 1, 1, "host", false, 2.818},
      {2, 1, 2, "device", false, 2.813}, {2, 1, 2, "host", false, 2.948},
      {1, 2, 1, "device", false, 2.962}, {1, 2, 1, "host", false, 2.806},
      {1, 2, 2, "device", false, 2.860}, {1, 2, 2, "host", false, 3.071}}},
    {"qwen2.5-7b", 4, {55.5, 55.3, 101.5, 8.29e-07, 1.69e-06, 6.31e-06, 4.29e+09, 65.2}, {
      {4, 1, 1, "device", true, 3.550},  {4, 1, 1, "host", false, 3.717},
      {4, 1, 2, "device", false, 3.457}, {4, 1, 2, "host", false, 3.550},
      {2, 2, 1, "device", false, 3.473}, {2, 2, 1, "host", false, 3.572},
      {2, 2, 2, "device", false, 3.698}, {2, 2, 2, "host", false, 3.533},
      {1, 4, 1, "device", false, 3.692}, {1, 4, 1, "host", false, 4.035},
      {1, 4, 2, "device", false, 3.715}, {1, 4, 2, "host", false, 3.828}}},
  };
  return *sweeps;
}

// Issue 5's criteria on the proof runs: for each of the 6 configurations (2 shapes x 3
// batches) the policy's plan is predicted within 15% of its measured time and measures
// within 5% of the best plan of the sweep; and no plan of any sweep is predicted more
// than 20% off (the largest was 18.3%, an offloaded 7.62B plan).
TEST(StepModel, PredictsTheH200ProofSweeps) {
  struct Config {
    std::string chosen;
    std::map<std::string, std::vector<double>> measured;  // plan -> one time per run
    int runs = 0;
  };
  std::map<std::pair<std::string, int64_t>, Config> configs;
  for (const Sweep& sw : H200ProofSweeps()) {
    absl::StatusOr<SweepSetup> set = SetUpSweep(sw);
    ASSERT_TRUE(set.ok()) << set.status();
    const auto& [shape, job, rates, chosen_knobs] = *set;
    const std::string chosen = DescribeKnobs(chosen_knobs);
    Config& config = configs[{sw.model, sw.sequences}];
    if (config.runs++ > 0) {
      EXPECT_EQ(config.chosen, chosen) << "the repeated run's rates changed the plan";
    }
    config.chosen = chosen;
    bool ran_chosen = false;
    for (const SweepRow& row : sw.rows) {
      const PlanKnobs k = RowKnobs(row);
      const double err = PredictStep(shape, job, k, rates).step_seconds / row.measured - 1;
      SCOPED_TRACE(::testing::Message() << sw.model << " x" << sw.sequences << ": " << DescribeKnobs(k));
      EXPECT_EQ(row.policy, DescribeKnobs(k) == chosen) << "plan_bench's policy and ChoosePlan's differ";
      EXPECT_LE(std::abs(err), 0.20);
      if (DescribeKnobs(k) == chosen) {
        ran_chosen = true;
        EXPECT_LE(std::abs(err), 0.15) << "the policy's plan";
      }
      config.measured[DescribeKnobs(k)].push_back(row.measured);
    }
    EXPECT_TRUE(ran_chosen) << sw.model << " x" << sw.sequences << ": the sweep did not run the policy's plan";
  }
  EXPECT_EQ(configs.size(), 6u);
  for (const auto& [key, config] : configs) {
    double best = 1e30, chosen = 0;
    for (const auto& [plan, times] : config.measured) {
      if (int(times.size()) != config.runs) continue;  // compare plans every run measured
      double mean = 0;
      for (double t : times) mean += t / times.size();
      best = std::min(best, mean);
      if (plan == config.chosen) chosen = mean;
    }
    std::printf("%s x%lld: policy %s %.3f s, best %.3f s (%+.1f%%) over %d run(s)\n", key.first.c_str(),
                (long long)key.second, config.chosen.c_str(), chosen, best, 100 * (chosen / best - 1), config.runs);
    EXPECT_LE(chosen / best, 1.05) << key.first << " x" << key.second << ": " << config.chosen;
  }
}

}  // namespace
}  // namespace slidedp
