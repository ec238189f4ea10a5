// adamw_bench: CPU AdamW throughput of slidedp's AdamWUpdate against LibTorch's own
// torch::optim::AdamW on the same tensors, at one thread and at every available core,
// and how far apart their results are after a few steps; then the update as the engine
// runs it on the GPU path (the bf16 gradient in the streamed bf16 copy, which the update
// rewrites) with each moment dtype of optimizer.state_dtype (fp32, bf16, int8).
// Usage: adamw_bench [--step=N] [SIZE...]   sizes in parameters, with an optional K/M/G
// suffix (decimal); default 1M 16M. Example: adamw_bench 16M 134M. --step: the dtype
// table's updates count their steps from N + 1 (default 0); from step 325 beta2 0.95's
// bias correction is exactly 1 in fp32 and the vector kernels skip its division.
// Threads: main only (plus both libraries' own pools).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_kernels.h"
#include "runtime/state/thread_pool.h"

namespace slidedp {
namespace {

// A rate is the best of kWindows windows of at least kWindowSeconds (and one step)
// each: the best window is the one least disturbed by other processes.
constexpr int kWindows = 3;
constexpr double kWindowSeconds = 0.25;
constexpr int kCheckSteps = 5;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "16M" -> 16000000 (K, M, G are decimal); 0 when it does not parse.
int64_t ParseSize(const char* arg) {
  char* end = nullptr;
  const double v = std::strtod(arg, &end);
  double unit = 1;
  if (*end == 'K' || *end == 'k')
    unit = 1e3, ++end;
  else if (*end == 'M' || *end == 'm')
    unit = 1e6, ++end;
  else if (*end == 'G' || *end == 'g')
    unit = 1e9, ++end;
  if (end == arg || *end != '\0' || !(v > 0)) return 0;
  return static_cast<int64_t>(v * unit);
}

AdamWHyper Hyper() {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  return h;
}

// The same optimizer in LibTorch, with our fp32 hyperparameters widened exactly.
torch::optim::AdamWOptions TorchOptions(const AdamWHyper& h) {
  return torch::optim::AdamWOptions(h.lr)
      .betas({static_cast<double>(h.beta1), static_cast<double>(h.beta2)})
      .eps(h.eps)
      .weight_decay(h.weight_decay);
}

// One optimizer's state over n parameters, starting from `p0` and gradient `g`.
struct Ours {
  at::Tensor p, g, m, v;
  int64_t step = 0;
  Ours(const at::Tensor& p0, const at::Tensor& g0)
      : p(p0.clone()), g(g0), m(at::zeros_like(p0)), v(at::zeros_like(p0)) {}
  void Step(int threads) {
    AdamWHyper h = Hyper();
    h.step = ++step;
    AdamWUpdate(h, p.numel(), p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                v.data_ptr<float>(), threads);
  }
};

// torch::optim keys its per-parameter state by the TensorImpl: as a string in 1.x,
// as the pointer itself in 2.x.
auto StateKey(const at::Tensor& p) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(p.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(p.unsafeGetTensorImpl());
#endif
}

struct Torch {
  at::Tensor p;
  std::unique_ptr<torch::optim::AdamW> opt;
  Torch(const at::Tensor& p0, const at::Tensor& g0) : p(p0.clone()) {
    p.set_requires_grad(true);
    p.mutable_grad() = g0.clone();
    opt = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{p}, TorchOptions(Hyper()));
  }
  void Step() { opt->step(); }
  torch::optim::AdamWParamState& State() {
    return static_cast<torch::optim::AdamWParamState&>(
        *opt->state().at(StateKey(p)));
  }
};

// Steps/second of `step`, after one warm-up call.
double StepsPerSecond(const std::function<void()>& step) {
  step();
  double best = 0;
  for (int w = 0; w < kWindows; ++w) {
    int64_t steps = 0;
    const double t0 = Now();
    double t = t0;
    while (steps < 1 || t - t0 < kWindowSeconds) {
      step();
      ++steps;
      t = Now();
    }
    best = std::max(best, steps / (t - t0));
  }
  return best;
}

struct Diff {
  double max_rel = 0;  // max |a - b| / max(|a|, |b|) over elements where either is > 1e-30
  double max_abs = 0;
  int64_t identical = 0;
};

Diff Compare(const at::Tensor& a, const at::Tensor& b) {
  const float* x = a.data_ptr<float>();
  const float* y = b.data_ptr<float>();
  Diff d;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(float)) == 0) {
      ++d.identical;
      continue;
    }
    const double abs = std::fabs(double(x[i]) - double(y[i]));
    const double scale = std::max(std::fabs(double(x[i])), std::fabs(double(y[i])));
    d.max_abs = std::max(d.max_abs, abs);
    if (scale > 1e-30) d.max_rel = std::max(d.max_rel, abs / scale);
  }
  return d;
}

