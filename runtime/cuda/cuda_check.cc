// Checked CUDA calls; see cuda_check.h.
#include "runtime/cuda/cuda_check.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

std::string Message(cudaError_t err, const char* call, const char* file, int line) {
  return absl::StrCat("CUDA error at ", file, ":", line, " in ", call, ": ", cudaGetErrorName(err), " (",
                      cudaGetErrorString(err), ")");
}

}  // namespace

absl::Status CudaError(cudaError_t err, const char* call, const char* file, int line) {
  const std::string m = Message(err, call, file, line);
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(m);
  return absl::InternalError(m);
}

void ThrowCudaError(cudaError_t err, const char* call, const char* file, int line) {
  throw std::runtime_error(Message(err, call, file, line));
}

}  // namespace slidedp
