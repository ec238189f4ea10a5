// SyntheticCorpus: see synthetic_corpus.h.
#include "runtime/data/synthetic_corpus.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_format.h"
#include "runtime/data/splitmix64.h"

namespace slidedp {
namespace {

// Which successor a 64-bit random word picks: 0 w.p. 1/2, 1 w.p. 1/4, 2 and 3 w.p. 1/8.
int PickSuccessor(uint64_t r) {
  const uint64_t bits = r >> 61;  // 3 uniform bits
  if (bits < 4) return 0;
  if (bits < 6) return 1;
  return bits == 6 ? 2 : 3;
}

constexpr uint64_t kChainSalt = 0x636861696e5f5f31ULL;  // "chain__1"
constexpr uint64_t kBlockSalt = 0x626c6f636b5f5f31ULL;  // "block__1"

}  // namespace

SyntheticCorpus::SyntheticCorpus(uint64_t seed, int64_t vocab_size)
    : seed_(seed),
      vocab_size_(vocab_size),
      active_(std::max<int64_t>(1, std::min(vocab_size, kSyntheticMaxActive))) {
  const uint64_t active = static_cast<uint64_t>(active_);
  successors_.resize(active_ * kSyntheticFanout);
  for (uint64_t t = 0; t < active; ++t) {
    for (int k = 0; k < kSyntheticFanout; ++k) {
      const uint64_t h =
          splitmix::Hash(splitmix::Hash(seed_ ^ kChainSalt, t), static_cast<uint64_t>(k));
      successors_[t * kSyntheticFanout + k] = static_cast<int32_t>(h % active);
    }
  }
}

int32_t SyntheticCorpus::Successor(int32_t token, int k) const {
  assert(token >= 0 && token < active_ && k >= 0 && k < kSyntheticFanout && "outside the chain");
  return successors_[token * kSyntheticFanout + k];
}

void SyntheticCorpus::WalkBlock(int64_t block, int64_t skip, absl::Span<int32_t> out) const {
  splitmix::Stream rng(splitmix::Hash(seed_ ^ kBlockSalt, static_cast<uint64_t>(block)));
  int32_t token = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(active_));
  const int64_t end = skip + static_cast<int64_t>(out.size());
  for (int64_t i = 0; i < end; ++i) {
    if (i >= skip) out[i - skip] = token;
    token = Successor(token, PickSuccessor(rng.Next()));
  }
}

absl::Status SyntheticCorpus::Read(int64_t start, absl::Span<int32_t> out) const {
  const int64_t count = static_cast<int64_t>(out.size());
  absl::Status range = CheckTokenRange(start, count, size(), "synthetic corpus");
  if (!range.ok()) return range;
  int64_t done = 0;
  while (done < count) {
    const int64_t pos = start + done;
    const int64_t block = pos / kSyntheticBlock;
    const int64_t skip = pos % kSyntheticBlock;
    const int64_t n = std::min(count - done, kSyntheticBlock - skip);
    WalkBlock(block, skip, out.subspan(done, n));
    done += n;
  }
  return absl::OkStatus();
}

std::string SyntheticCorpus::Describe() const {
  return absl::StrFormat("synthetic (seed %d, token ids [0, %d) of vocab %d, %s virtual tokens)",
                         seed_, active_, vocab_size_, FormatTokenCount(size()));
}

}  // namespace slidedp
