// The reference the engine's exactness tests compare against: a seeded random model
// saved as a Hugging Face directory, plain LibTorch autograd on the whole model with
// torch.optim.AdamW's arithmetic written out (or the quantized reference for compact
// moments), and the engine run the same way; with the tolerance checks. Header-only,
// for tests/runtime/engine/*_test.cc; the test's thread.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/engine/batch_tensors.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/full_model.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/transformer.h"
#include "runtime/state/adamw.h"
#include "runtime/state/host_state.h"
#include "runtime/state/lr_schedule.h"
#include "tests/test_support.h"

namespace slidedp::testing {

// A 2-layer model of `family` small enough for exactness tests on two cores.
inline ModelConfig TinyShape(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 80;
  c.hidden_size = 32;
  c.intermediate_size = 56;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 10000.0;
  if (family == ModelFamily::kQwen2) {
    c.qkv_bias = true;
    c.tie_word_embeddings = true;
  } else {
    c.qk_norm = true;
    c.head_dim = 16;  // differs from hidden / heads
    c.tie_word_embeddings = false;
  }
  return c;
}

using Weights = std::map<std::string, at::Tensor>;

// Saves a seeded random model as a Hugging Face directory; returns its weights.
inline Weights MakeModelDir(const ModelConfig& c, const std::string& dir, uint64_t seed) {
  HostState state(c, at::kFloat, 0, false);
  if (!state.InitRandom(seed).ok()) ADD_FAILURE() << "InitRandom";
  const ModelLayout& layout = state.layout();
  // Non-trivial norms and biases so that their gradients matter.
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const ParamSpec& p : layout.units[u].params) {
      if (p.shape.size() == 1) {
        state.unit(u).master.narrow(0, p.offset, p.numel).add_(
            at::linspace(-0.1, 0.1, p.numel, at::kFloat));
      }
    }
  }
  EXPECT_TRUE(SaveHfModel(dir, c, layout, [&](int u, int p) -> const float* {
                return state.unit(u).master.data_ptr<float>() + layout.units[u].params[p].offset;
              }, "F32", int64_t{1} << 30).ok());
  Weights w;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int i = 0; i < static_cast<int>(layout.units[u].params.size()); ++i) {
      w[layout.units[u].params[i].name] = ParamView(layout.units[u], state.unit(u).master, i).clone();
    }
  }
  return w;
}

inline Weights ReadModelDir(const ModelConfig& c, const std::string& dir) {
  const ModelLayout layout = BuildLayout(c);
  Weights w;
  std::vector<std::vector<at::Tensor>> bufs(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const ParamSpec& p : layout.units[u].params) bufs[u].push_back(at::empty(p.shape, at::kFloat));
  }
  absl::Status s = LoadHfWeights(dir, layout, [&](int u, int p) { return bufs[u][p].data_ptr<float>(); });
  EXPECT_TRUE(s.ok()) << s;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (size_t i = 0; i < bufs[u].size(); ++i) w[layout.units[u].params[i].name] = bufs[u][i];
  }
  return w;
}

// One flat tensor per unit from named weights.
inline std::vector<at::Tensor> Flats(const ModelLayout& layout, const Weights& w) {
  std::vector<at::Tensor> flat(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<at::Tensor> parts;
    for (const ParamSpec& p : layout.units[u].params) parts.push_back(w.at(p.name).reshape({-1}));
    flat[u] = at::cat(parts);
  }
  return flat;
}

// The plain forward's mean loss (the reference's loss) of one batch.
inline at::Tensor MeanLoss(const ModelConfig& c, const ModelLayout& layout, const std::vector<at::Tensor>& flat,
                    const BatchTensors& b) {
  at::Tensor logits = FullModelLogits(c, layout, flat, b.inputs, b.positions);
  return at::cross_entropy_loss(logits.reshape({-1, c.vocab_size}), b.targets.reshape({-1}), {},
                                at::Reduction::Mean, kIgnoreIndex);
}

