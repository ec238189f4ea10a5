// Issue 21 on the CPU device: units resident on a "GPU" (policy.resident_units; on the
// CPU device their state lives in buffers of their own and their AdamW runs there, the
// same code path as on CUDA) give the weights of plain autograd within 1e-5 for any
// resident count, W = 1, 2 and 4, every parameter route x gradient route, clipping on
// and off; with one worker the weights of the streamed run bit for bit. A resident unit
// moves no parameter or gradient bytes over "PCIe"; a plan change brings its state back
// to the host and out again without a change to the trajectory; the export and the
// digest read it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/engine/trainer.h"
#include "runtime/plan/residency.h"
#include "tests/documents_dataset.h"
#include "tests/runtime/engine/reference_training.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // reference_training.h

// Parameters per unit of `c`, in the engine's unit order.
std::vector<int64_t> UnitParams(const ModelConfig& c) {
  std::vector<int64_t> n;
  for (const UnitLayout& u : BuildLayout(c).units) n.push_back(u.numel);
  return n;
}

void ExpectBitEqual(const Weights& a, const Weights& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, w] : b) EXPECT_TRUE(at::equal(a.at(name), w)) << name;
}

// One worker: 1, 2, all 4 units (and more than the model has) resident, clipping on
// and off, both families: plain autograd within 1e-5, and the streamed run's bits.
class ResidentOneWorker : public ::testing::TestWithParam<std::tuple<ModelFamily, int, bool>> {};

TEST_P(ResidentOneWorker, EqualsPlainAutogradAndTheStreamedRunBitForBit) {
  auto [family, resident, clip] = GetParam();
  const ModelConfig c = TinyShape(family);
  const std::string dir = ::testing::TempDir() + "/resident1_" + std::string(FamilyName(family)) + "_" +
                          std::to_string(resident) + (clip ? "_clip" : "_noclip");
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 29);
  TrainConfig tc = BaseConfig(dir + "/init");
  if (!clip) tc.optimizer.max_grad_norm = 0;
  tc.workers = 1;
  tc.grad_accum = 4;  // the global batch of two workers
  tc.policy.activations = ActivationPlacement::kDevice;
  tc.policy.resident_units = resident;
  std::vector<StepStats> stats, streamed_stats;
  const Weights engine = RunEngine(tc, c, dir + "/resident", {}, &stats);
  EXPECT_GT((engine.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  ExpectClose(engine, ReferenceTrain(c, init, tc), 1e-5);

  TrainConfig streamed = tc;
  streamed.policy.resident_units = 0;
  ExpectBitEqual(engine, RunEngine(streamed, c, dir + "/streamed", {}, &streamed_stats));

  // The resident units' parameters and gradients stay on the device.
  const std::vector<int64_t> units = UnitParams(c);
  const int U = static_cast<int>(units.size());
  int64_t fetched_less = 0, landed_less = 0;
  for (int u = 0; u < std::min(resident, U); ++u) {
    const bool block = u > 0 && u < U - 1;  // fetched again for the recompute
    const bool tied_table = u == 0 && c.tie_word_embeddings;  // fetched again for the head
    fetched_less += units[u] * 4 * (block || tied_table ? 2 : 1);
    landed_less += units[u] * 4;
  }
  ASSERT_EQ(stats.size(), streamed_stats.size());
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_EQ(stats[i].h2d_bytes, streamed_stats[i].h2d_bytes - fetched_less) << "step " << i + 1;
    EXPECT_EQ(stats[i].d2h_bytes, streamed_stats[i].d2h_bytes - landed_less) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, ResidentOneWorker,
                         ::testing::Values(std::make_tuple(ModelFamily::kQwen2, 1, true),
                                           std::make_tuple(ModelFamily::kQwen3, 2, true),
                                           std::make_tuple(ModelFamily::kQwen2, 4, false),
                                           std::make_tuple(ModelFamily::kQwen3, 9, false),
                                           std::make_tuple(ModelFamily::kQwen2, 3, false)));

// W = 2 and 4, every route pair, 3 of the 4 units resident (spread over the ranks, so
// that every rank both sends and receives them): the weights of one streamed worker
// with the same global batch, and plain autograd, within 1e-5; clipping on for W = 2,
// off for W = 4.
class ResidentWorkers : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(ResidentWorkers, EqualOneStreamedWorkerAndPlainAutograd) {
  auto [world, param_route, grad_route] = GetParam();
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/resident_w" + std::to_string(world) + "_" + param_route + "_" +
                          grad_route;
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 31);
  TrainConfig one = BaseConfig(dir + "/init");
  if (world == 4) one.optimizer.max_grad_norm = 0;
  one.workers = 1;
  one.micro_batch_size = 2;
  one.grad_accum = 4;
  one.policy.resident_units = 0;
  TrainConfig many = one;
  many.workers = world;
  many.grad_accum = 4 / world;
  many.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  many.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  many.policy.resident_units = 3;
  // The placement spreads the units over the ranks.
  const Residency placement = PlaceResident(UnitParams(c), 3, world);
  ASSERT_EQ(placement.units, 3);
  EXPECT_NE(placement.owner[0], placement.owner[1]);
  std::vector<StepStats> stats;
  const Weights ww = RunEngine(many, c, dir + "/many", {}, &stats);
  ExpectClose(ww, RunEngine(one, c, dir + "/one"), 1e-5);
  ExpectClose(ww, ReferenceTrain(c, init, one), 1e-5);
  EXPECT_GT((ww.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  // Only the head streams: every rank fetches it (its 1/W with scatter_allgather).
  const int64_t head = UnitParams(c).back() * 4;
  for (const StepStats& s : stats) {
    EXPECT_EQ(s.h2d_bytes, param_route == "scatter_allgather" ? head : world * head);
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersAndRoutes, ResidentWorkers,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("replicate", "scatter_allgather"),
                                            ::testing::Values("gather_host", "reduce_scatter", "reduce_one")),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) +
                                  "_" + std::get<2>(info.param);
                         });

