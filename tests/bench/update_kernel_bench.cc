// update_kernel_bench: the compute rate of the CPU update's kernels, memory out of the
// way: each thread updates its own tile small enough to stay in its core's caches, many
// times over, with the best instruction set of this CPU. adamw_bench measures the update
// over host memory; this one says whether a kernel is bound by its instructions (its
// rate here at T threads near adamw_bench's at T) or by memory (far above). Kernels: the
// one-pass update with 8-bit moments (AdamWInt8Tile) and its encode alone, the one-pass
// updates with fp32 and bf16 moments; the gradient as the engine's bf16 streamed copy.
// Usage: update_kernel_bench [--elements=N] [--reps=R] [--kernel=WORD] [--step=S] [THREADS...]
// (default 32768, 2000, every kernel, step 3, threads 1 and every core; --kernel runs
// those whose name holds WORD, e.g. int8; from step 325 beta2 0.95's bias correction is
// exactly 1 and the vector kernels skip its division)
// Threads: main, and THREADS std::threads a measurement, each on its own tile.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/state/adamw_kernels.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {
namespace {

using adamw_internal::AdamWInt8Tile;
using adamw_internal::AdamWOnePassTile;
using adamw_internal::Bf16Bits;
using adamw_internal::Coeffs;
using adamw_internal::EncodeMoments;
using adamw_internal::Isa;
using adamw_internal::RoundingSeed;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One thread's buffers: parameters, the bf16 gradient copy (restored every 64 updates so
// the parameters keep moving by gradients of the same size), moments in each dtype.
struct Tile {
  explicit Tile(int64_t n, int seed)
      : p(n), m32(n), v32(n), sqrt_v(n), grad0(n), gp(n), m16(n), v16(n), qm(n), qv(n),
        m_scale((n + kMomentBlock - 1) / kMomentBlock), v_scale(m_scale.size()) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d;
    for (int64_t i = 0; i < n; ++i) {
      p[i] = 0.02f * d(rng);
      grad0[i] = Bf16Bits(1e-3f * d(rng));
      m32[i] = 1e-4f * d(rng);
      v32[i] = 1e-8f * std::abs(d(rng));
      sqrt_v[i] = std::sqrt(v32[i]);
      m16[i] = Bf16Bits(m32[i]);
      v16[i] = Bf16Bits(v32[i]);
    }
    gp = grad0;
  }
  MomentView Int8() { return {MomentDtype::kInt8, qm.data(), qv.data(), m_scale.data(), v_scale.data()}; }
  std::vector<float> p, m32, v32, sqrt_v;
  std::vector<uint16_t> grad0, gp, m16, v16;
  std::vector<int8_t> qm;
  std::vector<uint8_t> qv;
  std::vector<float> m_scale, v_scale;
};

enum Kernel { kInt8Tile, kInt8Encode, kFp32OnePass, kBf16OnePass, kKernels };
const char* const kNames[kKernels] = {"int8 one-pass", "int8 encode only", "fp32 one-pass", "bf16 one-pass"};

// One update of tile `t` with kernel `k`: one decay span over [0, n) with its
// coefficients (`spans`, `coeffs`, made once by the caller; the int8 kernel takes them as
// vectors, the others coeffs[0]).
void Run(Kernel k, Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, Tile& t,
         int64_t n, const RoundingSeed& seed) {
  const Coeffs& c = coeffs.front();
  switch (k) {
    case kInt8Tile:
      AdamWInt8Tile(isa, spans, coeffs, 0, n, t.p.data(), nullptr, t.gp.data(), t.Int8(), seed);
      break;
    case kInt8Encode:
      EncodeMoments(isa, t.Int8(), n, t.m32.data(), t.v32.data(), seed, t.sqrt_v.data());
      break;
    case kFp32OnePass:
      AdamWOnePassTile(isa, c, n, t.p.data(), nullptr, t.gp.data(), t.m32.data(), t.v32.data());
      break;
    default:
      AdamWOnePassTile(isa, c, n, t.p.data(), nullptr, t.gp.data(), t.m16.data(), t.v16.data());
  }
}

