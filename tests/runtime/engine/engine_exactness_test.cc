// The streaming engine against plain LibTorch autograd on the whole model with a
// straightforward AdamW (fp32): W workers x micro-batches, chunked units, the routes,
// clipping on and off, document masking, must give the same weights after 5 steps
// within 1e-5 relative (W = 2 and 4 equal W = 1 for every route pair, each moving the
// bytes its route should); its held-out evaluation the loss of a plain forward.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "runtime/data/dataset.h"
#include "runtime/engine/batch_tensors.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/full_model.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/transformer.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"
#include "runtime/state/lr_schedule.h"
#include "tests/documents_dataset.h"
#include "tests/test_support.h"
#include "tests/runtime/engine/reference_training.h"

namespace slidedp {
namespace {

using namespace slidedp::testing;  // reference_training.h

class EngineExactness : public ::testing::TestWithParam<std::tuple<ModelFamily, std::string, std::string>> {};

TEST_P(EngineExactness, FiveStepsMatchPlainAutograd) {
  auto [family, param_route, grad_route] = GetParam();
  const ModelConfig c = TinyShape(family);
  const std::string dir = ::testing::TempDir() + "/exact_" + std::string(FamilyName(family)) +
                          "_" + param_route + "_" + grad_route;
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 7);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  tc.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  Weights engine = RunEngine(tc, c, dir + "/out");
  Weights ref = ReferenceTrain(c, init, tc);
  // The weights moved (the test can fail) ...
  EXPECT_GT((engine.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  // ... and equal the reference.
  ExpectClose(engine, ref, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    RoutesAndFamilies, EngineExactness,
    ::testing::Values(std::make_tuple(ModelFamily::kQwen2, "replicate", "gather_host"),
                      std::make_tuple(ModelFamily::kQwen3, "replicate", "gather_host"),
                      std::make_tuple(ModelFamily::kQwen2, "scatter_allgather", "reduce_scatter"),
                      std::make_tuple(ModelFamily::kQwen3, "scatter_allgather", "reduce_one")));

TEST(EngineExactnessMore, WithoutClippingUpdatesDuringBackward) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/exact_noclip";
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 9);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.optimizer.max_grad_norm = 0.0;
  ExpectClose(RunEngine(tc, c, dir + "/out"), ReferenceTrain(c, init, tc), 1e-5);
}

// Issue 22: with bf16 and 8-bit moments, the engine (two workers, chunked units, with
// and without clipping) equals plain autograd followed by the scalar reference of the
// same quantized AdamW.
TEST(EngineExactnessMore, CompactMomentsMatchPlainAutogradAndTheQuantizedReference) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  for (const char* dtype : {"bf16", "int8"}) {
    for (double clip : {0.5, 0.0}) {
      SCOPED_TRACE(::testing::Message() << dtype << " max_grad_norm " << clip);
      const std::string dir = ::testing::TempDir() + "/exact_moments_" + dtype + (clip > 0 ? "_clip" : "");
      std::filesystem::remove_all(dir);
      Weights init = MakeModelDir(c, dir + "/init", 11);
      TrainConfig tc = BaseConfig(dir + "/init");
      tc.optimizer.state_dtype = *EnumFromName<MomentDtype>(dtype);
      tc.optimizer.max_grad_norm = clip;
      tc.policy.chunk_elems = 4 * kMomentBlock;  // several chunks per unit, on block bounds
      Weights engine = RunEngine(tc, c, dir + "/out");
      EXPECT_GT((engine.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
      const Weights quantized_ref = ReferenceTrain(c, init, tc);
      TrainConfig fp32 = tc;
      fp32.optimizer.state_dtype = MomentDtype::kFp32;
      const Weights fp32_ref = ReferenceTrain(c, init, fp32);
      // The tolerance: the engine's gradients differ from plain autograd's in the last
      // fp32 bits (summation order), and an element whose moment sits on a rounding
      // boundary of the stored dtype then takes the neighbouring code: a bf16 step
      // (2^-8 relative) or an 8-bit step (1/8 of m, 1/16 of sqrt(v)), which moves that
      // element's update by as much. So the weights agree within 1e-3 relative (1e-5
      // with fp32 moments), and ten times closer than either is to fp32 moments.
      const double to_ref = MaxRelativeDifference(engine, quantized_ref);
      const double to_fp32 = MaxRelativeDifference(quantized_ref, fp32_ref);
      std::printf("%s moments, max_grad_norm %.1f: engine vs quantized reference %.3g, quantized vs fp32 moments %.3g\n",
                  dtype, clip, to_ref, to_fp32);
      EXPECT_LT(to_ref, 1e-3);
      EXPECT_LT(to_ref, 0.1 * to_fp32) << "the engine follows the quantized AdamW, not the fp32 one";
      EXPECT_LT(to_fp32, 0.05) << "compact moments train as fp32 moments do, nearly";
    }
  }
}

TEST(EngineExactnessMore, OneWorkerEqualsTwoWithTheSameGlobalBatch) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen2);
  const std::string dir = ::testing::TempDir() + "/exact_w1w2";
  std::filesystem::remove_all(dir);
  MakeModelDir(c, dir + "/init", 11);
  TrainConfig two = BaseConfig(dir + "/init");
  TrainConfig one = two;
  one.workers = 1;
  one.grad_accum = 4;  // same 8 sequences a step
  ExpectClose(RunEngine(one, c, dir + "/one"), RunEngine(two, c, dir + "/two"), 1e-5);
}

TEST(EngineExactnessMore, HostActivationsEqualPlainAutograd) {
  // policy.activations: host moves each unit's saved inputs out after its forward and
  // back before its backward; the result must not change.
  const ModelConfig c = TinyShape(ModelFamily::kQwen2);
  const std::string dir = ::testing::TempDir() + "/exact_host_activations";
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 13);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.activations = ActivationPlacement::kHost;
  ExpectClose(RunEngine(tc, c, dir + "/out"), ReferenceTrain(c, init, tc), 1e-5);
}