// A kept block that is also resident has no accumulator of its own on its owner: its
// slot gets the resident master cast, and its micro-batches add into the resident
// gradient, which the landing then reduces in place (W > 1) or leaves (W = 1). 3 blocks,
// all kept, two micro-batches a worker: one worker gives the streamed run's bits (kept,
// nothing resident), and its held-out loss, for 1, 2, 3 and all 5 units resident; two
// workers, every gradient
// route, the weights of plain autograd within 1e-5, with the blocks spread over both
// ranks (each owner casts its master, the other receives it).
class ResidentKeptBlocks : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(ResidentKeptBlocks, EqualTheStreamedRunAndPlainAutograd) {
  auto [world, resident, grad_route] = GetParam();
  ModelConfig c = TinyShape(ModelFamily::kQwen2);
  c.num_layers = 3;
  const std::string dir = ::testing::TempDir() + "/resident_kept_w" + std::to_string(world) + "_" +
                          std::to_string(resident) + "_" + grad_route;
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 47);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.workers = world;
  tc.micro_batch_size = 2;
  tc.grad_accum = 4 / world;
  tc.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  tc.policy.kept_blocks = 3;
  tc.policy.resident_units = resident;
  // A held-out evaluation after the last step takes the kept items as forward items.
  auto with_eval = [&] {
    TrainerInputs in;
    DataConfig held_out = tc.data;
    held_out.shuffle = false;
    in.eval.dataset = OpenDocuments(held_out, tc.seq_len, c.vocab_size, 99);
    return in;
  };
  std::vector<StepStats> stats, streamed_stats;
  const Weights engine = RunEngine(tc, c, dir + "/resident", with_eval(), &stats);
  EXPECT_GT((engine.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  ExpectClose(engine, ReferenceTrain(c, init, tc), 1e-5);
  ASSERT_FALSE(stats.empty());
  ASSERT_TRUE(stats.back().eval_loss.has_value());
  if (world == 1) {
    TrainConfig streamed = tc;
    streamed.policy.resident_units = 0;
    ExpectBitEqual(engine, RunEngine(streamed, c, dir + "/streamed", with_eval(), &streamed_stats));
    ASSERT_FALSE(streamed_stats.empty());
    EXPECT_EQ(*stats.back().eval_loss, *streamed_stats.back().eval_loss);
  } else {
    // Both ranks own some of the kept blocks.
    const Residency placement = PlaceResident(UnitParams(c), resident, world);
    std::vector<int> kept_owned(world, 0);
    for (int u = 1; u <= 3; ++u) {
      if (placement.resident(u)) ++kept_owned[placement.owner[u]];
    }
    EXPECT_GT(kept_owned[0], 0);
    EXPECT_GT(kept_owned[1], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, ResidentKeptBlocks,
                         ::testing::Values(std::make_tuple(1, 1, "gather_host"), std::make_tuple(1, 2, "gather_host"),
                                           std::make_tuple(1, 3, "gather_host"), std::make_tuple(1, 5, "gather_host"),
                                           std::make_tuple(2, 4, "gather_host"), std::make_tuple(2, 4, "reduce_scatter"),
                                           std::make_tuple(2, 5, "reduce_one")),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_resident" +
                                  std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param);
                         });

// A plan change between steps brings the resident units' state (master, m, v) back to
// the host and the new plan's resident units out again: 2 resident, then none, then
// all, then 1, one step each apart, is the trajectory of plain autograd.
TEST(ResidentUnits, PlanChangesKeepTheTrajectory) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen2);
  const std::string dir = ::testing::TempDir() + "/resident_plans";
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 37);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.resident_units = 2;
  auto trainer = Trainer::Create(tc);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int64_t resident : {2, 0, 4, 1, 1}) {
    PlanKnobs k;
    k.micro_batch_size = tc.micro_batch_size;
    k.grad_accum = tc.grad_accum;
    k.policy = tc.policy;
    k.policy.resident_units = resident;
    ASSERT_TRUE((*trainer)->UsePlan(k).ok());
    absl::StatusOr<StepStats> s = (*trainer)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
  }
  ASSERT_TRUE((*trainer)->ExportHf(dir + "/out").ok());
  ExpectClose(ReadModelDir(c, dir + "/out"), ReferenceTrain(c, init, tc), 1e-5);
}

