// Calibration: see calibration.h.
#include "runtime/engine/calibration.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/clock.h"
#include "runtime/engine/communicator.h"
#include "runtime/engine/exception_status.h"
#include "runtime/engine/nccl_communicator.h"
#include "runtime/io/stop_token.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/transformer.h"
#include "runtime/model/weight_grad.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/state/adamw.h"
#if defined(SLIDEDP_WITH_CUDA_TOOLKIT)
#include "runtime/cuda/pcie_probe.h"
#endif

namespace slidedp {

namespace {

// Thrown between timings when the job was asked to stop; Calibrate returns CANCELLED.
struct Stopped {};

void StopPoint(const StopToken* stop) {
  if (StopRequested(stop)) throw Stopped();
}

// Best of `repeats` timings of fn (after one warm-up call); throws Stopped before any
// of them once `stop` is set.
template <typename Fn>
double BestSeconds(int repeats, const StopToken* stop, Fn&& fn) {
  StopPoint(stop);
  fn();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    StopPoint(stop);
    const double t0 = MonotonicSeconds();
    fn();
    best = std::min(best, MonotonicSeconds() - t0);
  }
  return best;
}

// Read + write GB/s of a copy of `bytes` split over `threads` threads.
double CopyGbps(int64_t bytes, int threads, const StopToken* stop) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 0);
  const double s = BestSeconds(2, stop, [&] {
    std::vector<std::thread> ts;
    const int64_t part = bytes / threads;
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = t * part, len = t == threads - 1 ? bytes - begin : part;
      ts.emplace_back([&, begin, len] { std::memcpy(b.data() + begin, a.data() + begin, len); });
    }
    for (std::thread& t : ts) t.join();
  });
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

// Parameters a second of the update pipeline's kernel (bf16 gradient in the streamed
// copy when the job lands gradients so, else fp32) with the job's moment dtype.
double AdamWParamsPerSecond(int64_t n, bool bf16_grad, MomentDtype moments, int threads, const StopToken* stop) {
  std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0.0f), v(n, 0.0f), scales(2 * (n / kMomentBlock + 1), 0.0f);
  std::vector<uint16_t> gb(n, 0x3a83);  // ~1e-3 in bf16
  AdamWHyper h;
  MomentView mv;  // compact moments fit in the fp32 buffers
  mv.dtype = moments;
  mv.m = m.data(), mv.v = v.data();
  mv.m_scale = scales.data(), mv.v_scale = scales.data() + scales.size() / 2;
  const std::vector<DecaySpan> spans = {{0, n, 0.0f}};
  const double s = BestSeconds(2, stop, [&] {
    if (moments != MomentDtype::kFp32) {
      AdamWUpdateStored(h, spans, n, p.data(), bf16_grad ? nullptr : g.data(), gb.data(), mv, /*first_index=*/0,
                        threads);
    } else if (bf16_grad) {
      AdamWUpdateBf16Grad(h, n, p.data(), gb.data(), m.data(), v.data(), threads);
    } else {
      AdamWUpdate(h, n, p.data(), g.data(), m.data(), v.data(), threads);
    }
  });
  return static_cast<double>(n) / s;
}

// Forces the device's queued work to finish (portable across LibTorch versions).
void Sync(const at::Tensor& t) { (void)t.sum().item<double>(); }

// A token's seconds: a block's forward without a graph, its forward with a graph and
// backward (a kept block's two passes), its backward recomputed from the input
// (RecomputedBlockBackward, a recomputed block's), and the head's forward and backward,
// each as the worker runs it: on CUDA the projections' and the LM head's weight
// gradients into fp32 accumulators (weight_grad.h, unless SLIDEDP_WEIGHT_SINKS=0), the
// head as the fused linear + cross-entropy where the fused kernels serve (worker_head.cc).
struct GpuTimes {
  double forward_s = 0.0, kept_s = 0.0, recompute_backward_s = 0.0, head_s = 0.0;
};