void PrintDiff(const char* name, const Diff& d, int64_t n) {
  std::printf("  %-3s max rel diff %.3g, max abs diff %.3g, bit-identical %lld/%lld\n", name,
              d.max_rel, d.max_abs, static_cast<long long>(d.identical), static_cast<long long>(n));
}

// kCheckSteps steps of both from the same start, then the element-wise differences.
void CheckAgainstTorch(const at::Tensor& p0, const at::Tensor& g, int threads) {
  at::set_num_threads(threads);
  Ours ours(p0, g);
  Torch torch_opt(p0, g);
  for (int s = 0; s < kCheckSteps; ++s) {
    ours.Step(threads);
    torch_opt.Step();
  }
  at::NoGradGuard no_grad;
  const int64_t n = p0.numel();
  std::printf("after %d steps (weight_decay %.2g), slidedp vs torch:\n", kCheckSteps,
              Hyper().weight_decay);
  PrintDiff("p", Compare(ours.p, torch_opt.p.detach()), n);
  PrintDiff("m", Compare(ours.m, torch_opt.State().exp_avg()), n);
  PrintDiff("v", Compare(ours.v, torch_opt.State().exp_avg_sq()), n);
}

void BenchSize(int64_t n, const std::vector<int>& thread_counts) {
  at::manual_seed(1234);
  const at::Tensor p0 = at::randn({n});
  const at::Tensor g = at::randn({n}) * 1e-2;
  std::printf("\n== %lld parameters (%.0f MB per fp32 buffer)\n", static_cast<long long>(n),
              n * 4e-6);
  CheckAgainstTorch(p0, g, thread_counts.back());
  std::printf("%8s  %16s  %16s  %8s  %14s\n", "threads", "slidedp Mparam/s", "torch Mparam/s",
              "speedup", "slidedp GB/s*");
  for (int threads : thread_counts) {
    at::set_num_threads(threads);
    Ours ours(p0, g);
    const double ours_rate = n * StepsPerSecond([&] { ours.Step(threads); });
    double torch_rate = 0;
    {
      Torch torch_opt(p0, g);
      torch_rate = n * StepsPerSecond([&] { torch_opt.Step(); });
    }
    std::printf("%8d  %16.1f  %16.1f  %7.1fx  %14.1f\n", threads, ours_rate / 1e6, torch_rate / 1e6,
                ours_rate / torch_rate, ours_rate * 28 / 1e9);
  }
  std::fflush(stdout);
}

// The moment dtypes' fast path (this CPU's kernel, `threads` threads) against the
// scalar single-threaded reference, 3 steps of n elements from the same start: whether
// parameters, streamed copy, moments and scales came out bit for bit the same.
void CheckStoredAgainstReference(int64_t n, int threads) {
  at::manual_seed(99);
  const at::Tensor p0 = at::randn({n});
  const at::Tensor g0 = (at::randn({n}) * 1e-2).to(at::kBFloat16);
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    struct Run {
      at::Tensor p, gp, m, v, scales;
      MomentView mv;
    };
    auto make = [&] {
      Run r{p0.clone(), g0.clone(), at::zeros({n * MomentWidth(d)}, at::kByte), at::zeros({n * MomentWidth(d)}, at::kByte),
            at::zeros({2 * ((n + kMomentBlock - 1) / kMomentBlock)}, at::kFloat), MomentView{}};
      r.mv.dtype = d;
      r.mv.m = r.m.data_ptr();
      r.mv.v = r.v.data_ptr();
      if (d == MomentDtype::kInt8) {
        r.mv.m_scale = r.scales.data_ptr<float>();
        r.mv.v_scale = r.mv.m_scale + r.scales.numel() / 2;
      }
      return r;
    };
    Run fast = make(), ref = make();
    AdamWHyper h = Hyper();
    const std::vector<DecaySpan> spans = {{0, n / 3, h.weight_decay}, {n / 3, n, 0.0f}};
    for (int step = 1; step <= 3; ++step) {
      h.step = step;
      fast.gp.copy_(g0);
      ref.gp.copy_(g0);
      AdamWUpdateStored(h, spans, n, fast.p.data_ptr<float>(), nullptr, static_cast<uint16_t*>(fast.gp.data_ptr()),
                        fast.mv, /*first_index=*/0, threads);
      AdamWStoredReference(h, spans, n, ref.p.data_ptr<float>(), nullptr, static_cast<uint16_t*>(ref.gp.data_ptr()),
                           ref.mv, /*first_index=*/0);
    }
    const bool same = fast.p.equal(ref.p) && fast.gp.view(at::kShort).equal(ref.gp.view(at::kShort)) &&
                      fast.m.equal(ref.m) && fast.v.equal(ref.v) && fast.scales.equal(ref.scales);
    std::printf("%s moments, %s kernel at %d threads vs the scalar reference, 3 steps of %lld: %s\n", NameOf(d),
                adamw_internal::IsaName(adamw_internal::BestIsa()), threads, static_cast<long long>(n),
                same ? "bit-identical" : "DIFFERENT");
  }
  std::fflush(stdout);
}

