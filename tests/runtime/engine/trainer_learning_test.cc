// The built-in demo learns: the tiny preset on the synthetic corpus, trained by the
// engine with two workers, ends with a loss well below where it started. Also: the
// trainer refuses bad configs with the field named, and pause-style use (Drain between
// steps) changes nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/engine/trainer.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

TrainConfig Demo() {
  TrainConfig c = testing::TinyTrainConfig(/*steps=*/60);
  c.seq_len = 64;
  c.micro_batch_size = 4;
  c.optimizer.warmup_steps = 5;
  c.optimizer.weight_decay = 0.01;
  return c;
}

TEST(TrainerLearning, TinyDemoLossFallsWellBelowStart) {
  auto trainer = Trainer::Create(Demo());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    auto st = (*trainer)->Step();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_TRUE(std::isfinite(st->loss));
    EXPECT_EQ(st->step, s + 1);
    EXPECT_GT(st->tokens, 0);
    if (s < 3) first += st->loss / 3;
    if (s >= 57) last += st->loss / 3;
  }
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;
}

TEST(TrainerLearning, DrainBetweenStepsGivesTheSameWeights) {
  TrainConfig c = Demo();
  c.steps = 6;
  auto a = Trainer::Create(c);
  auto b = Trainer::Create(c);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int s = 0; s < 6; ++s) {
    ASSERT_TRUE((*a)->Step().ok());
    ASSERT_TRUE((*b)->Step().ok());
    ASSERT_TRUE((*b)->Drain().ok());  // what a pause does
  }
  EXPECT_EQ((*a)->WeightsDigest(), (*b)->WeightsDigest());
  EXPECT_NE((*a)->WeightsDigest(), (*Trainer::Create(c))->WeightsDigest());
}

TEST(TrainerLearning, BadConfigNamesTheField) {
  TrainConfig c = Demo();
  c.model = "no-such-preset";
  auto t = Trainer::Create(c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model"), std::string::npos) << t.status();
  c = Demo();
  c.policy.grad_route = static_cast<GradRoute>(42);  // no such route
  t = Trainer::Create(c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("grad_route"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace slidedp
