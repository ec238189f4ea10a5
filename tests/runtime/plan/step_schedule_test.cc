// The step schedule (runtime/plan/step_schedule.h) is the one the engine runs and the
// one the step model replays: the worker's fetches, takes and releases of its slots on
// the CPU device, recorded through the fault seam, are StepSchedule::Events() for
// several unit counts, tied heads, prefetch depths, kept blocks, micro-batch counts and
// workers, and so are the step model's replayed ones.
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
using Pass = StepSchedule::Pass;
using PrefetchAt = StepSchedule::PrefetchAt;

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
    EXPECT_EQ(s.item(i).prefetch_at, i < 3 ? PrefetchAt::kRelease : PrefetchAt::kAcquire) << i;
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
  EXPECT_EQ(s.Events(Pass::kStep), want) << Show(s.Events(Pass::kStep));
  // The forward-only pass stops fetching at the head.
  std::vector<StepSchedule::Event> got = s.Events(Pass::kEval);
  EXPECT_EQ(got, (std::vector<StepSchedule::Event>{want[0], want[1], want[2], want[3], want[4], want[5], want[6],
                                                   want[7], want[9]}))
      << Show(got);
}

TEST(StepSchedule, KeptBlocksAreFetchedOnceIntoSlotsOfTheirOwn) {
  // Tied, blocks 0..3 (units 1..4), the last two kept (units 3, 4), depth 2: forward 0 1 2,
  // kept 3 4, head 5, table 0, backward 2 1.
  const StepSchedule s(/*num_units=*/6, /*tied_head=*/true, /*prefetch_depth=*/2, /*kept_blocks=*/2);
  std::vector<int> units;
  for (const StepSchedule::Item& it : s.items()) units.push_back(it.unit);
  EXPECT_EQ(units, (std::vector<int>{0, 1, 2, 3, 4, 5, 0, 2, 1}));
  EXPECT_EQ(s.kept_blocks(), 2);
  EXPECT_EQ(s.first_kept_unit(), 3);
  EXPECT_TRUE(s.kept(3) && s.kept(4));
  EXPECT_FALSE(s.kept(2) || s.kept(5) || s.kept(0));
  EXPECT_EQ(s.ring_slots(), 4);
  EXPECT_EQ(s.num_slots(), 6);
  EXPECT_EQ(s.forward_item(3), 3);
  EXPECT_EQ(s.head_item(), 5);
  EXPECT_EQ(s.table_item(), 6);
  EXPECT_EQ(s.backward_item(2), 7);
  EXPECT_EQ(s.backward_item(1), 8);
  EXPECT_EQ(s.forward_end(), 7);
  // The ring's items in turn (0 1 2, head, table, backward 2 1), the kept ones after it.
  const std::vector<int> slots = {0, 1, 2, 4, 5, 3, 0, 1, 2};
  for (int i = 0; i < s.size(); ++i) EXPECT_EQ(s.item(i).slot, slots[i]) << i;
  EXPECT_EQ(s.item(3).use, StepSchedule::Use::kKept);
  EXPECT_EQ(s.item(3).prefetch_at, PrefetchAt::kFirstCompute);
  // The step holds the kept items with the head's and releases them after, last first.
  const std::vector<StepSchedule::Event> step = {
      {Op::kFetch, 0},   {Op::kFetch, 1},   {Op::kAcquire, 0}, {Op::kRelease, 0}, {Op::kFetch, 2},
      {Op::kAcquire, 1}, {Op::kRelease, 1}, {Op::kFetch, 3},   {Op::kAcquire, 2}, {Op::kRelease, 2},
      {Op::kFetch, 4},   {Op::kAcquire, 3}, {Op::kFetch, 5},   {Op::kAcquire, 4}, {Op::kFetch, 6},
      {Op::kAcquire, 5}, {Op::kFetch, 7},   {Op::kAcquire, 6}, {Op::kFetch, 8},   {Op::kRelease, 5},
      {Op::kRelease, 6}, {Op::kRelease, 4}, {Op::kRelease, 3}, {Op::kAcquire, 7}, {Op::kRelease, 7},
      {Op::kAcquire, 8}, {Op::kRelease, 8}};
  EXPECT_EQ(s.Events(Pass::kStep), step) << Show(s.Events(Pass::kStep));
  // Evaluation takes and releases them in turn.
  const std::vector<StepSchedule::Event> eval = {
      {Op::kFetch, 0},   {Op::kFetch, 1},   {Op::kAcquire, 0}, {Op::kRelease, 0}, {Op::kFetch, 2},
      {Op::kAcquire, 1}, {Op::kRelease, 1}, {Op::kFetch, 3},   {Op::kAcquire, 2}, {Op::kRelease, 2},
      {Op::kFetch, 4},   {Op::kAcquire, 3}, {Op::kFetch, 5},   {Op::kRelease, 3}, {Op::kAcquire, 4},
      {Op::kFetch, 6},   {Op::kRelease, 4}, {Op::kAcquire, 5}, {Op::kAcquire, 6}, {Op::kRelease, 5},
      {Op::kRelease, 6}};
  EXPECT_EQ(s.Events(Pass::kEval), eval) << Show(s.Events(Pass::kEval));
  // More kept blocks than blocks: all of them.
  EXPECT_EQ(StepSchedule(6, true, 2, 9).kept_blocks(), 4);
  EXPECT_EQ(StepSchedule(6, true, 2, -1).kept_blocks(), 0);
}

