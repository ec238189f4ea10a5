// The GPU AdamW kernel of adamw_device.h: a grid-stride loop, one element per thread
// per iteration, with explicitly rounded intrinsics (__fmul_rn and friends are never
// contracted into fused multiply-adds) so that each element follows AdamWElement
// (adamw_kernels.h) op for op. Launched on the caller's stream; no synchronization.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "runtime/state/adamw_device.h"

namespace slidedp {
namespace {

__global__ void AdamWKernel(AdamWDeviceCoeffs c, AdamWDeviceArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    const float g = __fmul_rn(c.grad_scale, a.grad[i]);
    const float decayed = __fmul_rn(a.param[i], c.decay);
    const float m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(c.beta1, a.m[i]));
    const float v = __fmaf_rn(__fmul_rn(c.one_minus_beta2, g), g, __fmul_rn(c.beta2, a.v[i]));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bias2_sqrt), c.eps);
    const float p = __fadd_rn(decayed, __fdiv_rn(__fmul_rn(c.neg_step_size, m), denom));
    a.param[i] = p;
    a.m[i] = m;
    a.v[i] = v;
    if (a.out_bf16) {
      static_cast<__nv_bfloat16*>(a.out)[i] = __float2bfloat16_rn(p);
    } else {
      static_cast<float*>(a.out)[i] = p;
    }
  }
}

}  // namespace

std::string LaunchAdamW(const AdamWDeviceCoeffs& c, const AdamWDeviceArgs& a, void* stream) {
  if (a.n <= 0) return "";
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over; the loop covers the rest.
  const int64_t wanted = (a.n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  AdamWKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(c, a);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string("AdamWKernel launch: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

}  // namespace slidedp
