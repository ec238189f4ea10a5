// CUDA kernels of fused_kernels.h: a warp per row for RMSNorm (its sums in warp
// shuffles; the weight gradient in per-block fp32 partials in shared memory), one thread
// per rotated pair for RoPE, grid-stride loops for SwiGLU (over elements, or over rows
// when gate and up are the halves of one tensor). bf16 in and out, fp32 math.
// Launched on the caller's stream; no synchronization here.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "runtime/model/fused_kernels.h"

namespace slidedp::fused::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float ToF(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t ToB(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ float Round(float f) { return ToF(ToB(f)); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void RmsNormKernel(RmsNormArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= a.rows) return;
  const int64_t o = row * a.cols;
  float ss = 0.0f;
  for (int64_t c = lane; c < a.cols; c += 32) {
    float v = ToF(a.x[o + c]);
    if (a.residual != nullptr) {
      v = Round(v + ToF(a.residual[o + c]));
      a.sum[o + c] = ToB(v);
    }
    ss += v * v;
  }
  ss = WarpSum(ss);
  const float rstd = rsqrtf(ss / static_cast<float>(a.cols) + a.eps);
  if (lane == 0) a.rstd[row] = rstd;
  const uint16_t* s = a.residual != nullptr ? a.sum : a.x;
  for (int64_t c = lane; c < a.cols; c += 32) {
    a.y[o + c] = ToB(ToF(a.w[c]) * Round(ToF(s[o + c]) * rstd));
  }
}

__global__ void RmsNormBackwardKernel(RmsNormGradArgs a) {
  extern __shared__ float dw[];  // [cols], this block's partial
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) dw[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       row < a.rows; row += stride) {
    const int64_t o = row * a.cols;
    const float rstd = a.rstd[row];
    float dot = 0.0f;
    for (int64_t c = lane; c < a.cols; c += 32) {
      const float n = ToF(a.s[o + c]) * rstd;
      const float dy = ToF(a.dy[o + c]);
      dot += dy * ToF(a.w[c]) * n;
      atomicAdd(&dw[c], dy * Round(n));
    }
    const float mean = WarpSum(dot) / static_cast<float>(a.cols);
    for (int64_t c = lane; c < a.cols; c += 32) {
      const float n = ToF(a.s[o + c]) * rstd;
      float g = rstd * (ToF(a.dy[o + c]) * ToF(a.w[c]) - n * mean);
      if (a.dsum != nullptr) g += ToF(a.dsum[o + c]);
      a.dx[o + c] = ToB(g);
    }
  }
  __syncthreads();
  float* out = a.dw_partial + static_cast<int64_t>(blockIdx.x) * a.cols;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) out[c] = dw[c];
}

__global__ void RopeKernel(RopeArgs a) {
  const int64_t half = a.D / 2;
  const int64_t total = a.B * a.H * a.T * half;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // k = ((b * T + t) * H + h) * half + i: neighbouring threads read neighbouring
    // elements of one token's heads.
    const int64_t i = k % half;
    const int64_t h = (k / half) % a.H;
    const int64_t bt = k / (half * a.H);
    const int64_t t = bt % a.T, b = bt / a.T;
    const uint16_t* in = a.in + b * a.in_b + h * a.in_h + t * a.in_t;
    uint16_t* out = a.out + b * a.out_b + h * a.out_h + t * a.out_t;
    const int64_t row = (b * a.table_row_b + t) * a.D;
    const float c1 = Round(a.cos[row + i]), s1 = Round(a.sin[row + i]);
    const float c2 = Round(a.cos[row + i + half]), s2 = Round(a.sin[row + i + half]);
    const float x1 = ToF(in[i]), x2 = ToF(in[i + half]);
    if (!a.backward) {
      out[i] = ToB(x1 * c1 - x2 * s1);
      out[i + half] = ToB(x2 * c2 + x1 * s2);
    } else {
      out[i] = ToB(x1 * c1 + x2 * s2);
      out[i + half] = ToB(x2 * c2 - x1 * s1);
    }
  }
}

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

// Contiguous operands (ld == cols): one grid-stride loop over all elements. Strided
// (the halves of one [rows, 2 * cols] tensor): a grid-stride loop over rows, the block's
// threads along the row, so no element needs an index division.
__global__ void SwigluKernel(SwigluArgs a) {
  if (a.ld == a.cols) {
    const int64_t n = a.rows * a.cols;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float g = ToF(a.gate[i]);
      a.out[i] = ToB(g * Sigmoid(g) * ToF(a.up[i]));
    }
    return;
  }
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const uint16_t* gate = a.gate + r * a.ld;
    const uint16_t* up = a.up + r * a.ld;
    uint16_t* out = a.out + r * a.cols;
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      const float g = ToF(gate[c]);
      out[c] = ToB(g * Sigmoid(g) * ToF(up[c]));
    }
  }
}

