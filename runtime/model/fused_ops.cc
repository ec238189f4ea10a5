// Fused block ops: see fused_ops.h. Each op is a torch::autograd::Function whose forward
// and backward call one kernel of fused_kernels.h, on the tensor's device (the CUDA
// kernels on the current stream, or the C++ reference on the CPU).
#include "runtime/model/fused_ops.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "runtime/io/env_switch.h"
#include "runtime/model/fused_kernels.h"
#include "runtime/model/ignore_index.h"
#include "runtime/model/weight_grad.h"

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

// SLIDEDP_ROPE_LAYOUT=heads in the environment: RoPE writes [B, H, T, D] contiguous, as
// before 2026-12-06, so that attention's output is transposed by a copy before o_proj
// (the A/B runs of tests/bench/RESULTS.md).
bool RopeHeadsMajor() {
  static const bool on = EnvIs("SLIDEDP_ROPE_LAYOUT", "heads");
  return on;
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  // x [B, T, H, D] -> [B, H, T, D], laid out as [B, T, H, D] (a transposed view): fused
  // attention takes it so and gives its output in the same layout, which o_proj then
  // reads as [B, T, H * D] without a transposing copy (nor one of the gradient back).
  // The kernel reads x through its strides (only D's must be 1): q, k as views of the
  // one QKV projection (FusedLinears) cost no copy.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos,
                            const at::Tensor& sin) {
    const at::Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
    at::Tensor out = RopeHeadsMajor() ? at::empty({B, H, T, D}, x.options())
                                      : at::empty({B, T, H, D}, x.options()).transpose(1, 2);
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    const int64_t row_b = c.dim() == 2 ? 0 : T;
    fused::RopeArgs a{CBits(x), Bits(out), c.data_ptr<float>(), s.data_ptr<float>(), B, H, T, D,
                      x.stride(0), x.stride(2), x.stride(1), out.stride(0), out.stride(1), out.stride(2), row_b,
                      /*backward=*/false};
    Run(x, a, fused::cpu::Rope, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Rope));
    ctx->save_for_backward({c, s});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    // [B, H, T, D], read through its strides (attention's gradient comes in q's layout).
    const at::Tensor dy = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();
    const int64_t B = dy.size(0), H = dy.size(1), T = dy.size(2), D = dy.size(3);
    at::Tensor dx = at::empty({B, T, H, D}, dy.options());
    const int64_t row_b = saved[0].dim() == 2 ? 0 : T;
    fused::RopeArgs a{CBits(dy), Bits(dx), saved[0].data_ptr<float>(), saved[1].data_ptr<float>(),
                      B, H, T, D, dy.stride(0), dy.stride(1), dy.stride(2), T * H * D, D, H * D, row_b,
                      /*backward=*/true};
    Run(dy, a, fused::cpu::Rope, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Rope));
    return {dx, at::Tensor(), at::Tensor()};
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    fused::SwigluArgs a{CBits(gate), CBits(up), Bits(out), 1, gate.numel(), gate.numel()};
    Run(gate, a, fused::cpu::Swiglu, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Swiglu));
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dgate = at::empty_like(saved[0]), dup = at::empty_like(saved[1]);
    fused::SwigluGradArgs a{CBits(dy), CBits(saved[0]), CBits(saved[1]), Bits(dgate), Bits(dup),
                            1, dy.numel(), dy.numel()};
    Run(dy, a, fused::cpu::SwigluBackward, SLIDEDP_CUDA_LAUNCHER(fused::cuda::SwigluBackward));
    return {dgate, dup};
  }
};

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// The fp32 accumulators a function adds its weights' gradients to (weight_grad.h): a
// plain struct, so that autograd sees no input tensors in it (its gradient slot is an
// undefined tensor). Kept in saved_data between forward and backward.
struct Sinks {
  std::vector<at::Tensor> t;
};

void SaveSinks(AutogradContext* ctx, const Sinks& sinks) {
  for (const at::Tensor& s : sinks.t) {
    if (s.defined()) {
      ctx->saved_data["sinks"] = sinks.t;
      return;
    }
  }
}

std::vector<at::Tensor> SavedSinks(AutogradContext* ctx, size_t n) {
  std::vector<at::Tensor> sinks(n);
  if (ctx->saved_data.count("sinks") != 0) {
    std::vector<at::Tensor> saved = ctx->saved_data["sinks"].toTensorVector();
    for (size_t i = 0; i < n && i < saved.size(); ++i) sinks[i] = saved[i];
  }
  return sinks;
}

// `parts` ([rows_i, ...] each, same trailing sizes and dtype) stacked along dim 0 as a
// view over their storage where they lie back to back in it (gate_proj and up_proj, or
// their fp32 gradient accumulators, in a unit's flat buffer without MLP biases,
// param_layout.cc), else undefined.
at::Tensor StackedView(at::TensorList parts) {
  const at::Tensor& first = parts[0];
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const at::Tensor& p = parts[i];
    if (!p.is_contiguous() || p.dim() != first.dim() || p.dtype() != first.dtype() ||
        p.sizes().slice(1) != first.sizes().slice(1) || !p.storage().is_alias_of(first.storage()) ||
        (i > 0 && p.storage_offset() != parts[i - 1].storage_offset() + parts[i - 1].numel())) {
      return at::Tensor();
    }
    rows += p.size(0);
  }
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[0] = rows;
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size() - 1; d > 0; --d) strides[d - 1] = strides[d] * sizes[d];
  return first.as_strided(sizes, strides, first.storage_offset());
}