TEST(EngineExactnessMore, TiledMlpWithHostActivationsEqualsPlainAutograd) {
  // The long-sequence settings: the MLP in tiles of 5 positions (the last one shorter),
  // recomputed tile by tile in backward, and layer inputs in host memory; the reference
  // computes every MLP whole.
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/exact_tiled_mlp";
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 17);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.mlp_tile_tokens = 5;
  tc.policy.activations = ActivationPlacement::kHost;
  ExpectClose(RunEngine(tc, c, dir + "/out"), ReferenceTrain(c, init, tc), 1e-5);
}

// Issue 20, part 2: the last policy.kept_blocks blocks keep their graph from forward to
// backward (micro-batch-major with the head, in slots of their own) instead of
// recomputing their forward; any count (some, all, more than the model has) of a
// 3-block model, both families and parameter routes, two workers, two micro-batches
// each, equals plain autograd, and recomputing every block bit for bit. The plan shows
// the count the engine runs with.
class KeptBlocksExactness : public ::testing::TestWithParam<std::tuple<ModelFamily, int, std::string>> {};

TEST_P(KeptBlocksExactness, FiveStepsMatchPlainAutograd) {
  auto [family, kept, param_route] = GetParam();
  ModelConfig c = TinyShape(family);
  c.num_layers = 3;
  const std::string dir = ::testing::TempDir() + "/exact_kept_" + std::string(FamilyName(family)) + "_" +
                          std::to_string(kept) + "_" + param_route;
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 19);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.kept_blocks = kept;
  tc.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  {
    auto trainer = Trainer::Create(tc);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    EXPECT_EQ((*trainer)->Plan().knobs.policy.kept_blocks, std::min<int64_t>(kept, c.num_layers));
    EXPECT_EQ((*trainer)->Plan().blocks, c.num_layers);
  }
  Weights engine = RunEngine(tc, c, dir + "/out");
  EXPECT_GT((engine.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);
  ExpectClose(engine, ReferenceTrain(c, init, tc), 1e-5);
  // The same operations as recomputing, in the same order: the same bits.
  TrainConfig recompute = tc;
  recompute.policy.kept_blocks = 0;
  const Weights recomputed = RunEngine(recompute, c, dir + "/recompute");
  for (const auto& [name, w] : recomputed) EXPECT_TRUE(at::equal(engine.at(name), w)) << name;
}

INSTANTIATE_TEST_SUITE_P(Counts, KeptBlocksExactness,
                         ::testing::Values(std::make_tuple(ModelFamily::kQwen2, 1, "replicate"),
                                           std::make_tuple(ModelFamily::kQwen3, 3, "replicate"),
                                           std::make_tuple(ModelFamily::kQwen2, 4, "scatter_allgather"),
                                           std::make_tuple(ModelFamily::kQwen3, 9, "scatter_allgather")));

