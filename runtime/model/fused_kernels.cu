// How the fused ops of fused_kernels.h launch their CUDA kernels
// (fused_kernels_device.cuh): each op's Form (which kernel, its vector or scalar form,
// grid, block and shared memory), whether the operands allow the vector form (their
// addresses and strides, Vec* below), the launch on the caller's stream and the message
// naming a failure. SLIDEDP_FUSED_VECTOR=0 in the environment forces the scalar forms
// (A/B runs). No synchronization here.
// tests/runtime/model/cuda_emulation.h compiles this file for the CPU
// (SLIDEDP_CUDA_EMULATION): the kernels and each op's Form are shared with the emulated
// test; only the CUDA launch is not.
// Threads: any host thread (the launchers keep no state but VectorOn's constant).
#ifndef SLIDEDP_CUDA_EMULATION
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "runtime/io/env_switch.h"
#include "runtime/model/fused_kernels.h"
#include "runtime/model/fused_kernels_device.cuh"

namespace slidedp::fused::cuda {
namespace {

int GridFor(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

// Flat: a thread per element up to the grid's cap. Strided: a block per row up to it.
int SwigluGrid(int64_t rows, int64_t cols, int64_t ld) {
  return ld == cols ? GridFor(rows * cols, 256) : GridFor(rows * 256, 256);
}

// Whether the vector forms may run: not with SLIDEDP_FUSED_VECTOR=0 in the environment.
bool VectorOn() {
  static const bool on = !EnvIs("SLIDEDP_FUSED_VECTOR", "0");
  return on;
}
// Every operand 16-byte aligned (null: an absent operand).
bool Aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Whether the operands allow an op's vector form (sizes, strides, alignment).
bool VecRmsNorm(const RmsNormArgs& a) { return a.cols % 8 == 0 && Aligned16({a.x, a.residual, a.w, a.sum, a.y}); }
bool VecRmsNormBackward(const RmsNormGradArgs& a) {
  return a.cols % 8 == 0 && Aligned16({a.dy, a.s, a.w, a.dsum, a.dx});
}
bool VecRope(const RopeArgs& a) {
  return a.D % 16 == 0 && Aligned16({a.in, a.out, a.cos, a.sin}) && a.in_b % 8 == 0 && a.in_h % 8 == 0 &&
         a.in_t % 8 == 0 && a.out_b % 8 == 0 && a.out_h % 8 == 0 && a.out_t % 8 == 0;
}
bool VecSwiglu(int64_t rows, int64_t cols, int64_t ld, std::initializer_list<const void*> ptrs) {
  const bool whole_vectors = ld == cols ? (rows * cols) % 8 == 0 : (cols % 8 == 0 && ld % 8 == 0);
  return whole_vectors && Aligned16(ptrs);
}

// RmsNormBackward's blocks (each writes one partial of dw): a warp per row, at most 4
// blocks of 8 warps per SM of the H200.
int BackwardParts(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(blocks < 132 * 4 ? (blocks > 0 ? blocks : 1) : 132 * 4);
}

// A kernel and the messages naming it when its launch (or its shared memory setting)
// fails.
template <typename Args>
struct Kernel {
  void (*fn)(Args);
  const char* launch;
  const char* attribute;
};
#define SLIDEDP_KERNEL(k) {k, #k " launch", "cudaFuncSetAttribute(" #k ", MaxDynamicSharedMemorySize)"}

// How an op launches: its vector or scalar kernel, grid (0: nothing to do), block and
// dynamic shared memory. The launchers below and the emulated test
// (tests/runtime/model/fused_kernels_emulated_test.cc) both take it from the op's *Form
// function; `vector`: whether the vector form may run (the launchers pass VectorOn()),
// which it then does where the operands allow.
template <typename Args>
struct Form {
  Kernel<Args> kernel;
  unsigned grid;
  unsigned block;
  size_t shared;
};

Form<RmsNormArgs> RmsNormForm(const RmsNormArgs& a, bool vector) {
  const Kernel<RmsNormArgs> vec = SLIDEDP_KERNEL(RmsNormVecKernel), scalar = SLIDEDP_KERNEL(RmsNormKernel);
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return {vector && VecRmsNorm(a) ? vec : scalar, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0};
}

// Every one of a.parts blocks writes its partial of dw, also with no rows (zeros).
Form<RmsNormGradArgs> RmsNormBackwardForm(const RmsNormGradArgs& a, bool vector) {
  const Kernel<RmsNormGradArgs> vec = SLIDEDP_KERNEL(RmsNormBackwardVecKernel),
                                scalar = SLIDEDP_KERNEL(RmsNormBackwardKernel);
  return {vector && VecRmsNormBackward(a) ? vec : scalar, static_cast<unsigned>(a.parts), 32 * kWarpsPerBlock,
          static_cast<size_t>(a.cols) * sizeof(float)};
}

// A thread per pair of elements (vector: per 8 pairs), up to the grid's cap.
Form<RopeArgs> RopeForm(const RopeArgs& a, bool vector) {
  const Kernel<RopeArgs> vec = SLIDEDP_KERNEL(RopeVecKernel), scalar = SLIDEDP_KERNEL(RopeKernel);
  const int64_t total = a.B * a.H * a.T * (a.D / 2);
  const bool v = vector && VecRope(a);
  return {v ? vec : scalar, total == 0 ? 0u : static_cast<unsigned>(GridFor(v ? total / 8 : total, 256)), 256, 0};
}

// Both SwiGLU kernels: a thread per element (vector: per 8) of a flat operand, a block
// per row of strided ones.
template <typename Args>
Form<Args> SwigluFormOf(const Args& a, bool v, Kernel<Args> vec, Kernel<Args> scalar) {
  const int64_t per = v ? 8 : 1;
  return {v ? vec : scalar,
          a.rows * a.cols == 0 ? 0u : static_cast<unsigned>(SwigluGrid(a.rows, a.cols / per, a.ld / per)), 256, 0};
}
Form<SwigluArgs> SwigluForm(const SwigluArgs& a, bool vector) {
  return SwigluFormOf(a, vector && VecSwiglu(a.rows, a.cols, a.ld, {a.gate, a.up, a.out}),
                      SLIDEDP_KERNEL(SwigluVecKernel), SLIDEDP_KERNEL(SwigluKernel));
}
Form<SwigluGradArgs> SwigluBackwardForm(const SwigluGradArgs& a, bool vector) {
  return SwigluFormOf(a, vector && VecSwiglu(a.rows, a.cols, a.ld, {a.dy, a.gate, a.up, a.dgate, a.dup}),
                      SLIDEDP_KERNEL(SwigluBackwardVecKernel), SLIDEDP_KERNEL(SwigluBackwardKernel));
}

// A block per row.
Form<CrossEntropyArgs> CrossEntropyForm(const CrossEntropyArgs& a) {
  return {SLIDEDP_KERNEL(CrossEntropyKernel), static_cast<unsigned>(a.rows), kCeThreads, 0};
}

#undef SLIDEDP_KERNEL

#ifndef SLIDEDP_CUDA_EMULATION
// The message naming what failed and CUDA's error (this thread's, valid until its next
// failure), or nullptr for cudaSuccess.
const char* Failed(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return nullptr;
  thread_local std::string message;
  message = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return message.c_str();
}

// Launches `f` on `stream`; the message naming what failed, or nullptr. A launch reports
// an earlier kernel's sticky failure too: the message says which error it was.
template <typename Args>
const char* Launch(const Form<Args>& f, const Args& a, void* stream) {
  if (f.grid == 0) return nullptr;
  if (f.shared > 48 * 1024) {
    const char* failed =
        Failed(cudaFuncSetAttribute(reinterpret_cast<const void*>(f.kernel.fn),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(f.shared)),
               f.kernel.attribute);
    if (failed != nullptr) return failed;
  }
  f.kernel.fn<<<f.grid, f.block, f.shared, static_cast<cudaStream_t>(stream)>>>(a);
  return Failed(cudaGetLastError(), f.kernel.launch);
}
#endif

}  // namespace

#ifndef SLIDEDP_CUDA_EMULATION
const char* RmsNorm(const RmsNormArgs& a, void* stream) { return Launch(RmsNormForm(a, VectorOn()), a, stream); }
int RmsNormBackwardParts(int64_t rows) { return BackwardParts(rows); }
const char* RmsNormBackward(const RmsNormGradArgs& a, void* stream) {
  return Launch(RmsNormBackwardForm(a, VectorOn()), a, stream);
}
const char* Rope(const RopeArgs& a, void* stream) { return Launch(RopeForm(a, VectorOn()), a, stream); }
const char* Swiglu(const SwigluArgs& a, void* stream) { return Launch(SwigluForm(a, VectorOn()), a, stream); }
const char* SwigluBackward(const SwigluGradArgs& a, void* stream) {
  return Launch(SwigluBackwardForm(a, VectorOn()), a, stream);
}
const char* CrossEntropy(const CrossEntropyArgs& a, void* stream) { return Launch(CrossEntropyForm(a), a, stream); }
#endif  // SLIDEDP_CUDA_EMULATION

}  // namespace slidedp::fused::cuda
