// Checked CUDA runtime and NCCL calls: every failure carries the call, file:line and the
// library's error name and text. Needs only the CUDA toolkit (no LibTorch).
// Thread-safe (no state).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace slidedp {

// "CUDA error at FILE:LINE in CALL: cudaErrorName (text)" as an Internal status
// (ResourceExhausted for out-of-memory, so that the policy can shrink its plan).
absl::Status CudaError(cudaError_t err, const char* call, const char* file, int line);

// The same message, thrown as std::runtime_error: for code inside a step that has no
// Status path (the worker turns it into the job's error).
[[noreturn]] void ThrowCudaError(cudaError_t err, const char* call, const char* file, int line);

}  // namespace slidedp

#define SLIDEDP_CUDA_RETURN_IF_ERROR(call)                                      \
  do {                                                                          \
    const cudaError_t slidedp_err_ = (call);                                    \
    if (slidedp_err_ != cudaSuccess)                                            \
      return ::slidedp::CudaError(slidedp_err_, #call, __FILE__, __LINE__);     \
  } while (0)

#define SLIDEDP_CUDA_CHECK(call)                                                \
  do {                                                                          \
    const cudaError_t slidedp_err_ = (call);                                    \
    if (slidedp_err_ != cudaSuccess)                                            \
      ::slidedp::ThrowCudaError(slidedp_err_, #call, __FILE__, __LINE__);       \
  } while (0)