// The engine's update with bf16 gradients in the streamed copy, per moment dtype, at
// each thread count: parameters per second and the bytes each moves per parameter
// (master 8, copy 2 + 2, moments as stored).
void BenchMomentDtypes(int64_t n, const std::vector<int>& thread_counts, int64_t first_step) {
  at::manual_seed(1234);
  const at::Tensor p0 = at::randn({n});
  const at::Tensor g0 = (at::randn({n}) * 1e-2).to(at::kBFloat16);
  AdamWHyper at_first = Hyper();
  at_first.step = first_step + 1;
  std::printf("\n== %lld parameters, bf16 gradient in the streamed copy, by optimizer.state_dtype "
              "(steps from %lld, bias correction %s)\n",
              static_cast<long long>(n), static_cast<long long>(first_step + 1),
              adamw_internal::UnitBias2(adamw_internal::MakeCoeffs(at_first)) ? "exactly 1" : "below 1 at first");
  std::printf("%8s  %6s  %12s  %8s  %10s  %8s\n", "threads", "dtype", "Mparam/s", "vs fp32", "bytes/param",
              "GB/s");
  for (int threads : thread_counts) {
    double fp32_rate = 0;
    for (MomentDtype d : {MomentDtype::kFp32, MomentDtype::kBf16, MomentDtype::kInt8}) {
      at::Tensor p = p0.clone(), gp = g0.clone();
      const int64_t width = MomentWidth(d);
      at::Tensor m = at::zeros({n * width}, at::kByte), v = at::zeros({n * width}, at::kByte);
      at::Tensor scales = at::zeros({2 * ((n + kMomentBlock - 1) / kMomentBlock)}, at::kFloat);
      MomentView mv;
      mv.dtype = d;
      mv.m = m.data_ptr();
      mv.v = v.data_ptr();
      if (d == MomentDtype::kInt8) {
        mv.m_scale = scales.data_ptr<float>();
        mv.v_scale = mv.m_scale + scales.numel() / 2;
      }
      AdamWHyper h = Hyper();
      h.step = first_step;
      const std::vector<DecaySpan> spans = {{0, n, h.weight_decay}};
      auto* gpp = static_cast<uint16_t*>(gp.data_ptr());
      const double rate = n * StepsPerSecond([&] {
        ++h.step;
        if (d == MomentDtype::kFp32) {  // the engine's fp32 path: today's kernel
          AdamWUpdateBf16Grad(h, n, p.data_ptr<float>(), gpp, static_cast<float*>(mv.m),
                              static_cast<float*>(mv.v), threads);
        } else {
          AdamWUpdateStored(h, spans, n, p.data_ptr<float>(), nullptr, gpp, mv, /*first_index=*/0, threads);
        }
      });
      if (d == MomentDtype::kFp32) fp32_rate = rate;
      const double bytes = 12.0 + static_cast<double>(MomentBytes(d, n)) * 2 / n;
      std::printf("%8d  %6s  %12.1f  %7.2fx  %10.2f  %8.1f\n", threads, NameOf(d), rate / 1e6,
                  rate / fp32_rate, bytes, rate * bytes / 1e9);
    }
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  int64_t first_step = 0;
  for (int i = 1; i < argc; ++i) {
    bool ok;
    if (std::strncmp(argv[i], "--step=", 7) == 0) {
      char* end = nullptr;
      first_step = std::strtoll(argv[i] + 7, &end, 10);
      ok = end != argv[i] + 7 && *end == '\0' && first_step >= 0;
    } else {
      sizes.push_back(ParseSize(argv[i]));
      ok = sizes.back() > 0;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: adamw_bench [--step=N] [SIZE...]  (e.g. 16M 134M; default 1M 16M; N >= 0)\n"
                   "bad argument '%s'\n",
                   argv[i]);
      return 2;
    }
  }
  if (sizes.empty()) sizes = {1000000, 16000000};
  const int cpus = AvailableCpus();
  std::vector<int> threads = {1};
  if (cpus > 1) threads.push_back(cpus);
  std::printf("adamw_bench: slidedp kernel %s, %d CPUs available, LibTorch %s\n",
              adamw_internal::IsaName(adamw_internal::BestIsa()), cpus, TORCH_VERSION);
  std::printf("(* 28 bytes moved per parameter: read p, g, m, v; write p, m, v)\n");
  for (int64_t n : sizes) BenchSize(n, threads);
  CheckStoredAgainstReference(std::min<int64_t>(sizes.back(), int64_t{1} << 22) + 1000, threads.back());
  for (int64_t n : sizes) BenchMomentDtypes(n, threads, first_step);
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
