// Fused block ops: see fused_ops.h. Each op is a torch::autograd::Function whose forward
// and backward call one kernel of fused_kernels.h, on the tensor's device (the CUDA
// kernels on the current stream, or the C++ reference on the CPU).
#include "runtime/model/fused_ops.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "runtime/model/fused_kernels.h"
#include "runtime/model/ignore_index.h"

#if defined(SLIDEDP_FUSED_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

namespace slidedp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

uint16_t* Bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr()); }
const uint16_t* CBits(const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr()); }
const uint16_t* CBitsOrNull(const at::Tensor& t) { return t.defined() ? CBits(t) : nullptr; }

// The CUDA launcher of a kernel where this build has them, else nullptr.
#if defined(SLIDEDP_FUSED_CUDA)
#define SLIDEDP_CUDA_LAUNCHER(f) (f)
#else
#define SLIDEDP_CUDA_LAUNCHER(f) nullptr
#endif

// Runs the CUDA launcher on x's current stream, or the C++ reference on the CPU.
template <typename Args>
using CudaLauncher = const char* (*)(const Args&, void*);

template <typename Args>
void Run(const at::Tensor& x, const Args& args, void (*cpu)(const Args&),
         typename std::common_type<CudaLauncher<Args>>::type cuda) {
  if (!x.is_cuda()) {
    cpu(args);
    return;
  }
  TORCH_CHECK(cuda != nullptr, "fused kernels: this build has no CUDA kernels");
#if defined(SLIDEDP_FUSED_CUDA)
  const char* failed = cuda(args, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(failed == nullptr, __FILE__, ":", __LINE__, ": ", failed);
#endif
}

int BackwardParts(const at::Tensor& x, int64_t rows) {
#if defined(SLIDEDP_FUSED_CUDA)
  if (x.is_cuda()) return fused::cuda::RmsNormBackwardParts(rows);
#endif
  return fused::cpu::RmsNormBackwardParts(rows);
}

at::Tensor RmsNormGrad(const at::Tensor& dy_in, const at::Tensor& s, const at::Tensor& w,
                       const at::Tensor& rstd, const at::Tensor& dsum, at::Tensor* dw) {
  const at::Tensor dy = dy_in.contiguous();
  const int64_t cols = s.size(-1), rows = s.numel() / cols;
  const int parts = BackwardParts(s, rows);
  at::Tensor dx = at::empty_like(s);
  at::Tensor partial = at::empty({parts, cols}, s.options().dtype(at::kFloat));
  const at::Tensor ds = dsum.defined() ? dsum.contiguous() : dsum;
  fused::RmsNormGradArgs a{CBits(dy), CBits(s), CBits(w), rstd.data_ptr<float>(), CBitsOrNull(ds),
                           Bits(dx), partial.data_ptr<float>(), parts, rows, cols};
  Run(s, a, fused::cpu::RmsNormBackward, SLIDEDP_CUDA_LAUNCHER(fused::cuda::RmsNormBackward));
  *dw = partial.sum(0).to(w.scalar_type());
  return dx;
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, double eps) {
    const at::Tensor x = x_in.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    const at::Tensor wc = w.contiguous();
    fused::RmsNormArgs a{CBits(x), nullptr, CBits(wc), nullptr, Bits(y), rstd.data_ptr<float>(),
                         rows, cols, static_cast<float>(eps)};
    Run(x, a, fused::cpu::RmsNorm, SLIDEDP_CUDA_LAUNCHER(fused::cuda::RmsNorm));
    ctx->save_for_backward({x, wc, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor dw;
    at::Tensor dx = RmsNormGrad(grads[0], saved[0], saved[1], saved[2], at::Tensor(), &dw);
    return {dx, dw, at::Tensor()};
  }
};

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& r_in,
                               const at::Tensor& w, double eps) {
    const at::Tensor x = x_in.contiguous(), r = r_in.contiguous(), wc = w.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor s = at::empty_like(x), y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    fused::RmsNormArgs a{CBits(x), CBits(r), CBits(wc), Bits(s), Bits(y), rstd.data_ptr<float>(),
                         rows, cols, static_cast<float>(eps)};
    Run(x, a, fused::cpu::RmsNorm, SLIDEDP_CUDA_LAUNCHER(fused::cuda::RmsNorm));
    ctx->save_for_backward({s, wc, rstd});
    return {s, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor dw;
    // grads[0] reaches s from its other use (the residual stream), grads[1] the norm.
    at::Tensor dy = grads[1].defined() ? grads[1] : at::zeros_like(saved[0]);
    at::Tensor ds = RmsNormGrad(dy, saved[0], saved[1], saved[2], grads[0], &dw);
    return {ds, ds, dw, at::Tensor()};
  }
};

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  // x [B, T, H, D] -> [B, H, T, D].
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos,
                            const at::Tensor& sin) {
    const at::Tensor x = x_in.contiguous();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
    at::Tensor out = at::empty({B, H, T, D}, x.options());
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    const int64_t row_b = c.dim() == 2 ? 0 : T;
    fused::RopeArgs a{CBits(x), Bits(out), c.data_ptr<float>(), s.data_ptr<float>(), B, H, T, D,
                      T * H * D, D, H * D, H * T * D, T * D, D, row_b, /*backward=*/false};
    Run(x, a, fused::cpu::Rope, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Rope));
    ctx->save_for_backward({c, s});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();  // [B, H, T, D]
    const int64_t B = dy.size(0), H = dy.size(1), T = dy.size(2), D = dy.size(3);
    at::Tensor dx = at::empty({B, T, H, D}, dy.options());
    const int64_t row_b = saved[0].dim() == 2 ? 0 : T;
    fused::RopeArgs a{CBits(dy), Bits(dx), saved[0].data_ptr<float>(), saved[1].data_ptr<float>(),
                      B, H, T, D, H * T * D, T * D, D, T * H * D, D, H * D, row_b, /*backward=*/true};
    Run(dy, a, fused::cpu::Rope, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Rope));
    return {dx, at::Tensor(), at::Tensor()};
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    fused::SwigluArgs a{CBits(gate), CBits(up), Bits(out), gate.numel()};
    Run(gate, a, fused::cpu::Swiglu, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Swiglu));
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dgate = at::empty_like(saved[0]), dup = at::empty_like(saved[1]);
    fused::SwigluGradArgs a{CBits(dy), CBits(saved[0]), CBits(saved[1]), Bits(dgate), Bits(dup),
                            dy.numel()};
    Run(dy, a, fused::cpu::SwigluBackward, SLIDEDP_CUDA_LAUNCHER(fused::cuda::SwigluBackward));
    return {dgate, dup};
  }
};