int Main(int argc, char** argv) {
  int64_t n = 32768;
  int reps = 2000;
  int64_t step = 3;
  std::vector<int> threads;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--elements=", 11) == 0) {
      n = std::atoll(argv[i] + 11);
    } else if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::atoi(argv[i] + 7);
    } else if (std::strncmp(argv[i], "--kernel=", 9) == 0) {
      only = argv[i] + 9;
    } else if (std::strncmp(argv[i], "--step=", 7) == 0 && std::atoll(argv[i] + 7) > 0) {
      step = std::atoll(argv[i] + 7);
    } else if (argv[i][0] != '-' && std::atoi(argv[i]) > 0) {
      threads.push_back(std::atoi(argv[i]));
    } else {
      std::fprintf(stderr,
                   "usage: update_kernel_bench [--elements=N] [--reps=R] [--kernel=WORD] [--step=S] [THREADS...]\n");
      return 2;
    }
  }
  if (n < kMomentBlock || n % kMomentBlock != 0 || reps < 1) {
    std::fprintf(stderr, "--elements must be a positive multiple of %lld, --reps positive\n",
                 static_cast<long long>(kMomentBlock));
    return 2;
  }
  if (threads.empty()) threads = {1, static_cast<int>(std::thread::hardware_concurrency())};
  const Isa isa = adamw_internal::BestIsa();
  AdamWHyper h;
  h.lr = 1e-5f;
  h.weight_decay = 0.1f;
  h.step = step;
  const Coeffs c = adamw_internal::MakeCoeffs(h);
  const std::vector<DecaySpan> spans{{0, n, h.weight_decay}};
  const std::vector<Coeffs> coeffs{c};
  const RoundingSeed seed{0, step};
  std::printf("step %lld (bias correction %s): ", static_cast<long long>(step),
              adamw_internal::UnitBias2(c) ? "exactly 1" : "below 1");
  std::printf("kernel %s, %lld elements a thread (%.2f MB of int8 state), %d updates; Mparam/s\n",
              adamw_internal::IsaName(isa), static_cast<long long>(n), 16.0 * n / 1e6, reps);
  std::printf("%8s  %-17s %10s %12s\n", "threads", "kernel", "total", "per thread");
  for (int nt : threads) {
    std::vector<std::unique_ptr<Tile>> tiles;
    for (int t = 0; t < nt; ++t) {
      tiles.push_back(std::make_unique<Tile>(n, t + 1));
      EncodeMoments(isa, tiles.back()->Int8(), n, tiles.back()->m32.data(), tiles.back()->v32.data(), seed);
    }
    for (int k = 0; k < kKernels; ++k) {
      if (std::string(kNames[k]).find(only) == std::string::npos) continue;
      std::atomic<int> ready{0};
      std::vector<double> seconds(nt);
      std::vector<std::thread> pool;
      for (int t = 0; t < nt; ++t) {
        pool.emplace_back([&, t] {
          Tile& tile = *tiles[t];
          ready.fetch_add(1);
          while (ready.load() < nt) {
          }
          const double t0 = Now();
          for (int r = 0; r < reps; ++r) {
            Run(static_cast<Kernel>(k), isa, spans, coeffs, tile, n, seed);
            if (r % 64 == 63) tile.gp = tile.grad0;
          }
          seconds[t] = Now() - t0;
        });
      }
      for (auto& th : pool) th.join();
      double slowest = 0;
      for (double s : seconds) slowest = std::max(slowest, s);
      const double total = nt * static_cast<double>(n) * reps / slowest / 1e6;
      std::printf("%8d  %-17s %10.1f %12.1f\n", nt, kNames[k], total, total / nt);
    }
  }
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
