// Units have one name (UnitName, runtime/model/param_layout.h) in traces, the step
// model, the plan, checkpoints and messages; a checkpoint written when blocks were
// "block.N" still reads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/model/param_layout.h"
#include "runtime/state/checkpoint.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

TEST(UnitName, OneNamePerUnit) {
  EXPECT_EQ(UnitName(0, 5), "embedding");
  EXPECT_EQ(UnitName(1, 5), "block 0");
  EXPECT_EQ(UnitName(3, 5), "block 2");
  EXPECT_EQ(UnitName(4, 5), "head");
}

// Checkpoints name units as UnitName does; one written when blocks were "block.N"
// still reads into "block N", and another model's names still do not.
TEST(UnitName, CheckpointsOfTheOlderSpellingStillRead) {
  const std::string dir = testing::ProcessTempDir("slidedp_unit_name", "ckpt");
  std::vector<std::vector<float>> buf(3, std::vector<float>(4, 1.5f));
  auto units = [&](std::vector<std::string> names) {
    std::vector<CheckpointUnit> u;
    for (size_t i = 0; i < names.size(); ++i) u.push_back({names[i], 4, buf[i].data(), Fp32Moments(buf[i].data(), buf[i].data())});
    return u;
  };
  CheckpointMeta meta;
  meta.step = 1;
  meta.config_json = "{}";
  meta.data_cursor = "{}";
  const absl::StatusOr<std::string> path = WriteCheckpoint(dir, meta, units({"embedding", "block.0", "head"}), 1);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_TRUE(ReadCheckpoint(*path, units({"embedding", UnitName(1, 3), "head"})).ok());
  EXPECT_EQ(ReadCheckpoint(*path, units({"embedding", "block 1", "head"})).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace slidedp
