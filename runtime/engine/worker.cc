// Worker: see worker.h. The step loop of one worker reads top to bottom in RunStep.
#include "runtime/engine/worker.h"
#include "runtime/engine/clock.h"

#include <c10/core/GradMode.h>


namespace slidedp {
namespace {

// A leaf that collects the gradient of a unit's flat parameters.
at::Tensor Leaf(const at::Tensor& slot) { return slot.detach().requires_grad_(true); }

}  // namespace

Worker::Worker(int rank, const TrainConfig& config, HostState* state, UpdatePipeline* pipeline,
               RouteShared* shared, const at::Device& device)
    : rank_(rank),
      config_(config),
      state_(state),
      pipeline_(pipeline),
      shared_(shared),
      device_(device),
      param_route_(*ParseParamRoute(config.policy.param_route)),
      grad_route_(*ParseGradRoute(config.policy.grad_route)),
      rope_(MakeRope(state->config(), config.seq_len, device)) {}

at::Tensor Worker::Fetch(int u, int64_t step, WorkerStepResult& r) {
  r.wait_seconds += pipeline_->WaitParamsReady(u, step);
  return FetchUnit(param_route_, rank_, *shared_, *state_, u, device_, r.transfers);
}

void Worker::Reduce(int u, int64_t step, const at::Tensor& grad, WorkerStepResult& r) {
  ReduceUnitGrad(grad_route_, rank_, *shared_, *state_, u, step, grad, *pipeline_, r.transfers);
}

WorkerStepResult Worker::RunStep(int64_t step, const WorkerBatch& batch, double inv_tokens) {
  const ModelConfig& cfg = state_->config();
  const ModelLayout& layout = state_->layout();
  const int U = layout.num_units(), head = U - 1;
  const size_t MB = batch.inputs.size();
  WorkerStepResult r;
  std::vector<at::Tensor> ids(MB), targets(MB);
  for (size_t mb = 0; mb < MB; ++mb) {
    ids[mb] = batch.inputs[mb].to(device_);
    targets[mb] = batch.targets[mb].to(device_);
  }

  // ---------------- forward, layer-major; keep each unit's input ----------------
  double t0 = MonotonicSeconds();
  std::vector<std::vector<at::Tensor>> saved(U, std::vector<at::Tensor>(MB));
  std::vector<at::Tensor> h(MB);
  {
    at::NoGradGuard no_grad;
    at::Tensor table = ParamView(layout.units[0], Fetch(0, step, r), 0);
    for (size_t mb = 0; mb < MB; ++mb) h[mb] = EmbeddingForward(table, ids[mb]);
    for (int u = 1; u < head; ++u) {
      const BlockParams p = ViewBlock(layout.units[u], Fetch(u, step, r));
      for (size_t mb = 0; mb < MB; ++mb) {
        saved[u][mb] = h[mb];
        h[mb] = BlockForward(cfg, p, h[mb], rope_);
      }
    }
  }
  r.forward_seconds = MonotonicSeconds() - t0;

  // ---------------- head: loss and its backward, in sequence chunks ----------------
  t0 = MonotonicSeconds();
  at::Tensor head_leaf = Leaf(Fetch(head, step, r));
  at::Tensor table_leaf;  // tied embeddings: the head's weight is unit 0's table
  if (layout.units[head].uses_tied_embedding) table_leaf = Leaf(Fetch(0, step, r));
  at::Tensor loss_acc = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  std::vector<at::Tensor> grad_h(MB);
  for (size_t mb = 0; mb < MB; ++mb) {
    grad_h[mb] = HeadBackward(h[mb], targets[mb], head_leaf, table_leaf, inv_tokens, loss_acc);
    h[mb] = at::Tensor();
  }
  Reduce(head, step, head_leaf.grad(), r);

  // ---------------- backward, l = L-1..0: recompute, backprop, reduce ----------------
  for (int u = head - 1; u >= 1; --u) {
    at::Tensor leaf = Leaf(Fetch(u, step, r));
    for (size_t mb = 0; mb < MB; ++mb) {
      at::Tensor x = saved[u][mb].detach().requires_grad_(true);
      at::Tensor y = BlockForward(cfg, ViewBlock(layout.units[u], leaf), x, rope_);
      y.backward(grad_h[mb]);
      grad_h[mb] = x.grad();
      saved[u][mb] = at::Tensor();
    }
    Reduce(u, step, leaf.grad(), r);
  }

  // ---------------- embedding: scatter-add of the input gradient ----------------
  const UnitLayout& emb = layout.units[0];
  // Accumulated in fp32: many rows of a bf16 table would otherwise round away.
  at::Tensor emb_grad = table_leaf.defined() && table_leaf.grad().defined()
                            ? table_leaf.grad().to(at::kFloat)
                            : at::zeros({emb.numel}, at::TensorOptions().dtype(at::kFloat).device(device_));
  at::Tensor table_grad = emb_grad.view(emb.params[0].shape);
  for (size_t mb = 0; mb < MB; ++mb) {
    table_grad.index_add_(0, ids[mb].reshape({-1}), grad_h[mb].reshape({-1, cfg.hidden_size}).to(at::kFloat));
  }
  Reduce(0, step, emb_grad, r);
  r.backward_seconds = MonotonicSeconds() - t0;
  r.loss_sum = loss_acc.item<double>();
  return r;
}

at::Tensor Worker::HeadBackward(const at::Tensor& hidden, const at::Tensor& targets,
                                const at::Tensor& head, const at::Tensor& table, double inv_tokens,
                                at::Tensor& loss_acc) {
  const ModelConfig& cfg = state_->config();
  const int64_t T = hidden.size(1);
  const int64_t chunk = std::max<int64_t>(1, config_.policy.loss_chunk_tokens / std::max<int64_t>(1, hidden.size(0)));
  at::Tensor grad = at::empty_like(hidden);
  for (int64_t t = 0; t < T; t += chunk) {
    const int64_t len = std::min(chunk, T - t);
    // Views are taken inside each chunk so that every chunk has its own graph.
    const HeadParams p = ViewHead(state_->layout(), head, table);
    at::Tensor xc = hidden.narrow(1, t, len).detach().requires_grad_(true);
    at::Tensor logits = HeadLogits(cfg, p.norm, p.lm_head, xc);
    at::Tensor loss = CrossEntropySum(logits, targets.narrow(1, t, len)) * inv_tokens;
    loss.backward();
    loss_acc.add_(loss.detach().to(at::kDouble));
    grad.narrow(1, t, len).copy_(xc.grad());
  }
  return grad;
}

}  // namespace slidedp
