// AddWeightGradient: see weight_grad.h. CUDA tensors go to weight_grad_cuda.cc (built
// with a CUDA LibTorch only); CPU tensors are computed here in fp32.
#include "runtime/model/weight_grad.h"

#include "runtime/io/env_switch.h"

namespace slidedp {

#if defined(SLIDEDP_TORCH_CUDA)
bool AddWeightGradientCuda(const at::Tensor& dst, const at::Tensor& dy, const at::Tensor& x);  // weight_grad_cuda.cc
#endif

bool AddWeightGradient(const at::Tensor& dst, const at::Tensor& dy, const at::Tensor& x) {
  TORCH_CHECK(dst.dim() == 2 && dy.dim() == 2 && x.dim() == 2, "AddWeightGradient: matrices expected, got ",
              dst.sizes(), ", ", dy.sizes(), ", ", x.sizes());
  TORCH_CHECK(dst.scalar_type() == at::kFloat, "AddWeightGradient: the accumulator must be fp32, got ",
              dst.scalar_type());
  TORCH_CHECK(dy.size(0) == x.size(0) && dst.size(0) == dy.size(1) && dst.size(1) == x.size(1),
              "AddWeightGradient: ", dst.sizes(), " += ", dy.sizes(), "^T x ", x.sizes(), " does not fit");
  if (dst.is_cuda()) {
#if defined(SLIDEDP_TORCH_CUDA)
    return AddWeightGradientCuda(dst, dy, x);
#else
    return false;
#endif
  }
  dst.add_(at::mm(dy.t().to(at::kFloat), x.to(at::kFloat)));
  return true;
}

bool WeightSinksOn(const at::Device& device) {
  static const bool on = !EnvIs("SLIDEDP_WEIGHT_SINKS", "0");
  return on && device.is_cuda();
}

}  // namespace slidedp