// Kept blocks beside the long-sequence settings: the others' inputs in host memory and
// the MLP in tiles (a kept block's tiled MLP still recomputes its tiles), prefetch 1
// (the fewest ring slots beside the kept blocks' own), and with document masking.
TEST(EngineExactnessMore, KeptBlocksWithHostActivationsTiledMlpAndDocumentsEqualPlainAutograd) {
  ModelConfig c = TinyShape(ModelFamily::kQwen3);
  c.num_layers = 4;
  const std::string dir = ::testing::TempDir() + "/exact_kept_mixed";
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 23);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.kept_blocks = 2;
  tc.policy.prefetch_depth = 1;
  tc.policy.activations = ActivationPlacement::kHost;
  tc.policy.mlp_tile_tokens = 5;
  ExpectClose(RunEngine(tc, c, dir + "/tiled"), ReferenceTrain(c, init, tc), 1e-5);
  tc.policy.mlp_tile_tokens = 0;
  tc.policy.activations = ActivationPlacement::kDevice;
  TrainerInputs docs;
  docs.train = testing::OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed);
  ExpectClose(RunEngine(tc, c, dir + "/docs", std::move(docs)),
              ReferenceTrain(c, init, tc, testing::OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed)), 1e-5);
}

// Issue "Data parallel across 2 to 4 GPUs", on the CPU device (W workers, a thread each,
// the host communicator): W = 2 and 4 with every parameter route x gradient route
// give the weights of W = 1 with the same global batch (8 sequences a step), and each
// route moves the bytes it should: scatter_allgather brings the streamed model copy to
// the workers once in all (not W times), reduce_scatter and reduce_one land the gradient
// once (as W = 1 does), gather_host W times (fp32 from every worker). The streamed copy
// is bf16 on cuda and fp32 on the CPU device (which computes in fp32).
class EngineRoutes : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(EngineRoutes, EqualOneWorkerAndMoveTheRouteBytes) {
  auto [world, param_route, grad_route] = GetParam();
  const ModelConfig c = TinyShape(ModelFamily::kQwen3);
  const std::string dir = ::testing::TempDir() + "/routes_w" + std::to_string(world) + "_" + param_route + "_" +
                          grad_route;
  std::filesystem::remove_all(dir);
  const Weights init = MakeModelDir(c, dir + "/init", 23);
  int64_t params = 0, block_params = 0;
  for (const auto& [name, t] : init) {
    params += t.numel();
    if (name.rfind("model.layers.", 0) == 0) block_params += t.numel();
  }
  ASSERT_GT(block_params, 0);
  ASSERT_LT(block_params, params);
  TrainConfig one = BaseConfig(dir + "/init");
  one.policy.activations = ActivationPlacement::kDevice;  // only parameter and gradient bytes cross
  one.workers = 1;
  one.micro_batch_size = 2;
  one.grad_accum = 4;
  TrainConfig many = one;
  many.workers = world;
  many.grad_accum = 4 / world;
  many.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  many.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  std::vector<StepStats> s1, sw;
  const Weights w1 = RunEngine(one, c, dir + "/one", {}, &s1);
  const Weights ww = RunEngine(many, c, dir + "/many", {}, &sw);
  ExpectClose(ww, w1, 1e-5);
  EXPECT_GT((ww.at("model.norm.weight") - init.at("model.norm.weight")).abs().max().item<double>(), 1e-4);

  ASSERT_EQ(s1.size(), sw.size());
  const int64_t elem = 4;  // the CPU device streams and lands fp32
  for (size_t i = 0; i < s1.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i + 1);
    // One worker: every unit fetched for forward and the blocks again for their
    // recompute in backward; every gradient landed once.
    EXPECT_EQ(s1[i].h2d_bytes, elem * (params + block_params));
    EXPECT_EQ(s1[i].d2h_bytes, elem * params);
    ASSERT_EQ(sw[i].workers.size(), static_cast<size_t>(world));
    const int64_t want_h2d = param_route == "scatter_allgather" ? s1[i].h2d_bytes : world * s1[i].h2d_bytes;
    const int64_t want_d2h = grad_route == "gather_host" ? world * 4 * params : s1[i].d2h_bytes;
    EXPECT_EQ(sw[i].h2d_bytes, want_h2d);
    EXPECT_EQ(sw[i].d2h_bytes, want_d2h);
    for (int r = 0; r < world; ++r) {
      // scatter_allgather: each rank copies its own slice, about 1/W of the model.
      if (param_route == "scatter_allgather") {
        EXPECT_NEAR(static_cast<double>(sw[i].workers[r].h2d_bytes), static_cast<double>(want_h2d) / world,
                    0.05 * want_h2d / world) << "rank " << r;
      }
      // reduce_one: only rank 0 copies the sum down.
      if (grad_route == "reduce_one") {
        EXPECT_EQ(sw[i].workers[r].d2h_bytes, r == 0 ? want_d2h : 0) << "rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersAndRoutes, EngineRoutes,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("replicate", "scatter_allgather"),
                                            ::testing::Values("gather_host", "reduce_scatter", "reduce_one")),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) +
                                  "_" + std::get<2>(info.param);
                         });

}  // namespace
}  // namespace slidedp

