// Learning-rate schedule: warmup, constant, linear and cosine at known points.
#include "runtime/state/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace slidedp {
namespace {

OptimizerConfig Opt(LrScheduleKind schedule, int64_t warmup, double min_ratio) {
  OptimizerConfig o;
  o.lr = 1e-3;
  o.schedule = schedule;
  o.warmup_steps = warmup;
  o.min_lr_ratio = min_ratio;
  return o;
}

TEST(LrScheduleTest, WarmupIsLinearFromLrOverWarmupToLr) {
  for (const EnumName<LrScheduleKind>& e : NamesOf(LrScheduleKind{})) {
    const OptimizerConfig o = Opt(e.value, 10, 0.1);
    const char* s = e.name;
    EXPECT_DOUBLE_EQ(LearningRate(o, 0, 110), 1e-4) << s;   // lr * 1/10
    EXPECT_DOUBLE_EQ(LearningRate(o, 4, 110), 5e-4) << s;   // lr * 5/10
    EXPECT_DOUBLE_EQ(LearningRate(o, 9, 110), 1e-3) << s;   // lr * 10/10
    EXPECT_DOUBLE_EQ(LearningRate(o, 10, 110), 1e-3) << s;  // decay starts at t = 0
  }
}

TEST(LrScheduleTest, ConstantStaysAtLr) {
  const OptimizerConfig o = Opt(LrScheduleKind::kConstant, 0, 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 0, 100), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(o, 99, 100), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(o, 1000, 100), 1e-3);
}

TEST(LrScheduleTest, LinearDecaysToMinRatioAtTotalSteps) {
  const OptimizerConfig o = Opt(LrScheduleKind::kLinear, 10, 0.1);
  // t = (step - 10) / 100; lr * (0.1 + 0.9 * (1 - t)).
  EXPECT_DOUBLE_EQ(LearningRate(o, 10, 110), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(o, 60, 110), 1e-3 * (0.1 + 0.9 * 0.5));
  EXPECT_DOUBLE_EQ(LearningRate(o, 85, 110), 1e-3 * (0.1 + 0.9 * 0.25));
  EXPECT_DOUBLE_EQ(LearningRate(o, 110, 110), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(o, 500, 110), 1e-4);  // clamped past the end
  EXPECT_DOUBLE_EQ(LearningRate(Opt(LrScheduleKind::kLinear, 0, 0.0), 50, 100), 0.5e-3);
}

TEST(LrScheduleTest, CosineHitsHalfwayAndMinimum) {
  const OptimizerConfig o = Opt(LrScheduleKind::kCosine, 0, 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 0, 100), 1e-3);
  EXPECT_NEAR(LearningRate(o, 50, 100), 0.5e-3, 1e-15);
  EXPECT_NEAR(LearningRate(o, 25, 100), 1e-3 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
  EXPECT_NEAR(LearningRate(o, 100, 100), 0.0, 1e-18);
  const OptimizerConfig r = Opt(LrScheduleKind::kCosine, 20, 0.1);
  EXPECT_NEAR(LearningRate(r, 70, 120), 1e-3 * (0.1 + 0.9 * 0.5), 1e-15);
  EXPECT_NEAR(LearningRate(r, 120, 120), 1e-4, 1e-15);
  // Strictly decreasing after warmup.
  for (int64_t s = 21; s <= 120; ++s)
    EXPECT_LT(LearningRate(r, s, 120), LearningRate(r, s - 1, 120));
}

TEST(LrScheduleTest, DegenerateLengthsStayFinite) {
  // Warmup as long as the job: every step warms up; decay span clamps to 1.
  const OptimizerConfig o = Opt(LrScheduleKind::kCosine, 5, 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 4, 5), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(o, 5, 5), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(o, 6, 5), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(Opt(LrScheduleKind::kLinear, 0, 0.1), 0, 1), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(Opt(LrScheduleKind::kLinear, 0, 0.1), -3, 10), 1e-3);
}

}  // namespace
}  // namespace slidedp