// The sinks as one fp32 matrix where every weight has one and they lie back to back
// (StackedView), else undefined.
at::Tensor StackedSinks(const std::vector<at::Tensor>& sinks) {
  if (sinks.empty()) return at::Tensor();
  for (const at::Tensor& s : sinks) {
    if (!s.defined()) return at::Tensor();
  }
  return StackedView(sinks);
}

// silu(gate) * up [rows, F] of gu [rows, 2F] contiguous (gate | up), one kernel.
at::Tensor SwigluOfHalves(const at::Tensor& gu) {
  const int64_t rows = gu.size(0), F = gu.size(1) / 2;
  at::Tensor act = at::empty({rows, F}, gu.options());
  fused::SwigluArgs a{CBits(gu), CBits(gu) + F, Bits(act), rows, F, 2 * F};
  Run(gu, a, fused::cpu::Swiglu, SLIDEDP_CUDA_LAUNCHER(fused::cuda::Swiglu));
  return act;
}

// down(silu(gate) * up) + down_b with gate | up in one [..., 2F] tensor. Saves gu and
// down_w; backward recomputes the product (one elementwise kernel) for down_w's
// gradient. With output_unread it computes no output values (nothing of backward reads
// them).
// The roundings are FusedSwiglu's then at::linear's, as in the unfused graph. (The
// output is an _unsafe_view, as ATen's matmul makes its own: not a view that autograd
// would have to track.)
class SwigluDownFunction : public torch::autograd::Function<SwigluDownFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu_in, const at::Tensor& down_w,
                            const c10::optional<at::Tensor>& down_b, bool output_unread, const Sinks& sink) {
    const int64_t width = gu_in.size(-1);
    TORCH_CHECK(width % 2 == 0, "FusedSwigluDown: gate | up needs an even last dimension, got ", width);
    const at::Tensor gu = gu_in.reshape({-1, width}).contiguous();
    std::vector<int64_t> sizes = gu_in.sizes().vec();
    sizes.back() = down_w.size(0);
    ctx->saved_data["bias"] = down_b.has_value() && down_b->defined();
    ctx->save_for_backward({gu, down_w});
    SaveSinks(ctx, sink);
    if (output_unread) return at::empty(sizes, gu.options());
    const at::Tensor act = SwigluOfHalves(gu);
    at::Tensor out = Linear(act, down_w, down_b.value_or(at::Tensor()));
    return at::_unsafe_view(out, sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& gu = saved[0];
    const at::Tensor& w = saved[1];
    const int64_t rows = gu.size(0), F = gu.size(1) / 2;
    const at::Tensor dout = grads[0].reshape({rows, w.size(0)}).contiguous();
    // The product lives only for this GEMM.
    const at::Tensor act = SwigluOfHalves(gu);
    const at::Tensor sink = SavedSinks(ctx, 1)[0];
    at::Tensor dw = sink.defined() && AddWeightGradient(sink, dout, act) ? at::Tensor() : dout.t().mm(act);
    at::Tensor db = ctx->saved_data["bias"].toBool() ? dout.sum(0) : at::Tensor();
    const at::Tensor dact = dout.mm(w);
    at::Tensor dgu = at::empty_like(gu);
    fused::SwigluGradArgs a{CBits(dact), CBits(gu), CBits(gu) + F, Bits(dgu), Bits(dgu) + F, rows, F, 2 * F};
    Run(gu, a, fused::cpu::SwigluBackward, SLIDEDP_CUDA_LAUNCHER(fused::cuda::SwigluBackward));
    std::vector<int64_t> sizes = grads[0].sizes().vec();  // the input's: the output's, last 2F
    sizes.back() = 2 * F;
    return {dgu.view(sizes), dw, db, at::Tensor(), at::Tensor()};
  }
};

// `parts` stacked along dim 0: StackedView where they lie back to back, else a copy.
// Either way the caller keeps it only for one GEMM: autograd saves the parts, which are
// parameters anyway.
at::Tensor Stack(at::TensorList parts) {
  if (parts.size() == 1) return parts[0];
  const at::Tensor view = StackedView(parts);
  return view.defined() ? view : at::cat(parts, 0);
}

