// PinnedSlab: see pinned_slab.h.
#include "runtime/cuda/pinned_slab.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_check.h"

namespace slidedp {

absl::StatusOr<std::shared_ptr<void>> AllocatePinnedSlab(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the allocation's failure is reported here
    const absl::Status s = CudaError(err, "cudaHostAlloc", __FILE__, __LINE__);
    return absl::ResourceExhaustedError(
        absl::StrCat("pinning ", bytes, " bytes of host memory for the streamed copy: ", s.message()));
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

absl::StatusOr<std::shared_ptr<void>> PageLock(void* p, size_t bytes) {
  const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    const absl::Status s = CudaError(err, "cudaHostRegister", __FILE__, __LINE__);
    return absl::ResourceExhaustedError(absl::StrCat("page-locking ", bytes, " bytes of host memory: ", s.message()));
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaHostUnregister(q); });
}

}  // namespace slidedp
