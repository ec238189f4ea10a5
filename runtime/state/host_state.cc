// HostState: see host_state.h.
#include "runtime/state/host_state.h"
#include "runtime/state/host_shards.h"
#include "runtime/io/stop_token.h"

#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "runtime/model/hf_checkpoint.h"
#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
#include "runtime/cuda/pinned_slab.h"
#endif

namespace slidedp {
namespace {

uint64_t SplitMix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Standard normal by Box-Muller from splitmix64; deterministic everywhere.
void FillNormal(float* out, int64_t n, float stddev, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(SplitMix64(s) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(SplitMix64(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(stddev * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(stddev * r * std::sin(2 * M_PI * u2));
  }
}

// Pinned buffers come from one slab (PinnedBuffers below). The others (master, m, v: 12 bytes a
// parameter, streamed through by AdamW every step) ask for transparent huge pages, so
// that the update's passes over them do not walk a 4 KiB page table.
at::Tensor Alloc(int64_t n, at::ScalarType dtype, bool pin) {
  if (pin) return at::zeros({n}, at::TensorOptions().dtype(dtype).pinned_memory(true));
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(dtype));
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t end = begin + static_cast<uintptr_t>(t.nbytes());
  const uintptr_t b = (begin + kHuge - 1) & ~(kHuge - 1), e = end & ~(kHuge - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);  // a hint; errors are harmless
  t.zero_();
  return t;
}

// The pinned buffers of every unit (the streamed copy; the fp32 gradient when it has one)
// as 4 KiB-aligned views of one slab of exactly their size (pinned_slab.h), zeroed; in
// `order`: per unit its copy, then its gradient if `fp32_grad`. Without the CUDA
// toolkit, LibTorch's pinned allocator, one buffer each.
std::vector<at::Tensor> PinnedBuffers(const ModelLayout& layout, at::ScalarType compute_dtype, bool fp32_grad) {
  struct Part {
    int64_t n;
    at::ScalarType dtype;
  };
  std::vector<Part> parts;
  for (const UnitLayout& u : layout.units) {
    parts.push_back({u.numel, compute_dtype});
    if (fp32_grad) parts.push_back({u.numel, at::kFloat});
  }
  std::vector<at::Tensor> out;
#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
  constexpr size_t kAlign = 4096;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const Part& p : parts) {
    offsets.push_back(total);
    total += (static_cast<size_t>(p.n) * at::elementSize(p.dtype) + kAlign - 1) / kAlign * kAlign;
  }
  absl::StatusOr<std::shared_ptr<void>> slab = AllocatePinnedSlab(total);
  if (!slab.ok()) throw std::runtime_error(std::string(slab.status().message()));
  for (size_t i = 0; i < parts.size(); ++i) {
    void* at_offset = static_cast<char*>(slab->get()) + offsets[i];
    std::shared_ptr<void> owner = *slab;  // each view keeps the slab
    at::Tensor t = at::from_blob(at_offset, {parts[i].n}, [owner](void*) mutable { owner.reset(); },
                                 at::TensorOptions().dtype(parts[i].dtype));
    t.zero_();
    out.push_back(std::move(t));
  }
#else
  for (const Part& p : parts) out.push_back(Alloc(p.n, p.dtype, /*pin=*/true));
#endif
  return out;
}

}  // namespace

HostState::HostState(const ModelConfig& config, at::ScalarType compute_dtype, int64_t chunk_elems,
                     bool pin, bool fp32_grad, MomentDtype moments, int shard, int shards)
    : config_(config),
      layout_(BuildLayout(config)),
      compute_dtype_(compute_dtype),
      fp32_grad_(fp32_grad),
      pinned_(pin),
      moment_dtype_(moments),
      shard_(shard),
      shards_(shards) {
  if (shards < 1 || shard < 0 || shard >= shards) {
    throw std::invalid_argument(absl::StrFormat("HostState: shard %d of %d", shard, shards));
  }
  std::vector<at::Tensor> pinned;
  if (pin) pinned = PinnedBuffers(layout_, compute_dtype, fp32_grad);
  size_t next_pinned = 0;
  for (int u = 0; u < layout_.num_units(); ++u) {
    const int64_t numel = layout_.units[u].numel;
    // Shards start on whole int8 blocks (host_shards.h): m and v's blocks are the unit's.
    const auto [sb, se] = HostShardOf(numel, shards, shard);
    shard_ranges_.emplace_back(sb, se);
    const int64_t n = se - sb;  // master, m and v: this shard
    UnitState s;
    s.master = Alloc(n, at::kFloat, false);
    switch (moments) {
      case MomentDtype::kFp32:
        s.m = Alloc(n, at::kFloat, false);
        s.v = Alloc(n, at::kFloat, false);
        break;
      case MomentDtype::kBf16:
        s.m = Alloc(n, at::kBFloat16, false);
        s.v = Alloc(n, at::kBFloat16, false);
        break;
      case MomentDtype::kInt8: {
        s.m = Alloc(n, at::kChar, false);
        s.v = Alloc(n, at::kByte, false);
        const int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
        s.m_scale = Alloc(blocks, at::kFloat, false);
        s.v_scale = Alloc(blocks, at::kFloat, false);
        break;
      }
    }
    s.params = pin ? pinned[next_pinned++] : Alloc(numel, compute_dtype, false);
    if (fp32_grad) s.grad = pin ? pinned[next_pinned++] : Alloc(numel, at::kFloat, false);
    units_.push_back(std::move(s));
    std::vector<Chunk> cs;
    const int64_t step = chunk_elems > 0 ? chunk_elems : numel;
    for (int64_t b = 0; b < numel; b += step) cs.push_back({u, b, std::min(numel, b + step)});
    if (cs.empty()) cs.push_back({u, 0, 0});
    chunks_.push_back(std::move(cs));
  }
}

absl::Status HostState::InitRandom(uint64_t seed, const StopToken* stop) {
  // One seed per tensor, in layout order, so that the result does not depend on how
  // the tensors are spread over threads.
  struct Fill {
    float* dst;
    int64_t n;
    float value;  // NaN: normal(0, 0.02)
    uint64_t seed;
  };
  std::vector<Fill> fills;
  uint64_t tensor_seed = seed * 0x100000001B3ull + 1;
  // Whole units (several shards: temporary buffers, then each keeps its own slice).
  std::vector<at::Tensor> whole = WholeMasters();
  for (int u = 0; u < num_units(); ++u) {
    float* base = whole[u].data_ptr<float>();
    for (const ParamSpec& p : layout_.units[u].params) {
      tensor_seed = tensor_seed * 6364136223846793005ull + 1442695040888963407ull;
      const bool is_norm = p.name.find("norm.weight") != std::string::npos;
      const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
      fills.push_back({base + p.offset, p.numel, is_norm ? 1.0f : is_bias ? 0.0f : NAN, tensor_seed});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < fills.size();) {
      if (StopRequested(stop)) return;  // a cancel or shutdown: seen between tensors
      const Fill& f = fills[i];
      if (std::isnan(f.value)) {
        FillNormal(f.dst, f.n, 0.02f, f.seed);
      } else {
        std::fill(f.dst, f.dst + f.n, f.value);
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (absl::Status s = CheckStop(stop, "initializing the weights"); !s.ok()) return s;
  KeepShards(whole);
  return absl::OkStatus();
}

std::vector<at::Tensor> HostState::WholeMasters() {
  std::vector<at::Tensor> whole;
  for (int u = 0; u < num_units(); ++u) {
    whole.push_back(shards_ == 1 ? units_[u].master : at::zeros({layout_.units[u].numel}, at::kFloat));
  }
  return whole;
}

void HostState::KeepShards(const std::vector<at::Tensor>& whole) {
  for (int u = 0; u < num_units(); ++u) {
    if (shards_ > 1) {
      units_[u].master.copy_(whole[u].narrow(0, shard_begin(u), shard_end(u) - shard_begin(u)));
    }
    // The whole streamed copy: every host starts with all of it.
    units_[u].params.copy_(whole[u]);
  }
}

absl::Status HostState::LoadHf(const std::string& model_dir, const StopToken* stop) {
  std::vector<at::Tensor> whole = WholeMasters();
  absl::Status s = LoadHfWeights(model_dir, layout_, [&](int u, int p) {
    return whole[u].data_ptr<float>() + layout_.units[u].params[p].offset;
  }, stop);
  if (s.ok()) KeepShards(whole);
  return s;
}

void HostState::RefreshParams(int u, int64_t begin, int64_t end) {
  if (end <= begin) return;
  const int64_t sb = shard_begin(u);
  units_[u].params.narrow(0, begin, end - begin).copy_(units_[u].master.narrow(0, begin - sb, end - begin));
}

int64_t HostState::bytes() const {
  int64_t b = 0;
  for (const UnitState& s : units_) {
    for (const at::Tensor* t : {&s.master, &s.m, &s.v, &s.m_scale, &s.v_scale, &s.params, &s.grad}) {
      if (t->defined()) b += t->numel() * static_cast<int64_t>(t->element_size());
    }
  }
  return b;
}

MomentView MomentsOf(MomentDtype dtype, const UnitState& s) {
  MomentView mv;
  mv.dtype = dtype;
  mv.m = s.m.data_ptr();
  mv.v = s.v.data_ptr();
  if (s.m_scale.defined()) {
    mv.m_scale = s.m_scale.data_ptr<float>();
    mv.v_scale = s.v_scale.data_ptr<float>();
  }
  return mv;
}

MomentView HostState::moments(int u) { return MomentsOf(moment_dtype_, units_[u]); }

void HostState::RefreshAllParams() {
  for (int u = 0; u < num_units(); ++u) RefreshParams(u, shard_begin(u), shard_end(u));
}

std::string HostState::MasterDigest() const {
  std::vector<at::Tensor> masters;
  for (const UnitState& s : units_) masters.push_back(s.master);
  return MasterDigestOf(masters);
}

std::string MasterDigestOf(const std::vector<at::Tensor>& tensors) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const at::Tensor& t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    for (int64_t i = 0; i < bytes; ++i) {
      h ^= p[i];
      h *= 0x100000001B3ull;
    }
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace slidedp