// One decoder block of `model` over `tokens` tokens, and the loss head over a chunk.
GpuTimes MeasureGpu(const ModelConfig& model, int64_t batch, int64_t seq, int64_t head_tokens,
                    const at::Device& device, at::ScalarType dtype, const StopToken* stop) {
  const ModelLayout layout = BuildLayout(model);
  const at::TensorOptions opt = at::TensorOptions().device(device).dtype(dtype);
  const UnitLayout& block = layout.units.at(1);
  at::Tensor flat = at::randn({block.numel}, opt) * 0.02;
  // Norm weights near one, as trained models have them.
  for (size_t i = 0; i < block.params.size(); ++i) {
    if (block.params[i].shape.size() == 1) ParamView(block, flat, static_cast<int>(i)).fill_(1.0);
  }
  TokenLayout rope;  // one causal sequence a row
  rope.rope = MakeRope(model, seq, device);
  at::Tensor x = at::randn({batch, seq, model.hidden_size}, opt);
  GpuTimes t;
  const double tokens = static_cast<double>(batch * seq);
  {
    c10::NoGradGuard no_grad;
    const BlockParams p = ViewBlock(block, flat);
    t.forward_s = BestSeconds(2, stop, [&] { Sync(BlockForward(model, p, x, rope)); }) / tokens;
  }
  std::vector<at::Tensor> leaves;
  BlockParams p = ViewBlock(block, flat, &leaves);
  const bool sinks = WeightSinksOn(device);
  const at::Tensor acc = sinks ? at::zeros({block.numel}, opt.dtype(at::kFloat)) : at::Tensor();
  if (sinks) SinkWeights(block, acc, &p);
  const at::Tensor dy = at::ones_like(x);
  auto backward_s = [&](auto&& backward) {
    return BestSeconds(2, stop, [&] {
             at::Tensor xi = x.detach().requires_grad_(true);
             backward(xi);
             Sync(xi.grad());
             for (at::Tensor& l : leaves) {
               if (l.defined()) l.mutable_grad().reset();
             }
           }) /
           tokens;
  };
  t.kept_s = backward_s([&](const at::Tensor& xi) { BlockForward(model, p, xi, rope).backward(dy); });
  t.recompute_backward_s = backward_s([&](const at::Tensor& xi) { RecomputedBlockBackward(model, p, xi, rope, 0, dy); });
  // The head: final norm, logits over the vocabulary, loss, backward.
  at::Tensor norm = at::ones({model.hidden_size}, opt).requires_grad_(true);
  at::Tensor lm = (at::randn({model.vocab_size, model.hidden_size}, opt) * 0.02).requires_grad_(true);
  at::Tensor h = at::randn({1, head_tokens, model.hidden_size}, opt);
  at::Tensor targets = at::randint(model.vocab_size, {1, head_tokens}, at::TensorOptions().device(device).dtype(at::kLong));
  const bool fused = UseFusedOps(h);
  const at::Tensor lm_acc = fused ? at::zeros({model.vocab_size, model.hidden_size}, opt.dtype(at::kFloat))
                                  : at::Tensor();
  t.head_s = BestSeconds(2, stop, [&] {
    at::Tensor hi = h.detach().requires_grad_(true);
    if (fused) {
      FusedHeadBackward(model, norm, lm, hi, targets, 1.0 / static_cast<double>(head_tokens), lm_acc, sinks);
    } else {
      CrossEntropySum(HeadLogits(model, norm, lm, hi), targets).backward();
      lm.mutable_grad().reset();
    }
    Sync(hi.grad());
    norm.mutable_grad().reset();
  }) / static_cast<double>(head_tokens);
  return t;
}

