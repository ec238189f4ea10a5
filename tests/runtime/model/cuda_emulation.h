// Runs CUDA kernel source on the CPU, for tests on machines without a GPU: include this,
// define SLIDEDP_CUDA_EMULATION, then include the .cu (its launches are left out), and
// call its kernels through cuda_emulation::Launch. Each CUDA thread of a block is one
// std::thread (blocks run one after another), so __syncthreads, warp shuffles and
// shared memory behave as on the GPU for kernels that keep CUDA's rules (whole warps
// leave together; a barrier is reached by every thread of the block). bf16 rounding is
// round-to-nearest-even as __float2bfloat16_rn; __expf is expf (the GPU's is an
// approximation, so results here are for comparing two kernels, not for the GPU's bits).
// Only what runtime/model/fused_kernels.cu and runtime/state/adamw_device.cu use. Tests
// only.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#pragma GCC diagnostic ignored "-Wunused-function"  // the kernels a test does not run

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // one block at a time: a function's static is its block's
#define SLIDEDP_UNROLL
#define SLIDEDP_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::cuda_emulation::DynamicShared())

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
struct __nv_bfloat16 {
  uint16_t bits;
};

inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return {static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __expf(float x) { return std::exp(x); }
// The IEEE operations rounded to nearest, each on its own (volatile: never contracted
// into a fused multiply-add by the host compiler), and the fused one.
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim, gridDim;

namespace cuda_emulation {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// The running block's state.
struct Block {
  explicit Block(unsigned threads) : sync(static_cast<int>(threads)), lanes(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.emplace_back(new Barrier(32));
  }
  ~Block() {
    for (Barrier* b : warps) delete b;
  }
  Barrier sync;
  std::vector<Barrier*> warps;
  std::vector<float> lanes;  // a value per thread, for shuffles
  std::vector<unsigned char> shared;
  std::mutex atomics;
};
inline Block* current = nullptr;

inline void* DynamicShared() { return current->shared.data(); }

// Runs kernel(args) over `grid` blocks of `threads` threads (a multiple of 32) with
// `shared_bytes` of dynamic shared memory.
template <typename Kernel, typename Args>
void Launch(Kernel kernel, unsigned grid, unsigned threads, size_t shared_bytes, const Args& args) {
  gridDim = dim3{grid, 1, 1};
  blockDim = dim3{threads, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    Block block(threads);
    block.shared.assign(shared_bytes, 0);
    current = &block;
    blockIdx = dim3{b, 1, 1};
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        threadIdx = dim3{t, 1, 1};
        kernel(args);
      });
    }
    for (std::thread& t : pool) t.join();
    current = nullptr;
  }
}

}  // namespace cuda_emulation

inline void __syncthreads() { cuda_emulation::current->sync.Wait(); }

inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  cuda_emulation::Block& b = *cuda_emulation::current;
  const unsigned t = threadIdx.x, warp = t / 32;
  b.lanes[t] = v;
  b.warps[warp]->Wait();
  const float other = b.lanes[warp * 32 + ((t & 31) ^ static_cast<unsigned>(lane_mask))];
  b.warps[warp]->Wait();
  return other;
}

inline float atomicAdd(float* p, float v) {
  std::lock_guard<std::mutex> lock(cuda_emulation::current->atomics);
  const float old = *p;
  *p = old + v;
  return old;
}