__device__ __forceinline__ void SwigluGrad(const SwigluGradArgs& a, int64_t in, int64_t dy_at) {
  const float g = ToF(a.gate[in]), u = ToF(a.up[in]), dy = ToF(a.dy[dy_at]);
  const float sg = Sigmoid(g);
  a.dgate[in] = ToB(dy * u * sg * (1.0f + g * (1.0f - sg)));
  a.dup[in] = ToB(dy * g * sg);
}

__global__ void SwigluBackwardKernel(SwigluGradArgs a) {
  if (a.ld == a.cols) {
    const int64_t n = a.rows * a.cols;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      SwigluGrad(a, i, i);
    }
    return;
  }
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) SwigluGrad(a, r * a.ld + c, r * a.cols + c);
  }
}

// One block per row: an online max/sum of exponentials per thread, combined across the
// block, then the gradient written over the logits.
constexpr int kCeThreads = 512;

__device__ __forceinline__ void Combine(float& m, float& s, float m2, float s2) {
  const float nm = fmaxf(m, m2);
  if (nm == -INFINITY) return;  // both empty
  s = s * __expf(m - nm) + s2 * __expf(m2 - nm);
  m = nm;
}

__global__ void CrossEntropyKernel(CrossEntropyArgs a) {
  __shared__ float sm[kCeThreads / 32], ss[kCeThreads / 32];
  const int64_t row = blockIdx.x;
  uint16_t* x = a.logits + row * a.vocab;
  const int64_t target = a.targets[row];
  if (target == a.ignore_index) {
    for (int64_t c = threadIdx.x; c < a.vocab; c += blockDim.x) x[c] = 0;
    if (threadIdx.x == 0) a.loss[row] = 0.0f;
    return;
  }
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < a.vocab; c += blockDim.x) {
    const float v = ToF(x[c]);
    if (v > m) {
      s = s * __expf(m - v) + 1.0f;
      m = v;
    } else {
      s += __expf(v - m);  // a NaN v lands here and makes s NaN
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    Combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < kCeThreads / 32 ? sm[lane] : -INFINITY;
    s = lane < kCeThreads / 32 ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      Combine(m, s, m2, s2);
    }
    if (lane == 0) {
      sm[0] = m;
      ss[0] = s;
    }
  }
  __syncthreads();
  m = sm[0];
  s = ss[0];
  const float target_logit = ToF(x[target]);
  __syncthreads();  // every thread has read x[target] before it is overwritten
  if (threadIdx.x == 0) a.loss[row] = logf(s) + m - target_logit;
  const float inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < a.vocab; c += blockDim.x) {
    const float p = __expf(ToF(x[c]) - m) * inv;
    x[c] = ToB((p - (c == target ? 1.0f : 0.0f)) * a.scale);
  }
}

int GridFor(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

// Flat: a thread per element up to the grid's cap. Strided: a block per row up to it.
int SwigluGrid(int64_t rows, int64_t cols, int64_t ld) {
  return ld == cols ? GridFor(rows * cols, 256) : GridFor(rows * 256, 256);
}

const char* Launched(const char* what) {
  return cudaGetLastError() == cudaSuccess ? nullptr : what;
}

}  // namespace

const char* RmsNorm(const RmsNormArgs& a, void* stream) {
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) return nullptr;
  RmsNormKernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0,
                  static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("RmsNormKernel launch");
}

int RmsNormBackwardParts(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(blocks < 132 * 4 ? (blocks > 0 ? blocks : 1) : 132 * 4);
}

const char* RmsNormBackward(const RmsNormGradArgs& a, void* stream) {
  const size_t shared = static_cast<size_t>(a.cols) * sizeof(float);
  if (shared > 48 * 1024 &&
      cudaFuncSetAttribute(RmsNormBackwardKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared)) != cudaSuccess) {
    return "cudaFuncSetAttribute(RmsNormBackwardKernel, MaxDynamicSharedMemorySize)";
  }
  RmsNormBackwardKernel<<<a.parts, 32 * kWarpsPerBlock, shared, static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("RmsNormBackwardKernel launch");
}

const char* Rope(const RopeArgs& a, void* stream) {
  const int64_t total = a.B * a.H * a.T * (a.D / 2);
  if (total == 0) return nullptr;
  RopeKernel<<<GridFor(total, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("RopeKernel launch");
}

const char* Swiglu(const SwigluArgs& a, void* stream) {
  if (a.rows * a.cols == 0) return nullptr;
  SwigluKernel<<<SwigluGrid(a.rows, a.cols, a.ld), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("SwigluKernel launch");
}

const char* SwigluBackward(const SwigluGradArgs& a, void* stream) {
  if (a.rows * a.cols == 0) return nullptr;
  SwigluBackwardKernel<<<SwigluGrid(a.rows, a.cols, a.ld), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("SwigluBackwardKernel launch");
}

const char* CrossEntropy(const CrossEntropyArgs& a, void* stream) {
  if (a.rows == 0) return nullptr;
  CrossEntropyKernel<<<static_cast<unsigned>(a.rows), kCeThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return Launched("CrossEntropyKernel launch");
}

}  // namespace slidedp::fused::cuda