// No slot is fetched into before the compute stream released its previous item (in
// this pass or the one before), for any depth and kept count: the slot of a fetch is
// free when the fetch is issued.
TEST(StepSchedule, NoFetchOverwritesASlotInUse) {
  for (int units : {3, 4, 7}) {
    for (bool tied : {false, true}) {
      for (int depth = 1; depth <= 5; ++depth) {
        for (int kept = 0; kept <= units - 2; ++kept) {
          const StepSchedule s(units, tied, depth, kept);
          for (Pass pass : {Pass::kStep, Pass::kEval}) {
            std::vector<int> holder(s.num_slots(), -1);  // slot -> item fetched into it, until released
            for (const StepSchedule::Event& e : s.Events(pass)) {
              const int slot = s.item(e.item).slot;
              if (e.op == Op::kFetch) {
                EXPECT_EQ(holder[slot], -1) << "units " << units << " tied " << tied << " depth " << depth
                                            << " kept " << kept << ": fetch " << e.item << " into slot " << slot
                                            << " held by item " << holder[slot];
                holder[slot] = e.item;
              } else if (e.op == Op::kRelease) {
                EXPECT_EQ(holder[slot], e.item);
                holder[slot] = -1;
              }
            }
          }
        }
      }
    }
  }
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

// layers, tied, prefetch depth, grad_accum, workers, kept blocks
using Case = std::tuple<int, bool, int, int, int, int>;

class ScheduleRun : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleRun, TheWorkerAndTheStepModelFollowTheSchedule) {
  const auto [layers, tied, depth, accum, workers, kept] = GetParam();
  TrainConfig c = testing::TinyTrainConfig(2);
  c.model = ModelDir(layers, tied);
  c.seq_len = 8;
  c.micro_batch_size = 1;
  c.grad_accum = accum;
  c.workers = workers;
  c.policy.prefetch_depth = depth;
  c.policy.kept_blocks = kept;
  const StepSchedule schedule(layers + 2, tied, depth, kept);
  const std::vector<StepSchedule::Event> want = schedule.Events(Pass::kStep);

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
                         ::testing::Values(Case{1, true, 1, 1, 1, 0}, Case{1, false, 1, 2, 1, 0},
                                           Case{3, true, 1, 2, 1, 0}, Case{3, false, 2, 1, 1, 0},
                                           Case{3, true, 2, 3, 1, 0}, Case{2, true, 3, 1, 1, 0},
                                           Case{4, false, 4, 2, 1, 0}, Case{2, true, 6, 1, 1, 0},
                                           Case{2, true, 1, 1, 2, 0}, Case{3, false, 2, 2, 2, 0},
                                           Case{3, true, 1, 3, 1, 2}, Case{4, false, 2, 2, 1, 1},
                                           Case{2, true, 2, 2, 1, 2}, Case{3, false, 3, 2, 2, 2},
                                           Case{4, true, 1, 1, 2, 4}),
                         [](const auto& info) {
                           const Case& p = info.param;
                           return "layers" + std::to_string(std::get<0>(p)) + (std::get<1>(p) ? "_tied" : "_untied") +
                                  "_depth" + std::to_string(std::get<2>(p)) + "_accum" +
                                  std::to_string(std::get<3>(p)) + "_workers" + std::to_string(std::get<4>(p)) +
                                  "_kept" + std::to_string(std::get<5>(p));
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
          for (int64_t kept : {0, 3, 30}) {
          JobShape job;
          job.sequences = 4;
          job.seq_len = 4096;
          PlanKnobs k;
          k.grad_accum = 4;
          k.policy.prefetch_depth = depth;
          k.policy.activations = host ? ActivationPlacement::kHost : ActivationPlacement::kDevice;
          k.policy.resident_units = resident;
          k.policy.kept_blocks = kept;
          const StepSchedule s(shape.num_units(), shape.tied, depth, static_cast<int>(kept));
          EXPECT_EQ(ReplaySlotEvents(shape, job, k), s.Events(Pass::kStep))
              << preset << " depth " << depth << ", " << resident << " resident, " << kept << " kept";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace slidedp
