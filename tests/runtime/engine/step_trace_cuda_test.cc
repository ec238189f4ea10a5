// The trace of real steps on a GPU (skipped without one): the compute stream runs one
// kernel after another, so its spans must not overlap; a kept block has one span a
// micro-batch each way and the head one a micro-batch ("head": its loss and backward),
// whose slots are held across the micro-batches with other units' work in between.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

struct TracedSpan {
  std::string name;
  double ts = 0.0, dur = 0.0;
};

// The spans of `track` on worker 0, by start time.
std::vector<TracedSpan> TrackSpans(const std::string& path, const std::string& track) {
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::map<std::pair<int, int>, std::string> tracks;
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
  }
  std::vector<TracedSpan> spans;
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("pid").get<int>() != 0) continue;
    if (tracks[{e.at("pid"), e.at("tid")}] != track) continue;
    spans.push_back({e.at("name"), e.at("ts"), e.at("dur")});
  }
  std::sort(spans.begin(), spans.end(), [](const TracedSpan& a, const TracedSpan& b) { return a.ts < b.ts; });
  return spans;
}

TEST(StepTraceCuda, ComputeSpansDoNotOverlapAndTheHeadHasOneAMicroBatch) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  constexpr int kSteps = 2, kMicroBatches = 3;
  TrainConfig c = testing::TinyTrainConfig(kSteps);
  c.device = DeviceKind::kCuda;
  c.workers = 1;
  c.micro_batch_size = 1;
  c.grad_accum = kMicroBatches;
  c.policy.kept_blocks = 1;
  c.policy.resident_units = 0;
  c.trace_file = ::testing::TempDir() + "/step_trace_cuda_test.json";
  auto t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  for (int s = 0; s < kSteps; ++s) ASSERT_TRUE((*t)->Step().ok());  // the trace is written after each

  const std::vector<TracedSpan> compute = TrackSpans(c.trace_file, "compute");
  ASSERT_FALSE(compute.empty());
  std::map<std::string, int> count;
  for (size_t i = 0; i < compute.size(); ++i) {
    ++count[compute[i].name];
    if (i > 0) {
      const TracedSpan& prev = compute[i - 1];
      EXPECT_LE(prev.ts + prev.dur, compute[i].ts + 1.0)  // microseconds; 1 us of rounding
          << "'" << prev.name << "' overlaps '" << compute[i].name << "'";
    }
  }
  const std::string last_block = "block " + std::to_string(PresetConfig("tiny")->num_layers - 1);
  EXPECT_EQ(count["head"], kSteps * kMicroBatches);
  EXPECT_EQ(count["forward " + last_block], kSteps * kMicroBatches);
  EXPECT_EQ(count["backward " + last_block], kSteps * kMicroBatches);
  EXPECT_EQ(count["backward head"], 0);
}

}  // namespace
}  // namespace slidedp