std::atomic<bool>& FusedSwitch() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("SLIDEDP_FUSED");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

bool FusedSwitchOn() { return FusedSwitch().load(std::memory_order_relaxed); }

}  // namespace

bool UseFusedOps(const at::Tensor& x) {
#if defined(SLIDEDP_FUSED_CUDA)
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 && FusedSwitchOn();
#else
  (void)x;
  (void)FusedSwitchOn;
  return false;
#endif
}

void EnableFusedOps(bool on) { FusedSwitch().store(on, std::memory_order_relaxed); }

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

std::pair<at::Tensor, at::Tensor> FusedAddRmsNorm(const at::Tensor& x, const at::Tensor& residual,
                                                  const at::Tensor& weight, double eps) {
  variable_list out = AddRmsNormFunction::apply(x, residual, weight, eps);
  return {out[0], out[1]};
}

at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RopeFunction::apply(x, cos, sin);
}

at::Tensor FusedSwiglu(const at::Tensor& gate, const at::Tensor& up) {
  return SwigluFunction::apply(gate, up);
}

LinearCrossEntropy FusedLinearCrossEntropy(const at::Tensor& h_in, const at::Tensor& w,
                                           const at::Tensor& targets_in, double scale) {
  c10::NoGradGuard no_grad;
  const at::Tensor h = h_in.contiguous();
  const at::Tensor targets = targets_in.to(at::kLong).contiguous();
  at::Tensor logits = at::mm(h, w.t());  // [n, V], becomes the gradient in place
  at::Tensor loss = at::empty({h.size(0)}, h.options().dtype(at::kFloat));
  fused::CrossEntropyArgs a{Bits(logits), targets.data_ptr<int64_t>(), loss.data_ptr<float>(),
                            static_cast<float>(scale), logits.size(0), logits.size(1), kIgnoreIndex};
  Run(logits, a, fused::cpu::CrossEntropy, SLIDEDP_CUDA_LAUNCHER(fused::cuda::CrossEntropy));
  LinearCrossEntropy out;
  out.loss = loss.sum() * scale;
  out.dh = at::mm(logits, w);
  out.dw = at::mm(logits.t(), h);
  return out;
}

}  // namespace slidedp
