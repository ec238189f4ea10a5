// Weight gradients added straight into the fp32 accumulators the engine lands
// (Worker::GradBuffer): one GEMM with beta = 1 a weight and micro-batch (cuBLAS, bf16
// operands, fp32 accumulation and result), in place of a bf16 gradient that autograd
// hands to the weight's leaf and the worker then adds in fp32, a kernel and 12 bytes a
// parameter of memory traffic more each time, and a rounding to bf16 of every
// micro-batch's (and MLP tile's) gradient. The fused block ops (fused_ops.h) take these
// accumulators as "sinks"; autograd then gives those weights no gradient.
// Threads: any (the autograd engine's, in a backward), on the current stream; no state
// but the process-wide switch.
#pragma once

#include <ATen/ATen.h>

namespace slidedp {

// dst [M, N] fp32 (unit column stride) += dy^T x, dy [K, M] and x [K, N] of one dtype
// with unit column strides (dy may be a column slice of a wider tensor). On CUDA bf16
// tensors: cuBLAS's GemmEx; on CPU tensors: in fp32 (tests). False where this build or
// process has no such GEMM (nothing is added: the caller returns the gradient instead).
bool AddWeightGradient(const at::Tensor& dst, const at::Tensor& dy, const at::Tensor& x);

// Whether the engine gives the fused ops on `device` sinks: a CUDA device, and
// SLIDEDP_WEIGHT_SINKS unset or not "0" (the switch for A/B runs).
bool WeightSinksOn(const at::Device& device);

}  // namespace slidedp
