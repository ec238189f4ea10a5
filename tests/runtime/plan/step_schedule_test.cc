// The step schedule (runtime/plan/step_schedule.h) is the one the engine runs and the
// one the step model replays: the worker's fetches, takes and releases of its slots on
// the CPU device, recorded through the fault seam, are StepSchedule::Events() for
// several unit counts, tied heads, prefetch depths, micro-batch counts and workers, and
// so are the step model's replayed ones.
#include "runtime/plan/step_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "runtime/engine/fault_injection.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/param_layout.h"
#include "runtime/plan/step_model.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

using Op = StepSchedule::Op;

std::string Show(const std::vector<StepSchedule::Event>& events) {
  std::string s;
  for (const StepSchedule::Event& e : events) s += ToString(e) + ", ";
  return s;
}

TEST(StepSchedule, ItemsSlotsAndPrefetchesOfATiedModel) {
  // Embedding, blocks 0 and 1, head: forward 0 1 2, head 3, table 0, backward 2 1.
  const StepSchedule s(/*num_units=*/4, /*tied_head=*/true, /*prefetch_depth=*/2);
  std::vector<int> units;
  for (const StepSchedule::Item& it : s.items()) units.push_back(it.unit);
  EXPECT_EQ(units, (std::vector<int>{0, 1, 2, 3, 0, 2, 1}));
  EXPECT_EQ(s.num_slots(), 4);
  EXPECT_EQ(s.head_item(), 3);
  EXPECT_EQ(s.table_item(), 4);
  EXPECT_EQ(s.backward_item(2), 5);
  EXPECT_EQ(s.backward_item(1), 6);
  EXPECT_EQ(s.forward_end(), 5);
  for (int i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s.item(i).slot, i % 4);
    EXPECT_EQ(s.item(i).prefetch, i + 2 < s.size() ? i + 2 : -1);
    EXPECT_EQ(s.item(i).prefetch_after_release, i < 3) << i;
  }
  EXPECT_EQ(s.block_unit(1), 2);
  EXPECT_EQ(s.head_unit(), 3);
  EXPECT_EQ(s.num_blocks(), 2);
  EXPECT_EQ(s.unit_name(s.embedding_unit()), "embedding");
  EXPECT_EQ(s.unit_name(s.block_unit(1)), "block 1");
  EXPECT_EQ(s.unit_name(s.head_unit()), "head");
  EXPECT_EQ(StepSchedule(4, false, 0).prefetch_depth(), 1);
  EXPECT_EQ(StepSchedule::SlotsFor(0), 3);
  EXPECT_EQ(StepSchedule(4, false, 1).table_item(), -1);
  EXPECT_EQ(StepSchedule(4, false, 1).backward_item(2), 4);
}

TEST(StepSchedule, EventsOfDepthOne) {
  // Untied, one block: forward 0 1, head 2, backward 1.
  const StepSchedule s(3, false, 1);
  const std::vector<StepSchedule::Event> want = {
      {Op::kFetch, 0},   {Op::kAcquire, 0}, {Op::kRelease, 0}, {Op::kFetch, 1}, {Op::kAcquire, 1},
      {Op::kRelease, 1}, {Op::kFetch, 2},   {Op::kAcquire, 2}, {Op::kFetch, 3}, {Op::kRelease, 2},
      {Op::kAcquire, 3}, {Op::kRelease, 3}};
  EXPECT_EQ(s.Events(s.size()), want) << Show(s.Events(s.size()));
  // The forward-only pass stops fetching at the head.
  std::vector<StepSchedule::Event> got = s.Events(s.forward_end());
  EXPECT_EQ(got, (std::vector<StepSchedule::Event>{want[0], want[1], want[2], want[3], want[4], want[5], want[6],
                                                   want[7], want[9]}))
      << Show(got);
}

// A model of `layers` decoder blocks as a Hugging Face folder (tiny Llama shape).
std::string ModelDir(int layers, bool tied) {
  ModelConfig c = testing::TinyLlamaConfig();
  c.num_layers = layers;
  c.tie_word_embeddings = tied;
  const std::string dir = testing::ProcessTempDir("slidedp_schedule", "model_" + std::to_string(layers) +
                                                                          (tied ? "_tied" : "_untied"));
  const ModelLayout layout = BuildLayout(c);
  int64_t most = 0;
  for (const UnitLayout& u : layout.units) most = std::max(most, u.numel);
  static std::vector<float> values;
  values.assign(most, 0.02f);
  EXPECT_TRUE(SaveHfModel(dir, c, layout, [&](int, int) { return values.data(); }, "F32", int64_t{1} << 30).ok());
  return dir;
}

