// CPU AdamW and the sum of squares over flat fp32 buffers; see adamw.h. The buffers are
// cut into fixed tiles (kTile elements, aligned to element 0) that a process-wide
// thread pool shares out; the per-element arithmetic (adamw_kernels.h) does not depend
// on the tiling, and SumSquares adds its per-tile partial sums in tile order, so both
// give bit-identical results for every thread count.
// Threads: any thread. Calls with threads == 1 or fewer than two tiles of work run on
// the caller alone without locks; larger calls share one pool and are serialized.
#include "runtime/state/adamw.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/state/adamw_kernels.h"
#include "runtime/state/thread_pool.h"

namespace slidedp {

std::vector<DecaySpan> DecaySpansOf(const UnitLayout& unit, const std::vector<float>& decay, int64_t begin,
                                    int64_t end) {
  std::vector<DecaySpan> spans;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const ParamSpec& p = unit.params[i];
    const int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (e > b) spans.push_back({b - begin, e - begin, decay[i]});
  }
  return spans;
}
namespace {

using adamw_internal::BestIsa;
using adamw_internal::Coeffs;
using adamw_internal::Isa;

// 16K floats: 64 KiB per stream, a multiple of every vector width.
constexpr int64_t kTile = int64_t{1} << 14;
static_assert(kTile % kMomentBlock == 0, "a tile holds whole quantization blocks");
constexpr int kMaxThreads = 256;

int ResolveThreads(int threads) {
  if (threads <= 0) threads = AvailableCpus();
  return std::min(threads, kMaxThreads);
}

// The process-wide pool, grown (replaced) when a call asks for more threads than it
// has. Never destroyed: its idle threads just end with the process.
class SharedPool {
 public:
  static SharedPool& Get() {
    static SharedPool* pool = new SharedPool;
    return *pool;
  }

  void ParallelFor(int64_t n, int threads, ThreadPool::TileFn fn) {
    absl::MutexLock lock(&mu_);
    if (pool_ == nullptr || pool_->num_threads() < threads) {
      pool_.reset();  // joins the old threads first
      pool_ = std::make_unique<ThreadPool>(std::max(threads, AvailableCpus()));
    }
    pool_->ParallelFor(n, kTile, fn, threads);
  }

 private:
  absl::Mutex mu_;
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(mu_);
};

// Runs fn over the tiles of [0, n) on up to `threads` threads.
void ForEachTile(int64_t n, int threads, ThreadPool::TileFn fn) {
  if (n <= 0) return;
  if (threads <= 1 || n <= kTile) {
    for (int64_t b = 0; b < n; b += kTile) fn(b, std::min(n, b + kTile));
    return;
  }
  SharedPool::Get().ParallelFor(n, threads, fn);
}

}  // namespace

void AdamWReference(const AdamWHyper& h, int64_t n, float* param, const float* grad, float* m,
                    float* v) {
  const Coeffs c = adamw_internal::MakeCoeffs(h);
  for (int64_t i = 0; i < n; ++i) {
    adamw_internal::AdamWElement(c, &param[i], grad[i], &m[i], &v[i]);
  }
}

void AdamWUpdate(const AdamWHyper& h, int64_t n, float* param, const float* grad, float* m,
                 float* v, int threads) {
  const Coeffs c = adamw_internal::MakeCoeffs(h);
  const Isa isa = BestIsa();
  ForEachTile(n, ResolveThreads(threads), [&](int64_t b, int64_t e) {
    adamw_internal::AdamWTile(isa, c, e - b, param + b, grad + b, m + b, v + b);
  });
}

void AdamWUpdateBf16Grad(const AdamWHyper& h, int64_t n, float* param, uint16_t* gp, float* m,
                         float* v, int threads) {
  const Coeffs c = adamw_internal::MakeCoeffs(h);
  const Isa isa = BestIsa();
  ForEachTile(n, ResolveThreads(threads), [&](int64_t b, int64_t e) {
    adamw_internal::AdamWOnePassTile(isa, c, e - b, param + b, nullptr, gp + b, m + b, v + b);
  });
}

