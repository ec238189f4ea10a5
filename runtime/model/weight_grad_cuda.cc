// AddWeightGradient on CUDA tensors (weight_grad.h): cublasGemmEx with bf16 operands and
// an fp32 result, beta = 1, on LibTorch's cuBLAS handle and current stream. The function
// is looked up in the cuBLAS that LibTorch loaded (dlsym), not linked: this build's CUDA
// toolkit may carry another cuBLAS than the one LibTorch's handles come from. Threads:
// any, on the current stream (the autograd engine's thread in a backward).
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdint>
#include <limits>

#include "runtime/model/weight_grad.h"

namespace slidedp {
namespace {

using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                                    void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

GemmExFn GemmEx() {
  static const GemmExFn f = reinterpret_cast<GemmExFn>(dlsym(RTLD_DEFAULT, "cublasGemmEx"));
  return f;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

bool AddWeightGradientCuda(const at::Tensor& dst, const at::Tensor& dy, const at::Tensor& x) {
  const GemmExFn gemm = GemmEx();
  if (gemm == nullptr || dy.scalar_type() != at::kBFloat16 || x.scalar_type() != at::kBFloat16) return false;
  if (!dy.is_cuda() || !x.is_cuda() || dy.device() != dst.device() || x.device() != dst.device()) return false;
  const int64_t M = dst.size(0), N = dst.size(1), K = x.size(0);
  if (M == 0 || N == 0) return true;
  if (dst.stride(1) != 1 || dy.stride(1) != 1 || x.stride(1) != 1) return false;
  const int64_t ldc = M > 1 ? dst.stride(0) : N, ldb = K > 1 ? dy.stride(0) : M, lda = K > 1 ? x.stride(0) : N;
  if (ldc < N || ldb < M || lda < N || !FitsInt(M) || !FitsInt(N) || !FitsInt(K) || !FitsInt(ldc) || !FitsInt(ldb) ||
      !FitsInt(lda)) {
    return false;
  }
  // Row-major dst [M, N] is column-major [N, M]: dst^T += x^T dy, x^T = x read as
  // column-major [N, K] (no transpose), dy read as column-major [M, K], transposed.
  const float one = 1.0f;
  const cublasStatus_t s =
      gemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(N), static_cast<int>(M),
           static_cast<int>(K), &one, x.data_ptr(), CUDA_R_16BF, static_cast<int>(lda), dy.data_ptr(), CUDA_R_16BF,
           static_cast<int>(ldb), &one, dst.data_ptr(), CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
           CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, __FILE__, ":", __LINE__, ": cublasGemmEx(N, T, ", N, ", ", M, ", ", K,
              ", bf16, bf16 -> fp32, beta 1) failed with status ", static_cast<int>(s));
  return true;
}

}  // namespace slidedp
