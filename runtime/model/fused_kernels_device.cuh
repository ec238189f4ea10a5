// The CUDA kernels of fused_kernels.h, device code only (fused_kernels.cu says how each op
// launches them and includes this file; so does the CPU emulation of them,
// tests/runtime/model/cuda_emulation.h, through fused_kernels.cu): a warp per row for
// RMSNorm (its sums in warp shuffles; the weight gradient in per-block fp32 partials in
// shared memory), one thread per rotated pair for RoPE, grid-stride loops for SwiGLU
// (over elements, or over rows when gate and up are the halves of one tensor), a block per
// row for the cross-entropy. bf16 in and out, fp32 math.
// Each elementwise kernel has a vector form that moves 8 bf16 (16 bytes) per load and
// store: the scalar forms' 2-byte accesses ran these memory-bound kernels at about a
// third of the H200's bandwidth (ncu, tests/bench/RESULTS.md). Per element the vector
// forms do the same arithmetic in the same order; only RMSNorm's sum of squares is added
// in another order.
// Threads: device code, run on the stream its launcher is given.
#pragma once

#ifndef SLIDEDP_CUDA_EMULATION
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define SLIDEDP_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#define SLIDEDP_UNROLL _Pragma("unroll")
#endif

#include <cstdint>

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

// 8 bf16 in one 16-byte word: element 2k is the low half of 32-bit word k.
__device__ __forceinline__ void Unpack(const uint4& v, float f[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  SLIDEDP_UNROLL
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = __uint_as_float(w[k] << 16);
    f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 Pack(const float f[8]) {
  uint32_t w[4];
  SLIDEDP_UNROLL
  for (int k = 0; k < 4; ++k) {
    w[k] = static_cast<uint32_t>(ToB(f[2 * k])) | (static_cast<uint32_t>(ToB(f[2 * k + 1])) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint4 Load8(const uint16_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void Store8(uint16_t* p, const float f[8]) { *reinterpret_cast<uint4*>(p) = Pack(f); }
// 8 fp32 table entries (two 16-byte loads), each rounded to bf16 as the scalar form does.
__device__ __forceinline__ void LoadTable8(const float* p, float f[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = Round(a.x); f[1] = Round(a.y); f[2] = Round(a.z); f[3] = Round(a.w);
  f[4] = Round(b.x); f[5] = Round(b.y); f[6] = Round(b.z); f[7] = Round(b.w);
}

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
  SLIDEDP_DYNAMIC_SHARED(float, dw);  // [cols], this block's partial
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

// RmsNormKernel with 16-byte accesses (cols % 8 == 0, every row 16-byte aligned).
__global__ void RmsNormVecKernel(RmsNormArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= a.rows) return;
  const int64_t o = row * a.cols, vectors = a.cols / 8;
  float ss = 0.0f;
  for (int64_t v = lane; v < vectors; v += 32) {
    float x[8];
    Unpack(Load8(a.x + o + v * 8), x);
    if (a.residual != nullptr) {
      float r[8];
      Unpack(Load8(a.residual + o + v * 8), r);
      SLIDEDP_UNROLL
      for (int k = 0; k < 8; ++k) x[k] = Round(x[k] + r[k]);
      Store8(a.sum + o + v * 8, x);
    }
    SLIDEDP_UNROLL
    for (int k = 0; k < 8; ++k) ss += x[k] * x[k];
  }
  ss = WarpSum(ss);
  const float rstd = rsqrtf(ss / static_cast<float>(a.cols) + a.eps);
  if (lane == 0) a.rstd[row] = rstd;
  const uint16_t* s = a.residual != nullptr ? a.sum : a.x;  // this thread's own stores, re-read
  for (int64_t v = lane; v < vectors; v += 32) {
    float x[8], w[8], y[8];
    Unpack(Load8(s + o + v * 8), x);
    Unpack(Load8(a.w + v * 8), w);
    SLIDEDP_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = w[k] * Round(x[k] * rstd);
    Store8(a.y + o + v * 8, y);
  }
}

// RmsNormBackwardKernel with 16-byte accesses. The block's dw partial lies in shared
// memory element-major (element k of vector v at k * vectors + v), so that the 32 lanes'
// atomic adds, on 32 consecutive vectors, hit 32 banks.
__global__ void RmsNormBackwardVecKernel(RmsNormGradArgs a) {
  SLIDEDP_DYNAMIC_SHARED(float, dw);  // [8][cols / 8], this block's partial
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) dw[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t vectors = a.cols / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       row < a.rows; row += stride) {
    const int64_t o = row * a.cols;
    const float rstd = a.rstd[row];
    float dot = 0.0f;
    for (int64_t v = lane; v < vectors; v += 32) {
      float s[8], dy[8], w[8];
      Unpack(Load8(a.s + o + v * 8), s);
      Unpack(Load8(a.dy + o + v * 8), dy);
      Unpack(Load8(a.w + v * 8), w);
      SLIDEDP_UNROLL
      for (int k = 0; k < 8; ++k) {
        const float n = s[k] * rstd;
        dot += dy[k] * w[k] * n;
        atomicAdd(&dw[k * vectors + v], dy[k] * Round(n));
      }
    }
    const float mean = WarpSum(dot) / static_cast<float>(a.cols);
    for (int64_t v = lane; v < vectors; v += 32) {
      float s[8], dy[8], w[8], g[8];
      Unpack(Load8(a.s + o + v * 8), s);
      Unpack(Load8(a.dy + o + v * 8), dy);
      Unpack(Load8(a.w + v * 8), w);
      SLIDEDP_UNROLL
      for (int k = 0; k < 8; ++k) g[k] = rstd * (dy[k] * w[k] - s[k] * rstd * mean);
      if (a.dsum != nullptr) {
        float d[8];
        Unpack(Load8(a.dsum + o + v * 8), d);
        SLIDEDP_UNROLL
        for (int k = 0; k < 8; ++k) g[k] += d[k];
      }
      Store8(a.dx + o + v * 8, g);
    }
  }
  __syncthreads();
  float* out = a.dw_partial + static_cast<int64_t>(blockIdx.x) * a.cols;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) out[c] = dw[(c % 8) * vectors + c / 8];
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

// RopeKernel with 16-byte accesses: a thread per 8 consecutive pairs (i .. i+7 with
// i + half .. i + half + 7) of one head of one token. Needs half % 8 == 0, 16-byte
// aligned buffers and element strides that are multiples of 8 (VecRope).
__global__ void RopeVecKernel(RopeArgs a) {
  const int64_t half = a.D / 2, per_head = half / 8, per_token = a.H * per_head;
  const int64_t total = a.B * a.T * per_token;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = k / per_token, rest = k - bt * per_token;
    const int64_t h = rest / per_head, i = (rest - h * per_head) * 8;
    const int64_t t = bt % a.T, b = bt / a.T;
    const uint16_t* in = a.in + b * a.in_b + h * a.in_h + t * a.in_t;
    uint16_t* out = a.out + b * a.out_b + h * a.out_h + t * a.out_t;
    const int64_t row = (b * a.table_row_b + t) * a.D;
    float c1[8], s1[8], c2[8], s2[8], x1[8], x2[8], y1[8], y2[8];
    LoadTable8(a.cos + row + i, c1);
    LoadTable8(a.sin + row + i, s1);
    LoadTable8(a.cos + row + i + half, c2);
    LoadTable8(a.sin + row + i + half, s2);
    Unpack(Load8(in + i), x1);
    Unpack(Load8(in + i + half), x2);
    SLIDEDP_UNROLL
    for (int j = 0; j < 8; ++j) {
      if (!a.backward) {
        y1[j] = x1[j] * c1[j] - x2[j] * s1[j];
        y2[j] = x2[j] * c2[j] + x1[j] * s2[j];
      } else {
        y1[j] = x1[j] * c1[j] + x2[j] * s2[j];
        y2[j] = x2[j] * c2[j] - x1[j] * s1[j];
      }
    }
    Store8(out + i, y1);
    Store8(out + i + half, y2);
  }
}

// SwigluKernel / SwigluBackwardKernel with 16-byte accesses. Flat (ld == cols): a
// grid-stride loop over all vectors; strided: over rows, the block's threads along the
// row. Needs cols % 8 == 0 (flat: rows * cols % 8 == 0) and 16-byte aligned operands.
__device__ __forceinline__ void SwigluVec(const uint16_t* gate, const uint16_t* up, uint16_t* out) {
  float g[8], u[8], y[8];
  Unpack(Load8(gate), g);
  Unpack(Load8(up), u);
  SLIDEDP_UNROLL
  for (int k = 0; k < 8; ++k) y[k] = g[k] * Sigmoid(g[k]) * u[k];
  Store8(out, y);
}

__global__ void SwigluVecKernel(SwigluArgs a) {
  if (a.ld == a.cols) {
    const int64_t n = a.rows * a.cols / 8;
    for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < n;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      SwigluVec(a.gate + v * 8, a.up + v * 8, a.out + v * 8);
    }
    return;
  }
  const int64_t vectors = a.cols / 8;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    for (int64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
      SwigluVec(a.gate + r * a.ld + v * 8, a.up + r * a.ld + v * 8, a.out + r * a.cols + v * 8);
    }
  }
}

__device__ __forceinline__ void SwigluGradVec(const SwigluGradArgs& a, int64_t in, int64_t dy_at) {
  float g[8], u[8], dy[8], dg[8], du[8];
  Unpack(Load8(a.gate + in), g);
  Unpack(Load8(a.up + in), u);
  Unpack(Load8(a.dy + dy_at), dy);
  SLIDEDP_UNROLL
  for (int k = 0; k < 8; ++k) {
    const float sg = Sigmoid(g[k]);
    dg[k] = dy[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
    du[k] = dy[k] * g[k] * sg;
  }
  Store8(a.dgate + in, dg);
  Store8(a.dup + in, du);
}

__global__ void SwigluBackwardVecKernel(SwigluGradArgs a) {
  if (a.ld == a.cols) {
    const int64_t n = a.rows * a.cols / 8;
    for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < n;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      SwigluGradVec(a, v * 8, v * 8);
    }
    return;
  }
  const int64_t vectors = a.cols / 8;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    for (int64_t v = threadIdx.x; v < vectors; v += blockDim.x) SwigluGradVec(a, r * a.ld + v * 8, r * a.cols + v * 8);
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

}  // namespace
}  // namespace slidedp::fused::cuda
