// TiledMlp: see tiled_mlp.h. The tiled path is a custom autograd function whose forward
// runs without a graph and whose backward rebuilds one tile at a time.
#include "runtime/model/tiled_mlp.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "runtime/model/fused_ops.h"

namespace slidedp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// Fused (fused_ops.h): gate and up as one GEMM, then the down projection (keeping no
// [.., FFN] product for backward; with `output_unread`, no output computed). Otherwise
// ATen's ops, the reference.
at::Tensor Mlp(const MlpWeights& w, const at::Tensor& h, bool fused, bool output_unread = false,
               const MlpSinks& sinks = MlpSinks()) {
  if (fused) {
    return FusedSwigluDown(FusedLinears(h, {w.gate_w, w.up_w}, {w.gate_b, w.up_b}, {sinks.gate, sinks.up}), w.down_w,
                           w.down_b, output_unread, sinks.down);
  }
  return Linear(at::silu(Linear(h, w.gate_w, w.gate_b)) * Linear(h, w.up_w, w.up_b), w.down_w, w.down_b);
}

// Forward only (no graph), tile by tile into one output.
at::Tensor ForwardInTiles(const MlpWeights& w, const at::Tensor& h, int64_t tile, bool fused) {
  const int64_t T = h.size(1);
  at::Tensor out = at::empty_like(h);
  for (int64_t s = 0; s < T; s += tile) {
    const int64_t n = std::min(tile, T - s);
    out.narrow(1, s, n).copy_(Mlp(w, h.narrow(1, s, n), fused));
  }
  return out;
}

// The six weight slots of MlpWeights in a fixed order; the defined ones travel through
// autograd as a list, `present` (bit i: slot i defined) says which they are.
std::vector<at::Tensor*> Slots(MlpWeights& w) {
  return {&w.gate_w, &w.gate_b, &w.up_w, &w.up_b, &w.down_w, &w.down_b};
}

MlpWeights Unpack(at::TensorList list, int64_t present) {
  MlpWeights w;
  size_t next = 0;
  std::vector<at::Tensor*> slots = Slots(w);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (present & (int64_t{1} << i)) *slots[i] = list[next++];
  }
  return w;
}

class TiledMlpFunction : public torch::autograd::Function<TiledMlpFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, at::TensorList weights,
                            int64_t present, int64_t tile, bool fused, const MlpSinks& sinks) {
    at::Tensor out = ForwardInTiles(Unpack(weights, present), h, tile, fused);
    if (sinks.gate.defined() || sinks.up.defined() || sinks.down.defined()) {
      ctx->saved_data["sinks"] = std::vector<at::Tensor>{sinks.gate, sinks.up, sinks.down};
    }
    variable_list saved{h};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["present"] = present;
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["fused"] = fused;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor h = saved[0];
    const int64_t present = ctx->saved_data["present"].toInt();
    const int64_t tile = ctx->saved_data["tile"].toInt();
    const bool fused = ctx->saved_data["fused"].toBool();
    const at::Tensor& gy = grad_outputs[0];
    const int64_t T = h.size(1);
    const size_t K = saved.size() - 1;
    MlpSinks sinks;  // (autograd sees no tensors in an MlpSinks argument)
    if (ctx->saved_data.count("sinks") != 0) {
      const std::vector<at::Tensor> s = ctx->saved_data["sinks"].toTensorVector();
      sinks = MlpSinks{s[0], s[1], s[2]};
    }
    at::Tensor gh = at::empty_like(h);
    std::vector<at::Tensor> gw(K);  // fp32 sums over tiles
    for (int64_t s = 0; s < T; s += tile) {
      const int64_t n = std::min(tile, T - s);
      at::AutoGradMode grad_mode(true);
      variable_list inputs{h.narrow(1, s, n).detach().requires_grad_(true)};
      for (size_t i = 0; i < K; ++i) inputs.push_back(saved[1 + i].detach().requires_grad_(true));
      // Only this tile's gradients are wanted: the fused down projection computes no output.
      const at::Tensor y =
          Mlp(Unpack(at::TensorList(inputs).slice(1), present), inputs[0], fused, /*output_unread=*/true, sinks);
      // A weight whose sink took its gradient has none here.
      const variable_list g = torch::autograd::grad({y}, inputs, {gy.narrow(1, s, n)}, /*retain_graph=*/c10::nullopt,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
      gh.narrow(1, s, n).copy_(g[0]);
      for (size_t i = 0; i < K; ++i) {
        if (!g[1 + i].defined()) continue;
        if (!gw[i].defined()) {
          gw[i] = g[1 + i].to(at::kFloat);
        } else {
          gw[i].add_(g[1 + i]);
        }
      }
    }
    variable_list result{gh};
    for (size_t i = 0; i < K; ++i) {
      result.push_back(gw[i].defined() ? gw[i].to(saved[1 + i].scalar_type()) : at::Tensor());
    }
    result.push_back(at::Tensor());  // present
    result.push_back(at::Tensor());  // tile
    result.push_back(at::Tensor());  // fused
    result.push_back(at::Tensor());  // sinks
    return result;
  }
};

}  // namespace

at::Tensor TiledMlp(const MlpWeights& w, const at::Tensor& h, int64_t tile) {
  return TiledMlp(w, h, tile, UseFusedOps(h));
}

at::Tensor TiledMlp(const MlpWeights& w, const at::Tensor& h, int64_t tile, bool fused, bool output_unread,
                    const MlpSinks& sinks) {
  const int64_t T = h.size(1);
  if (tile <= 0 || tile >= T) {
    return Mlp(w, h, fused, output_unread, sinks);
  }
  MlpWeights copy = w;
  std::vector<at::Tensor> defined;
  int64_t present = 0;
  std::vector<at::Tensor*> slots = Slots(copy);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i]->defined()) {
      present |= int64_t{1} << i;
      defined.push_back(*slots[i]);
    }
  }
  if (!c10::GradMode::is_enabled()) return ForwardInTiles(w, h, tile, fused);  // no graph to keep
  return TiledMlpFunction::apply(h, at::TensorList(defined), present, tile, fused, sinks);
}

int64_t AutoMlpTile(int64_t rows, int64_t seq_len, int64_t ffn, int64_t element_bytes, int64_t budget_bytes) {
  const int64_t per_position = std::max<int64_t>(1, rows * ffn * element_bytes);
  if (seq_len * per_position <= budget_bytes) return seq_len;
  const int64_t fit = budget_bytes / per_position;
  return std::max<int64_t>(256, fit / 256 * 256);
}

}  // namespace slidedp