// Plain training: whole-model forward with full logits, mean loss, autograd,
// clip_grad_norm_, and AdamW written out as torch.optim.AdamW defines it. `data`: the
// training data (null: OpenDataset of tc.data).
// With optimizer.state_dtype bf16 or int8, the update is the scalar reference of the
// same quantized AdamW (AdamWStoredReference) over each whole unit.
inline Weights ReferenceTrain(const ModelConfig& c, const Weights& init, const TrainConfig& tc,
                       std::unique_ptr<Dataset> data = nullptr) {
  const ModelLayout layout = BuildLayout(c);
  std::vector<at::Tensor> flat = Flats(layout, init), m, v, scales;
  const MomentDtype moments = tc.optimizer.state_dtype;
  for (int u = 0; u < layout.num_units(); ++u) {
    flat[u].requires_grad_(true);
    m.push_back(at::zeros_like(flat[u]));
    v.push_back(at::zeros_like(flat[u]));
    scales.push_back(at::zeros({2 * (flat[u].numel() / kMomentBlock + 1)}, at::kFloat));
  }
  if (data == nullptr) data = *OpenDataset(tc.data, tc.seq_len, c.vocab_size, tc.seed);
  const OptimizerConfig& o = tc.optimizer;
  for (int64_t step = 0; step < tc.steps; ++step) {
    MeanLoss(c, layout, flat, ToTensors(*data->Next(tc.global_batch_sequences()))).backward();
    double total = 0;
    for (const at::Tensor& f : flat) total += f.grad().pow(2).sum().item<double>();
    const double norm = std::sqrt(total);
    const double clip = o.max_grad_norm > 0 ? std::min(1.0, o.max_grad_norm / (norm + 1e-6)) : 1.0;
    const double lr = LearningRate(o, step, tc.steps);
    const int64_t t = step + 1;
    const double bc1 = 1.0 - std::pow(o.beta1, t), bc2 = 1.0 - std::pow(o.beta2, t);
    at::NoGradGuard no_grad;
    for (int u = 0; moments != MomentDtype::kFp32 && u < layout.num_units(); ++u) {
      AdamWHyper h;
      h.lr = static_cast<float>(lr);
      h.beta1 = static_cast<float>(o.beta1);
      h.beta2 = static_cast<float>(o.beta2);
      h.eps = static_cast<float>(o.eps);
      h.step = t;
      h.grad_scale = static_cast<float>(clip);
      std::vector<DecaySpan> spans;
      for (const ParamSpec& ps : layout.units[u].params) {
        spans.push_back({ps.offset, ps.offset + ps.numel, ps.decay ? static_cast<float>(o.weight_decay) : 0.0f});
      }
      // m and v's buffers are fp32-sized: room for the codes of any dtype.
      MomentView mv;
      mv.dtype = moments;
      mv.m = m[u].data_ptr(), mv.v = v[u].data_ptr();
      mv.m_scale = scales[u].data_ptr<float>();
      mv.v_scale = mv.m_scale + scales[u].numel() / 2;
      at::Tensor g = flat[u].grad().contiguous();
      AdamWStoredReference(h, spans, flat[u].numel(), flat[u].data_ptr<float>(), g.data_ptr<float>(), nullptr, mv,
                           /*first_index=*/0);
      flat[u].mutable_grad() = at::Tensor();
    }
    for (int u = 0; moments == MomentDtype::kFp32 && u < layout.num_units(); ++u) {
      for (int i = 0; i < static_cast<int>(layout.units[u].params.size()); ++i) {
        const ParamSpec& ps = layout.units[u].params[i];
        at::Tensor p = ParamView(layout.units[u], flat[u], i);
        at::Tensor g = ParamView(layout.units[u], flat[u].grad(), i) * clip;
        at::Tensor mi = ParamView(layout.units[u], m[u], i), vi = ParamView(layout.units[u], v[u], i);
        p.mul_(1.0 - lr * (ps.decay ? o.weight_decay : 0.0));
        mi.mul_(o.beta1).add_(g, 1.0 - o.beta1);
        vi.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
        p.addcdiv_(mi, vi.sqrt() / std::sqrt(bc2) + o.eps, -lr / bc1);
      }
      flat[u].mutable_grad() = at::Tensor();
    }
  }
  Weights w;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int i = 0; i < static_cast<int>(layout.units[u].params.size()); ++i) {
      w[layout.units[u].params[i].name] = ParamView(layout.units[u], flat[u].detach(), i);
    }
  }
  return w;
}

inline TrainConfig BaseConfig(const std::string& model_dir) {
  TrainConfig tc = testing::TinyTrainConfig(/*steps=*/5);
  tc.model = model_dir;
  tc.seq_len = 16;
  tc.grad_accum = 2;
  tc.seed = 42;
  tc.optimizer.warmup_steps = 2;
  tc.optimizer.schedule = LrScheduleKind::kCosine;
  tc.optimizer.weight_decay = 0.1;
  tc.optimizer.max_grad_norm = 0.5;  // below the initial norm: clipping triggers
  tc.policy.chunk_elems = 1000;      // several chunks per unit
  tc.policy.loss_chunk_tokens = 12;  // several loss chunks per sequence
  return tc;
}

inline Weights RunEngine(const TrainConfig& tc, const ModelConfig& c, const std::string& out,
                  TrainerInputs inputs = {}, std::vector<StepStats>* stats = nullptr) {
  auto trainer = Trainer::Create(tc, std::move(inputs));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  for (int64_t s = 0; s < tc.steps; ++s) {
    auto st = (*trainer)->Step();
    EXPECT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(std::isfinite(st->loss));
    if (stats != nullptr) stats->push_back(*st);
  }
  EXPECT_TRUE((*trainer)->ExportHf(out).ok());
  return ReadModelDir(c, out);
}

inline void ExpectClose(const Weights& got, const Weights& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, ref] : want) {
    const at::Tensor& g = got.at(name);
    const double rel = (g - ref).norm().item<double>() / std::max(1e-30, ref.norm().item<double>());
    EXPECT_LT(rel, tol) << name;
  }
}

// The largest relative difference (norm of the difference over the norm) of any tensor.
inline double MaxRelativeDifference(const Weights& a, const Weights& b) {
  double worst = 0;
  for (const auto& [name, w] : b) {
    worst = std::max(worst, (a.at(name) - w).norm().item<double>() / std::max(1e-30, w.norm().item<double>()));
  }
  return worst;
}

}  // namespace slidedp::testing
