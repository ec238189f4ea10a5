// A failing status inside a worker's step comes out of the step with its code (issue
// 19): a gradient landing that fails with a given status, injected through the fault
// seam, fails Trainer::Step with that code, on one worker (the landing's status is
// returned) and on two under gather_host (the next landing finds it and throws it
// through the step as a StatusException).
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/engine/trainer.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

// workers, grad_route, the injected code
using Case = std::tuple<int, std::string, absl::StatusCode>;

class LandingFailure : public ::testing::TestWithParam<Case> {};

TEST_P(LandingFailure, ComesOutOfTheStepWithItsCode) {
  const auto [workers, grad_route, code] = GetParam();
  TrainConfig c = testing::TinyTrainConfig(2);
  c.workers = workers;
  c.policy.grad_route = *EnumFromName<GradRoute>(grad_route);
  auto t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  InjectLandingFailure(absl::Status(code, "injected landing failure"));
  const absl::StatusOr<StepStats> st = (*t)->Step();
  InjectLandingFailure(absl::OkStatus());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), code) << st.status();
  EXPECT_NE(st.status().message().find("injected landing failure"), std::string::npos) << st.status();
}

INSTANTIATE_TEST_SUITE_P(
    Codes, LandingFailure,
    ::testing::Values(Case{1, "gather_host", absl::StatusCode::kDataLoss},
                      Case{2, "gather_host", absl::StatusCode::kDataLoss},
                      Case{2, "gather_host", absl::StatusCode::kCancelled},
                      Case{2, "gather_host", absl::StatusCode::kResourceExhausted},
                      Case{2, "gather_host", absl::StatusCode::kUnavailable},
                      Case{2, "reduce_scatter", absl::StatusCode::kCancelled}),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "_workers_" + std::get<1>(info.param) + "_" +
             absl::StatusCodeToString(std::get<2>(info.param));
    });

TEST(StatusException, KeepsTheCodeThroughCurrentExceptionStatus) {
  absl::Status s;
  try {
    ThrowIfError(absl::CancelledError("asked to stop"));
  } catch (...) {
    s = CurrentExceptionStatus("step 3");
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "step 3: asked to stop");
  EXPECT_NO_THROW(ThrowIfError(absl::OkStatus()));
}

// LibTorch's errors carry a C++ backtrace in what(); a status carries their message only,
// its first line, at most 512 bytes.
TEST(ExceptionMessage, DropsLibTorchsBacktraceAndKeepsOneLine) {
  try {
    TORCH_CHECK(false, "shapes do not match");
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find('\n'), std::string::npos) << "what() without a backtrace: " << e.what();
    EXPECT_EQ(ExceptionMessage(e), "shapes do not match");
  }
  EXPECT_EQ(ExceptionMessage(std::runtime_error("first\nsecond")), "first");
  const std::string message = ExceptionMessage(std::runtime_error(std::string(2000, 'x')));
  EXPECT_EQ(message, std::string(512, 'x') + "...");
  // A two-byte sequence (U+00E9) across byte 512 is left out whole, not cut in half.
  std::string accented = std::string(511, 'x');
  for (int i = 0; i < 100; ++i) accented += "\xc3\xa9";
  EXPECT_EQ(ExceptionMessage(std::runtime_error(accented)), std::string(511, 'x') + "...");
  std::string aligned = std::string(510, 'x') + "\xc3\xa9" + std::string(100, 'y');
  EXPECT_EQ(ExceptionMessage(std::runtime_error(aligned)), std::string(510, 'x') + "\xc3\xa9...");
}

}  // namespace
}  // namespace slidedp