// Bus bandwidth of `comm` (GB/s a rank, as the step model's collective_gbps): every
// rank all-gathers a buffer of `numel` elements, as scatter_allgather does a unit, on
// its own thread and device, `reps` times after one warm-up; the slowest rank's time
// counts. Errors are the collective's (NCCL's or the watchdog's) as Internal; a rank that
// fails aborts the communicator so that the others return.
absl::StatusOr<double> MeasureCollectiveGbps(Communicator& comm, bool cuda, int64_t numel, at::ScalarType dtype,
                                             int reps) {
  const int W = comm.world();
  const int64_t padded = SliceLength(numel, W) * W;
  std::vector<double> seconds(W, 0.0);
  std::vector<absl::Status> errors(W);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < W; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const at::Device device = cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank)) : at::Device(at::kCPU);
        c10::DeviceGuard guard(device);
        at::Tensor buf = at::zeros({padded}, at::TensorOptions().device(device).dtype(dtype)).narrow(0, 0, numel);
        comm.AllGather(rank, buf);
        Sync(buf);
        comm.Barrier(rank);
        const double t0 = MonotonicSeconds();
        for (int i = 0; i < reps; ++i) comm.AllGather(rank, buf);
        Sync(buf);
        seconds[rank] = MonotonicSeconds() - t0;
      } catch (const std::exception& e) {
        errors[rank] = absl::InternalError(absl::StrCat("rank ", rank, ": ", ExceptionMessage(e)));
        comm.Abort();  // the other ranks must not wait for this one
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (const int failed = FailureToReport(errors); failed >= 0) return errors[failed];
  double slowest = 0.0;
  for (int rank = 0; rank < W; ++rank) slowest = std::max(slowest, seconds[rank]);
  const double bytes = static_cast<double>(numel) * at::elementSize(dtype) * (W - 1) / W * reps;
  return bytes / std::max(slowest, 1e-9) / 1e9;
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(const ModelConfig& model, const TrainConfig& config, const StopToken* stop) {
  const double t0 = MonotonicSeconds();
  const ModelShape shape = ShapeOf(model);
  const JobShape job = JobShapeOf(config);
  Calibration c;
  c.rates = DefaultRates(shape, job);
  Rates& r = c.rates;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = config.policy.update_threads > 0 ? config.policy.update_threads : cores;
  try {
    r.host_memory_gbps = CopyGbps(job.cuda ? (int64_t{256} << 20) : (int64_t{32} << 20), cores, stop);
    c.notes.push_back(absl::StrFormat("host memory %.1f GB/s (copy, %d threads)", r.host_memory_gbps, cores));
    const int64_t n = job.cuda ? (int64_t{32} << 20) : (int64_t{4} << 20);
    const MomentDtype moments = config.optimizer.state_dtype;
    r.adamw_params_per_s = AdamWParamsPerSecond(n, Bf16Landing(job, config.policy), moments, threads, stop);
    c.notes.push_back(absl::StrFormat("AdamW %.3g params/s (%d threads, %s moments)", r.adamw_params_per_s, threads,
                                      NameOf(moments)));

    const bool cuda_ok = job.cuda && at::hasCUDA();
    if (job.cuda && !cuda_ok) return absl::FailedPreconditionError("calibration: device cuda without CUDA LibTorch");
    const at::Device device = cuda_ok ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    const at::ScalarType dtype = job.param_bytes == 2 ? at::kBFloat16 : at::kFloat;
    // On the CPU device a short sequence keeps calibration quick.
    const int64_t seq = job.cuda ? config.seq_len : std::min<int64_t>(config.seq_len, 64);
    const int64_t batch = job.cuda ? std::max<int64_t>(1, std::min<int64_t>(config.micro_batch_size, 16384 / std::max<int64_t>(1, seq))) : 1;
    const int64_t head_tokens = std::min<int64_t>(config.policy.loss_chunk_tokens, batch * seq);
    const GpuTimes g = MeasureGpu(model, batch, seq, std::max<int64_t>(1, head_tokens), device, dtype, stop);
    r.forward_s = g.forward_s;
    r.backward_s = std::max(0.0, g.kept_s - g.forward_s);
    // What the recompute adds to that backward: less than a forward on the fused path,
    // which skips the MLP's down projection.
    r.recompute_s = std::max(0.0, g.recompute_backward_s - r.backward_s);
    r.head_s = g.head_s;
    c.notes.push_back(absl::StrFormat(
        "block forward %.3g s, backward %.3g s, its recompute %.3g s a token; head %.3g s a token (%s, %d x %d)",
        r.forward_s, r.backward_s, r.recompute_s, r.head_s, device.str(), batch, seq));
    if (!job.cuda) {
      // Transfers are copies on the worker's thread.
      r.h2d_gbps = r.d2h_gbps = r.duplex_gbps = r.collective_gbps = CopyGbps(int64_t{16} << 20, 1, stop) / 2;
    }
  } catch (const Stopped&) {
    return CheckStop(stop, "calibration");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("calibration: ", ExceptionMessage(e)));
  }
  if (absl::Status s = CheckStop(stop, "calibration"); !s.ok()) return s;
#if defined(SLIDEDP_WITH_CUDA_TOOLKIT)
  if (job.cuda) {
    absl::StatusOr<PcieRates> pcie = MeasurePcie(0, int64_t{256} << 20, 4);
    if (!pcie.ok()) return pcie.status();
    r.h2d_gbps = pcie->h2d_gbps;
    r.d2h_gbps = pcie->d2h_gbps;
    r.duplex_gbps = pcie->duplex_gbps;
    c.notes.push_back(absl::StrFormat("PCIe H2D %.1f, D2H %.1f, both %.1f GB/s", r.h2d_gbps, r.d2h_gbps, r.duplex_gbps));
    absl::StatusOr<DeviceMemory> mem = QueryDeviceMemory(0);
    if (!mem.ok()) return mem.status();
    c.device_free_bytes = mem->free_bytes;
    c.device_total_bytes = mem->total_bytes;
  }
#endif
  if (job.workers > 1) {
    // The job's own kind of communicator among its W devices; a failure here keeps the
    // default and says why (the job's workers will meet the same error and report it).
    const int W = static_cast<int>(job.workers);
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        job.cuda ? CreateNcclCommunicator(W, std::min(60.0, config.collective_timeout_seconds))
                 : absl::StatusOr<std::unique_ptr<Communicator>>(std::make_unique<HostCommunicator>(W));
    absl::StatusOr<double> gbps =
        !comm.ok() ? absl::StatusOr<double>(comm.status())
        : job.cuda ? MeasureCollectiveGbps(**comm, true, int64_t{64} << 20, at::kBFloat16, 4)
                   : MeasureCollectiveGbps(**comm, false, int64_t{1} << 20, at::kFloat, 4);
    if (gbps.ok() && *gbps > 0 && std::isfinite(*gbps)) {
      r.collective_gbps = *gbps;
      c.notes.push_back(absl::StrFormat("collective %.1f GB/s a rank (all-gather, %d %s)", r.collective_gbps, W,
                                        job.cuda ? "GPUs" : "workers"));
    } else {
      c.notes.push_back(absl::StrFormat("collective bandwidth: default %.0f GB/s (not measured: %s)", r.collective_gbps,
                                        gbps.ok() ? "no time" : std::string(gbps.status().message())));
    }
  }
  c.seconds = MonotonicSeconds() - t0;
  return c;
}

absl::StatusOr<PlanManager> StartPlan(const ModelConfig& model, const TrainConfig& config, const StopToken* stop) {
  return PlanManager::Start(model, config, [&] { return Calibrate(model, config, stop); });
}

std::optional<PlanKnobs> ReportStep(PlanManager& plan, StepStats& stats, bool first_of_plan) {
  stats.predicted_step_seconds = plan.prediction().step_seconds;
  stats.bottleneck = plan.prediction().bottleneck;
  StepMeasurement m;
  m.step = stats.step;
  m.step_seconds = stats.step_seconds;
  m.skipped = stats.skipped;
  m.update_busy_seconds = stats.update_busy_seconds;
  for (const WorkerDeviceStats& w : stats.workers) {
    m.workers.push_back({w.h2d_bytes, w.d2h_bytes, w.h2d_busy_seconds, w.d2h_busy_seconds});
  }
  return plan.AfterStep(m, first_of_plan);
}

}  // namespace slidedp