// x [..., in] -> [..., sum out_i]: the linears of one input as one GEMM over the stacked
// weights (Stack: a view where they are adjacent; otherwise the copy of at::cat, made
// again in backward rather than kept: it is a few MB a block, next to a GEMM of every
// token). Saves x and the weights (the same as separate linears). Backward: one GEMM for
// all the weights' gradients, returned as row slices of it, one for x.
// Why a function of its own rather than at::linear(x, at::cat(weights)): autograd would
// keep the cat for backward, 2 x FFN x H bf16 a block for gate/up (90 MB for
// Qwen2.5-3B) in every block that keeps its graph; and with the engine's leaf per
// parameter (ViewBlock), a [2F, H] view reaching from gate_w's leaf into up_w's memory
// is not something autograd can give per-leaf gradients through. Inside this function
// the view is plain memory, and backward hands each leaf its own rows.
class LinearsFunction : public torch::autograd::Function<LinearsFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                            at::TensorList biases, const Sinks& sinks) {
    TORCH_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
                "FusedLinears: every weight needs a bias, or none does");
    const at::Tensor w = Stack(weights);
    const at::Tensor b = biases.empty() ? at::Tensor() : Stack(biases);
    at::Tensor y = Linear(x.reshape({-1, x.size(-1)}), w, b);
    variable_list saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["bias"] = !biases.empty();
    SaveSinks(ctx, sinks);
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return at::_unsafe_view(y, sizes);  // as SwigluDownFunction's output
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::TensorList weights = at::TensorList(saved).slice(1);
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    const at::Tensor dy = grads[0].reshape({x2.size(0), -1}).contiguous();
    // The weights with sinks take their gradients there (all in one GEMM where the sinks
    // are one matrix); if any weight has none, the stacked GEMM of before runs as well
    // and that weight gets its rows of it (the engine sinks all or none).
    const std::vector<at::Tensor> sinks = SavedSinks(ctx, weights.size());
    std::vector<bool> sunk(weights.size(), false);
    const at::Tensor stacked = StackedSinks(sinks);
    if (stacked.defined() && AddWeightGradient(stacked, dy, x2)) {
      sunk.assign(weights.size(), true);
    } else {
      int64_t row = 0;
      for (size_t i = 0; i < weights.size(); ++i) {
        const int64_t n = weights[i].size(0);
        sunk[i] = sinks[i].defined() && AddWeightGradient(sinks[i], dy.narrow(1, row, n), x2);
        row += n;
      }
    }
    const bool all_sunk = std::all_of(sunk.begin(), sunk.end(), [](bool b) { return b; });
    const at::Tensor dw = all_sunk ? at::Tensor() : dy.t().mm(x2);
    const at::Tensor db = ctx->saved_data["bias"].toBool() ? dy.sum(0) : at::Tensor();
    variable_list result{dy.mm(Stack(weights)).view(x.sizes())};
    std::vector<at::Tensor> dbs;
    int64_t row = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const int64_t n = weights[i].size(0);
      result.push_back(sunk[i] ? at::Tensor() : dw.narrow(0, row, n));
      if (db.defined()) dbs.push_back(db.narrow(0, row, n));
      row += n;
    }
    result.insert(result.end(), dbs.begin(), dbs.end());
    result.push_back(at::Tensor());  // sinks
    return result;
  }
};

std::atomic<bool>& FusedSwitch() {
  static std::atomic<bool> on{!EnvIs("SLIDEDP_FUSED", "0")};
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

at::Tensor FusedSwigluDown(const at::Tensor& gu, const at::Tensor& down_w, const at::Tensor& down_b,
                           bool output_unread, const at::Tensor& down_sink) {
  return SwigluDownFunction::apply(gu, down_w,
                                   down_b.defined() ? c10::optional<at::Tensor>(down_b) : c10::optional<at::Tensor>(),
                                   output_unread, Sinks{{down_sink}});
}

at::Tensor FusedLinears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                        const std::vector<at::Tensor>& biases, const std::vector<at::Tensor>& sinks) {
  TORCH_CHECK(sinks.empty() || sinks.size() == weights.size(), "FusedLinears: ", sinks.size(), " sinks for ",
              weights.size(), " weights");
  for (size_t i = 0; i < sinks.size(); ++i) {
    TORCH_CHECK(!sinks[i].defined() || (sinks[i].scalar_type() == at::kFloat && sinks[i].sizes() == weights[i].sizes()),
                "FusedLinears: sink ", i, " must be fp32 in its weight's shape ", weights[i].sizes(), ", got ",
                sinks[i].sizes(), " ", sinks[i].scalar_type());
  }
  std::vector<at::Tensor> defined;
  for (const at::Tensor& b : biases) {
    if (b.defined()) defined.push_back(b);
  }
  TORCH_CHECK(defined.empty() || defined.size() == weights.size(),
              "FusedLinears: every weight needs a bias, or none does");
  return LinearsFunction::apply(x, at::TensorList(weights), at::TensorList(defined), Sinks{sinks});
}

LinearCrossEntropy FusedLinearCrossEntropy(const at::Tensor& h_in, const at::Tensor& w,
                                           const at::Tensor& targets_in, double scale, const at::Tensor& dw_sink) {
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
  if (!dw_sink.defined() || !AddWeightGradient(dw_sink, logits, h)) out.dw = at::mm(logits.t(), h);
  return out;
}

}  // namespace slidedp
