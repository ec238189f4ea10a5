// Held-out evaluation in the trainer (EvalOptions): it runs after every eval interval
// and after the last step, reports a finite mean loss over the eval tokens, and changes
// nothing about training: the losses and the weights digest are bit-identical with and
// without it. Bad options are refused naming them. (That its loss is the plain
// forward's is in engine_exactness_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/engine/trainer.h"
#include "tests/documents_dataset.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

TrainConfig Small() {
  TrainConfig c = testing::TinyTrainConfig(/*steps=*/5);
  c.grad_accum = 2;
  c.policy.loss_chunk_tokens = 24;
  return c;
}

std::unique_ptr<Dataset> HeldOut(const TrainConfig& c) {
  DataConfig d = c.data;
  d.shuffle = false;
  return testing::OpenDocuments(d, c.seq_len, /*vocab_size=*/512, /*seed=*/77);
}

struct TrainRun {
  std::vector<StepStats> steps;
  std::string digest;
};

TrainRun Train(const TrainConfig& c, EvalOptions eval) {
  TrainerInputs inputs;
  inputs.eval = std::move(eval);
  auto trainer = Trainer::Create(c, std::move(inputs));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  TrainRun run;
  for (int64_t s = 0; s < c.steps; ++s) {
    absl::StatusOr<StepStats> st = (*trainer)->Step();
    EXPECT_TRUE(st.ok()) << st.status();
    run.steps.push_back(*st);
  }
  run.digest = (*trainer)->WeightsDigest();
  return run;
}

TEST(TrainerEval, RunsEveryIntervalAndAfterTheLastStepAndChangesNothing) {
  const TrainConfig c = Small();
  EvalOptions eval;
  eval.dataset = HeldOut(c);
  eval.interval = 2;
  eval.batches = 3;
  const TrainRun with = Train(c, std::move(eval));
  const TrainRun without = Train(c, EvalOptions{});
  ASSERT_EQ(with.steps.size(), 5u);
  for (const StepStats& s : with.steps) {
    const bool due = s.step == 2 || s.step == 4 || s.step == 5;
    EXPECT_EQ(s.eval_loss.has_value(), due) << "step " << s.step;
    if (!due) continue;
    EXPECT_TRUE(std::isfinite(*s.eval_loss)) << "step " << s.step;
    EXPECT_GT(*s.eval_loss, 0.0);
    EXPECT_EQ(s.eval_tokens, 3 * c.global_batch_sequences() * c.seq_len);
    EXPECT_GT(s.eval_seconds, 0.0);
  }
  for (size_t i = 0; i < without.steps.size(); ++i) {
    EXPECT_EQ(with.steps[i].loss, without.steps[i].loss) << "step " << i + 1;
    EXPECT_FALSE(without.steps[i].eval_loss.has_value());
  }
  EXPECT_EQ(with.digest, without.digest);
}

TEST(TrainerEval, IntervalZeroEvaluatesAfterTheLastStepOnly) {
  TrainConfig c = Small();
  c.steps = 3;
  c.workers = 1;
  c.policy.activations = ActivationPlacement::kHost;
  EvalOptions eval;
  eval.dataset = HeldOut(c);
  const TrainRun run = Train(c, std::move(eval));
  ASSERT_EQ(run.steps.size(), 3u);
  EXPECT_FALSE(run.steps[0].eval_loss.has_value());
  EXPECT_FALSE(run.steps[1].eval_loss.has_value());
  ASSERT_TRUE(run.steps[2].eval_loss.has_value());
  EXPECT_EQ(run.steps[2].eval_tokens, c.global_batch_sequences() * c.seq_len);
}

TEST(TrainerEval, BadOptionsAreRefusedNamingThem) {
  const TrainConfig c = Small();
  TrainerInputs inputs;
  inputs.eval.interval = -1;
  auto t = Trainer::Create(c, std::move(inputs));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("eval_interval"), std::string::npos) << t.status();
  TrainerInputs none;
  none.eval.batches = 0;
  t = Trainer::Create(c, std::move(none));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("eval_batches"), std::string::npos) << t.status();
}

// The job file's fields reach the engine: a chat dataset with the fixture Qwen2-shaped
// tokenizer, document masking and data.eval_path, through Trainer::Create(config) alone.
TEST(TrainerEval, JobFieldsOpenTextDataWithDocumentMaskAndEvalData) {
  const std::string dir = ::testing::TempDir() + "/trainer_eval_text";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, int n) {
    std::ofstream f(dir + "/" + name);
    for (int i = 0; i < n; ++i) {
      f << R"({"messages": [{"role": "user", "content": "say )" << i << R"( twice"}, )"
        << R"({"role": "assistant", "content": ")" << i << " " << i << R"("}]})" << "\n";
    }
  };
  write("train.jsonl", 60);
  write("eval.jsonl", 10);
  TrainConfig c;
  c.model = "small";  // vocabulary 2048 > the fixture tokenizer's 1564 ids
  c.data.format = DataFormat::kChat;
  c.data.path = dir + "/train.jsonl";
  c.data.tokenizer = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/qwen2";
  c.data.cache_dir = dir + "/cache";
  c.data.eval_path = dir + "/eval.jsonl";
  c.eval_interval = 1;
  c.eval_batches = 1;
  c.seq_len = 32;
  c.micro_batch_size = 2;
  c.grad_accum = 1;
  c.steps = 2;
  TrainConfig unmasked = c;
  c.data.document_mask = true;
  std::vector<double> losses;
  for (const TrainConfig& config : {c, unmasked}) {
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int64_t k = 0; k < config.steps; ++k) {
      absl::StatusOr<StepStats> s = (*t)->Step();
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_TRUE(s->eval_loss.has_value()) << "eval_interval 1: every step evaluates";
      EXPECT_TRUE(std::isfinite(*s->eval_loss));
      EXPECT_GT(s->eval_tokens, 0);
      losses.push_back(s->loss);
    }
  }
  // Masking changes what each token sees (and drops the loss of documents' first tokens).
  EXPECT_NE(losses[0], losses[2]);
}

}  // namespace
}  // namespace slidedp