// layers, tied, prefetch depth, grad_accum, workers
using Case = std::tuple<int, bool, int, int, int>;

class ScheduleRun : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleRun, TheWorkerAndTheStepModelFollowTheSchedule) {
  const auto [layers, tied, depth, accum, workers] = GetParam();
  TrainConfig c = testing::TinyTrainConfig(2);
  c.model = ModelDir(layers, tied);
  c.seq_len = 8;
  c.micro_batch_size = 1;
  c.grad_accum = accum;
  c.workers = workers;
  c.policy.prefetch_depth = depth;
  const StepSchedule schedule(layers + 2, tied, depth);
  const std::vector<StepSchedule::Event> want = schedule.Events(schedule.size());

  std::vector<RecordedSlotEvent> log;
  {
    auto t = Trainer::Create(c);
    ASSERT_TRUE(t.ok()) << t.status();
    RecordSlotEvents(&log);
    for (int s = 0; s < 2; ++s) {
      absl::StatusOr<StepStats> st = (*t)->Step();
      ASSERT_TRUE(st.ok()) << st.status();
    }
    RecordSlotEvents(nullptr);
  }
  for (int rank = 0; rank < workers; ++rank) {
    for (int64_t step = 0; step < 2; ++step) {
      std::vector<StepSchedule::Event> got;
      for (const RecordedSlotEvent& e : log) {
        if (e.rank == rank && e.step == step) got.push_back(e.event);
      }
      EXPECT_EQ(got, want) << "worker " << rank << " step " << step << "\n got: " << Show(got)
                           << "\nwant: " << Show(want);
    }
  }

  // The step model replays the same schedule for the same knobs.
  ModelConfig mc = testing::TinyLlamaConfig();
  mc.num_layers = layers;
  mc.tie_word_embeddings = tied;
  JobShape job;
  job.sequences = accum * workers;
  job.seq_len = c.seq_len;
  job.workers = workers;
  job.cuda = false;
  PlanKnobs k;
  k.grad_accum = accum;
  k.policy = c.policy;
  const std::vector<StepSchedule::Event> replayed = ReplaySlotEvents(ShapeOf(mc), job, k);
  EXPECT_EQ(replayed, want) << "\n got: " << Show(replayed) << "\nwant: " << Show(want);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ScheduleRun,
                         ::testing::Values(Case{1, true, 1, 1, 1}, Case{1, false, 1, 2, 1}, Case{3, true, 1, 2, 1},
                                           Case{3, false, 2, 1, 1}, Case{3, true, 2, 3, 1}, Case{2, true, 3, 1, 1},
                                           Case{4, false, 4, 2, 1}, Case{2, true, 6, 1, 1}, Case{2, true, 1, 1, 2},
                                           Case{3, false, 2, 2, 2}),
                         [](const auto& info) {
                           const Case& p = info.param;
                           return "layers" + std::to_string(std::get<0>(p)) + (std::get<1>(p) ? "_tied" : "_untied") +
                                  "_depth" + std::to_string(std::get<2>(p)) + "_accum" +
                                  std::to_string(std::get<3>(p)) + "_workers" + std::to_string(std::get<4>(p));
                         });

// The step model replays the schedule for shapes too large to train here.
TEST(StepSchedule, TheStepModelReplaysItForLargeShapes) {
  for (const char* preset : {"qwen2.5-3b", "qwen2.5-7b"}) {
    const ModelShape shape = ShapeOf(*PresetConfig(preset));
    for (int depth : {1, 2, 3, 5}) {
      for (bool host : {false, true}) {
        // Resident units keep their items (their slots receive the broadcast with
        // several workers; on one GPU their fetch is a wait for their GPU update).
        for (int64_t resident : {0, 5}) {
          JobShape job;
          job.sequences = 4;
          job.seq_len = 4096;
          PlanKnobs k;
          k.grad_accum = 4;
          k.policy.prefetch_depth = depth;
          k.policy.activations = host ? ActivationPlacement::kHost : ActivationPlacement::kDevice;
          k.policy.resident_units = resident;
          const StepSchedule s(shape.num_units(), shape.tied, depth);
          EXPECT_EQ(ReplaySlotEvents(shape, job, k), s.Events(s.size()))
              << preset << " depth " << depth << ", " << resident << " resident";
        }
      }
    }
  }
}

}  // namespace
}  // namespace slidedp