namespace slidedp {
namespace {

using testing::OpenDocuments;

class DocumentMaskExactness : public ::testing::TestWithParam<std::tuple<ModelFamily, std::string>> {};

TEST_P(DocumentMaskExactness, FiveStepsMatchPlainAutograd) {
  // Positions travel with each micro-batch to both workers and reach the forward and
  // the backward's recompute; the reference applies the same masking in one graph.
  auto [family, param_route] = GetParam();
  const ModelConfig c = TinyShape(family);
  const std::string dir = ::testing::TempDir() + "/exact_docs_" + std::string(FamilyName(family)) + "_" + param_route;
  std::filesystem::remove_all(dir);
  Weights init = MakeModelDir(c, dir + "/init", 17);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.policy.param_route = *EnumFromName<ParamRoute>(param_route);
  TrainerInputs docs;
  docs.train = OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed);
  const Weights engine = RunEngine(tc, c, dir + "/out", std::move(docs));
  ExpectClose(engine, ReferenceTrain(c, init, tc, OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed)), 1e-5);
  // The masking mattered: plain rows train to other weights.
  const Weights plain = RunEngine(tc, c, dir + "/plain");
  EXPECT_GT((engine.at("model.norm.weight") - plain.at("model.norm.weight")).abs().max().item<double>(), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentMaskExactness,
                         ::testing::Values(std::make_tuple(ModelFamily::kQwen2, "replicate"),
                                           std::make_tuple(ModelFamily::kQwen3, "scatter_allgather")));

// The held-out loss the engine reports after steps 2 and 3 (interval 2, and the last
// step) equals the plain forward's mean loss over the eval set's first batches with the
// weights of that step: each evaluation restarts the eval data.
TEST(EngineEval, EvalLossEqualsPlainForwardOfTheStepsWeights) {
  const ModelConfig c = TinyShape(ModelFamily::kQwen2);  // tied head: the table is fetched for eval too
  const std::string dir = ::testing::TempDir() + "/exact_eval";
  std::filesystem::remove_all(dir);
  MakeModelDir(c, dir + "/init", 19);
  TrainConfig tc = BaseConfig(dir + "/init");
  tc.steps = 3;
  tc.policy.param_route = ParamRoute::kScatterAllGather;
  DataConfig held_out = tc.data;
  held_out.shuffle = false;
  const uint64_t eval_seed = 99;
  TrainerInputs inputs;
  inputs.train = OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed);
  inputs.eval.dataset = OpenDocuments(held_out, tc.seq_len, c.vocab_size, eval_seed);
  inputs.eval.interval = 2;
  inputs.eval.batches = 2;
  std::vector<StepStats> stats;
  const Weights last = RunEngine(tc, c, dir + "/out", std::move(inputs), &stats);
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_FALSE(stats[0].eval_loss.has_value());
  EXPECT_EQ(stats[0].eval_tokens, 0);
  ASSERT_TRUE(stats[1].eval_loss.has_value());
  ASSERT_TRUE(stats[2].eval_loss.has_value());

  // Steps 1..2 again, for the weights after step 2 (the same trajectory: the eval
  // changed nothing, which tests/runtime/engine/trainer_eval_test.cc checks bit for bit).
  TrainConfig two = tc;
  two.steps = 2;
  TrainerInputs again;
  again.train = OpenDocuments(tc.data, tc.seq_len, c.vocab_size, tc.seed);
  const Weights after2 = RunEngine(two, c, dir + "/two", std::move(again));
  const ModelLayout layout = BuildLayout(c);
  for (const auto& [weights, stat] : {std::make_pair(&after2, &stats[1]), std::make_pair(&last, &stats[2])}) {
    std::unique_ptr<Dataset> eval = OpenDocuments(held_out, tc.seq_len, c.vocab_size, eval_seed);
    double sum = 0;
    int64_t tokens = 0;
    at::NoGradGuard no_grad;
    for (int b = 0; b < 2; ++b) {
      const BatchTensors t = ToTensors(*eval->Next(tc.global_batch_sequences()));
      sum += MeanLoss(c, layout, Flats(layout, *weights), t).item<double>() * static_cast<double>(t.target_tokens);
      tokens += t.target_tokens;
    }
    EXPECT_EQ(stat->eval_tokens, tokens);
    EXPECT_NEAR(*stat->eval_loss, sum / static_cast<double>(tokens), 1e-5 * sum / tokens) << "step " << stat->step;
  }
  EXPECT_NE(*stats[1].eval_loss, *stats[2].eval_loss);
}

}  // namespace
}  // namespace slidedp
