// Checked CUDA calls (runtime/cuda/): the message names the call, file:line and the
// error; out-of-memory maps to ResourceExhausted. Built wherever the CUDA toolkit is,
// GPU or not, so that CI compiles and runs the CUDA layer that needs no LibTorch.
#include <gtest/gtest.h>

#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
#include <stdexcept>

#include "absl/strings/match.h"
#include "runtime/cuda/cuda_check.h"

namespace slidedp {
namespace {

absl::Status FailingCall() {
  SLIDEDP_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

TEST(CudaCheckTest, StatusNamesCallFileLineAndError) {
  const absl::Status s = FailingCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(s.message(), "cuda_check_test.cc:")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cudaErrorInvalidValue")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "in cudaErrorInvalidValue")) << s;
}

TEST(CudaCheckTest, OutOfMemoryIsResourceExhausted) {
  EXPECT_EQ(CudaError(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "f.cc", 3).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(CudaCheckTest, ThrowingFormCarriesTheSameMessage) {
  try {
    SLIDEDP_CUDA_CHECK(cudaErrorInvalidDevice);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "cudaErrorInvalidDevice")) << e.what();
  }
}

TEST(CudaCheckTest, DeviceCountIsAnAnswerWithOrWithoutAGpu) {
  int n = -1;
  const cudaError_t err = cudaGetDeviceCount(&n);
  // Without a GPU or driver the runtime says so; it must not crash.
  if (err == cudaSuccess) {
    EXPECT_GE(n, 0);
  } else {
    EXPECT_FALSE(CudaError(err, "cudaGetDeviceCount(&n)", __FILE__, __LINE__).ok());
  }
}

}  // namespace
}  // namespace slidedp
#endif
