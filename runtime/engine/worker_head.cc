// Worker (worker.h): the loss head of a step and of an evaluation, in sequence chunks
// of policy.loss_chunk_tokens tokens so that logits never exist for a whole micro-batch:
// the loss alone (RunEval), and the loss with its backward into the final norm, the LM
// head (or, tied, the embedding's table) and the hidden states (RunStep; the fused
// linear + cross-entropy on the CUDA device in bf16).
// Threads: the worker's own thread, on the compute stream.
#include <c10/core/GradMode.h>

#include <algorithm>

#include "runtime/engine/worker.h"
#include "runtime/model/fused_ops.h"

namespace slidedp {
namespace {

// A parameter as its own autograd leaf: a detached view of the slot that requires grad.
at::Tensor Leaf(const UnitLayout& unit, const at::Tensor& slot, int index) {
  return ParamView(unit, slot, index).detach().requires_grad_(true);
}

// Sequence positions per LM-head chunk for micro-batches of `rows` rows.
int64_t LossChunk(int64_t loss_chunk_tokens, int64_t rows) {
  return std::max<int64_t>(1, loss_chunk_tokens / std::max<int64_t>(1, rows));
}

}  // namespace

at::Tensor Worker::HeadLossSum(const at::Tensor& hidden, const at::Tensor& targets, const at::Tensor& head,
                               const at::Tensor& table) {
  at::NoGradGuard no_grad;
  const HeadParams p = ViewHead(state_->layout(), head, table);
  const int64_t T = hidden.size(1);
  const int64_t chunk = LossChunk(config_.policy.loss_chunk_tokens, hidden.size(0));
  at::Tensor sum = at::zeros({}, hidden.options().dtype(at::kDouble));
  for (int64_t t = 0; t < T; t += chunk) {
    StopPoint();
    const int64_t len = std::min(chunk, T - t);
    at::Tensor logits = HeadLogits(state_->config(), p.norm, p.lm_head, hidden.narrow(1, t, len));
    sum.add_(CrossEntropySum(logits, targets.narrow(1, t, len)).to(at::kDouble));
  }
  return sum;
}

at::Tensor Worker::HeadBackward(const at::Tensor& hidden, const at::Tensor& targets, const at::Tensor& head,
                                const at::Tensor& table, double inv_tokens, at::Tensor& loss_acc,
                                at::Tensor& head_grad, at::Tensor& table_grad) {
  const ModelConfig& cfg = state_->config();
  const ModelLayout& layout = state_->layout();
  const UnitLayout& hu = layout.units.back();
  const int64_t T = hidden.size(1);
  const int64_t chunk = LossChunk(config_.policy.loss_chunk_tokens, hidden.size(0));
  at::Tensor grad = at::empty_like(hidden);
  // The final norm, and the output projection: the head's own, or unit 0's table.
  const int norm_i = hu.Find("model.norm.weight");
  const bool tied = hu.uses_tied_embedding;
  const int lm_i = tied ? 0 : hu.Find("lm_head.weight");
  at::Tensor norm = Leaf(hu, head, norm_i);
  at::Tensor lm = tied ? Leaf(layout.units[0], table, lm_i) : Leaf(hu, head, lm_i);
  const ParamSpec& lm_spec = tied ? layout.units[0].params[lm_i] : hu.params[lm_i];
  at::Tensor& lm_grad = tied ? table_grad : head_grad;
  const bool fused = UseFusedOps(hidden) && lm.scalar_type() == at::kBFloat16;
  for (int64_t t = 0; t < T; t += chunk) {
    StopPoint();
    const int64_t len = std::min(chunk, T - t);
    at::Tensor xc = hidden.narrow(1, t, len).detach().requires_grad_(true);
    if (fused) {
      // lm's gradient into its fp32 accumulator (straight there with the sinks).
      const at::Tensor lm_acc = lm_grad.narrow(0, lm_spec.offset, lm_spec.numel).view(lm.sizes());
      const at::Tensor loss =
          FusedHeadBackward(cfg, norm, lm, xc, targets.narrow(1, t, len), inv_tokens, lm_acc, sink_weights_);
      loss_acc.add_(loss.to(at::kDouble));
      grad.narrow(1, t, len).copy_(xc.grad());
      Accumulate(norm, hu.params[norm_i], head_grad);
      continue;
    }
    at::Tensor logits = HeadLogits(cfg, norm, lm, xc);
    at::Tensor loss = CrossEntropySum(logits, targets.narrow(1, t, len)) * inv_tokens;
    loss.backward();
    loss_acc.add_(loss.detach().to(at::kDouble));
    grad.narrow(1, t, len).copy_(xc.grad());
    Accumulate(norm, hu.params[norm_i], head_grad);
    Accumulate(lm, lm_spec, lm_grad);
  }
  return grad;
}

}  // namespace slidedp