namespace {

// Elements [b, e) of an AdamWUpdateStored call with kernel `isa`; b is a multiple of
// kTile (so of kMomentBlock) and e - b at most kTile. Worked in pieces of kPiece elements
// (whole quantization blocks) so that the fp32 gradient, m and v of a piece stay in L1
// from the decode through the update to the encode.
constexpr int64_t kPiece = 4 * kMomentBlock;
static_assert(kTile % kPiece == 0, "a tile holds whole pieces");

// Each span's coefficients (MakeCoeffs, two pow() calls), computed once per call.
std::vector<Coeffs> SpanCoeffs(const AdamWHyper& h, const std::vector<DecaySpan>& spans) {
  std::vector<Coeffs> out;
  AdamWHyper hs = h;
  for (const DecaySpan& s : spans) {
    hs.weight_decay = s.weight_decay;
    out.push_back(adamw_internal::MakeCoeffs(hs));
  }
  return out;
}

void StoredTile(Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, int64_t b,
                int64_t e, float* param, const float* grad, uint16_t* gp, const MomentView& mv,
                int64_t first_index, int64_t step) {
  alignas(64) float g[kPiece];
  alignas(64) float m[kPiece];
  alignas(64) float v[kPiece];
  alignas(64) float roots[kPiece];  // int8: sqrt of the new v, from the update to the encode
  const bool int8 = mv.dtype == MomentDtype::kInt8;
  for (int64_t pb = b; pb < e; pb += kPiece) {
    const int64_t pe = std::min(e, pb + kPiece), len = pe - pb;
    const float* gt = grad + pb;
    if (grad == nullptr) {
      adamw_internal::WidenBf16(isa, gp + pb, len, g);
      gt = g;
    }
    const MomentView piece = OffsetMoments(mv, pb);
    adamw_internal::DecodeMoments(isa, piece, len, m, v);
    int64_t updated = 0;
    for (size_t k = 0; k < spans.size(); ++k) {
      const int64_t sb = std::max(spans[k].begin, pb), se = std::min(spans[k].end, pe);
      if (se <= sb) continue;
      adamw_internal::AdamWTile(isa, coeffs[k], se - sb, param + sb, gt + (sb - pb), m + (sb - pb), v + (sb - pb),
                                int8 ? roots + (sb - pb) : nullptr);
      updated += se - sb;
    }
    // The roots are the update's where the spans covered the piece (they always do for a
    // unit); otherwise the encode takes them itself.
    adamw_internal::EncodeMoments(isa, piece, len, m, v, adamw_internal::RoundingSeed{first_index + pb, step},
                                  int8 && updated == len ? roots : nullptr);
    if (grad == nullptr) adamw_internal::NarrowBf16(isa, param + pb, len, gp + pb);
  }
}

// Whether `spans` cover [b, e): they always do for a unit; the one-pass tiles below need
// it, StoredTile does not.
bool Covered(const std::vector<DecaySpan>& spans, int64_t b, int64_t e) {
  int64_t covered = 0;
  for (const DecaySpan& s : spans) covered += std::max<int64_t>(0, std::min(s.end, e) - std::max(s.begin, b));
  return covered == e - b;
}

// The same elements with bf16 moments in one pass (AdamWOnePassTile), span by span.
void Bf16MomentsTile(Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, int64_t b,
                     int64_t e, float* param, const float* grad, uint16_t* gp, const MomentView& mv,
                     int64_t first_index, int64_t step) {
  if (!Covered(spans, b, e)) return StoredTile(isa, spans, coeffs, b, e, param, grad, gp, mv, first_index, step);
  auto* m = static_cast<uint16_t*>(mv.m);
  auto* v = static_cast<uint16_t*>(mv.v);
  for (size_t k = 0; k < spans.size(); ++k) {
    const int64_t sb = std::max(spans[k].begin, b), se = std::min(spans[k].end, e);
    if (se <= sb) continue;
    adamw_internal::AdamWOnePassTile(isa, coeffs[k], se - sb, param + sb, grad != nullptr ? grad + sb : nullptr,
                                     grad != nullptr ? nullptr : gp + sb, m + sb, v + sb);
  }
}

// The same elements with 8-bit moments in one pass a quantization block (AdamWInt8Tile).
void Int8MomentsTile(Isa isa, const std::vector<DecaySpan>& spans, const std::vector<Coeffs>& coeffs, int64_t b,
                     int64_t e, float* param, const float* grad, uint16_t* gp, const MomentView& mv,
                     int64_t first_index, int64_t step) {
  if (!Covered(spans, b, e)) return StoredTile(isa, spans, coeffs, b, e, param, grad, gp, mv, first_index, step);
  adamw_internal::AdamWInt8Tile(isa, spans, coeffs, b, e, param, grad, gp, mv,
                                adamw_internal::RoundingSeed{first_index, step});
}

}  // namespace