// The digest reads the resident units' state: equal to the streamed run's after the
// same steps (one worker: the same bits), and different from the start's.
TEST(ResidentUnits, DigestReadsTheResidentState) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/resident_digest";
  std::filesystem::remove_all(dir);
  MakeModelDir(c, dir + "/init", 41);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.steps = 2;
  tc.policy.resident_units = 4;
  TrainConfig streamed = tc;
  streamed.policy.resident_units = 0;
  auto a = Trainer::Create(tc);
  auto b = Trainer::Create(streamed);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string start = (*a)->WeightsDigest();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*a)->Step().ok());
    ASSERT_TRUE((*b)->Step().ok());
  }
  EXPECT_NE((*a)->WeightsDigest(), start);
  EXPECT_EQ((*a)->WeightsDigest(), (*b)->WeightsDigest());
}

// Issue 22: resident units keep the job's compact moments (bf16, or 8 bits with their
// blocks' scales) in their own buffers and update them with the host path's arithmetic
// and random bits: with one worker the weights of the streamed run bit for bit, some or
// all units resident, and through plan changes that bring their state (codes and
// scales) back to the host and out again.
TEST(ResidentUnits, CompactMomentsEqualTheStreamedRunBitForBit) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    SCOPED_TRACE(NameOf(d));
    const std::string dir = ::testing::TempDir() + "/resident_compact_" + NameOf(d);
    std::filesystem::remove_all(dir);
    const Weights init = MakeModelDir(c, dir + "/init", 43);
    TrainConfig tc = BaseConfig(dir + "/init");
    tc.optimizer.state_dtype = d;
    tc.policy.chunk_elems = 512;  // whole quantization blocks, several chunks a unit
    tc.workers = 1;
    tc.steps = 4;
    TrainConfig streamed = tc;
    streamed.policy.resident_units = 0;
    const Weights want = RunEngine(streamed, c, dir + "/streamed");
    EXPECT_GT((want.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
    for (int64_t resident : {2, 9}) {
      TrainConfig r = tc;
      r.policy.resident_units = resident;
      ExpectBitEqual(RunEngine(r, c, dir + "/resident" + std::to_string(resident)), want);
    }
    // 2 resident, then none, then all, then 1: one step each.
    TrainConfig r = tc;
    r.policy.resident_units = 2;
    auto trainer = Trainer::Create(r);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    for (int64_t resident : {2, 0, 4, 1}) {
      PlanKnobs k;
      k.micro_batch_size = r.micro_batch_size;
      k.grad_accum = r.grad_accum;
      k.policy = r.policy;
      k.policy.resident_units = resident;
      ASSERT_TRUE((*trainer)->UsePlan(k).ok());
      absl::StatusOr<StepStats> st = (*trainer)->Step();
      ASSERT_TRUE(st.ok()) << st.status();
    }
    ASSERT_TRUE((*trainer)->ExportHf(dir + "/planned").ok());
    ExpectBitEqual(ReadModelDir(c, dir + "/planned"), want);
  }
}

// Over several hosts resident units keep fp32 moments (their replicas' state is gathered
// from fp32 shards): a job asking for them with compact moments is refused naming the
// field.
TEST(ResidentUnits, CompactMomentsOverSeveralHostsAreRefused) {
  TrainConfig tc = TinyTrainConfig(2);
  tc.optimizer.state_dtype = MomentDtype::kInt8;
  tc.policy.chunk_elems = 256;
  tc.policy.resident_units = 1;
  tc.hosts.count = 2;
  tc.hosts.address = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(tc);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("policy.resident_units"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace slidedp