void AdamWUpdateStored(const AdamWHyper& h, const std::vector<DecaySpan>& spans, int64_t n,
                       float* param, const float* grad, uint16_t* gp, const MomentView& moments,
                       int64_t first_index, int threads) {
  const Isa isa = BestIsa();
  const std::vector<Coeffs> coeffs = SpanCoeffs(h, spans);
  const auto tile = moments.dtype == MomentDtype::kBf16   ? Bf16MomentsTile
                    : moments.dtype == MomentDtype::kInt8 ? Int8MomentsTile
                                                          : StoredTile;
  ForEachTile(n, ResolveThreads(threads), [&](int64_t b, int64_t e) {
    tile(isa, spans, coeffs, b, e, param, grad, gp, moments, first_index, h.step);
  });
}

void AdamWStoredReference(const AdamWHyper& h, const std::vector<DecaySpan>& spans, int64_t n,
                          float* param, const float* grad, uint16_t* gp, const MomentView& moments,
                          int64_t first_index) {
  const std::vector<Coeffs> coeffs = SpanCoeffs(h, spans);
  for (int64_t b = 0; b < n; b += kTile) {
    StoredTile(Isa::kScalar, spans, coeffs, b, std::min(n, b + kTile), param, grad, gp, moments, first_index, h.step);
  }
}

namespace {

// Sum over kTile tiles of [0, n) of tile(b, e), added in tile order (the same bits for
// every thread count).
template <typename TileSum>
double SumOverTiles(int64_t n, int threads, const TileSum& tile) {
  if (n <= 0) return 0.0;
  const int t = ResolveThreads(threads);
  if (t <= 1 || n <= kTile) {  // the same tiles, summed in the same order, no allocation
    double total = 0.0;
    for (int64_t b = 0; b < n; b += kTile) total += tile(b, std::min(n, b + kTile));
    return total;
  }
  std::vector<double> partial((n + kTile - 1) / kTile);
  ForEachTile(n, t, [&](int64_t b, int64_t e) { partial[b / kTile] = tile(b, e); });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

double SumSquares(const float* x, int64_t n, int threads) {
  const Isa isa = BestIsa();
  return SumOverTiles(n, threads, [&](int64_t b, int64_t e) { return adamw_internal::SumSquaresTile(isa, x + b, e - b); });
}

double SumSquaresBf16(const uint16_t* x, int64_t n, int threads) {
  const Isa isa = BestIsa();
  return SumOverTiles(n, threads, [&](int64_t b, int64_t e) {
    float wide[kTile];  // 64 KiB of the calling thread's stack
    adamw_internal::WidenBf16(isa, x + b, e - b, wide);
    return adamw_internal::SumSquaresTile(isa, wide, e - b);
  });
}

}  // namespace slidedp
