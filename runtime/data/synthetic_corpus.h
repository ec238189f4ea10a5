// SyntheticCorpus: the built-in demo corpus, a virtual token stream with learnable
// structure generated on the fly from (seed, position), so it costs no memory.
//
// Structure: a fixed random sparse Markov chain over the active vocabulary
// [0, min(vocab_size, kSyntheticMaxActive)). Each token t has kSyntheticFanout successors
// chosen by hashing (seed, t, k) (a 2 KiB table), taken with probabilities 1/2, 1/4,
// 1/8, 1/8, so the next token given the previous one has entropy 1.75 bits (1.21 nats),
// far below log(vocab_size). Small enough to learn fast: a 2-layer, 64-wide model with
// vocab 512 (log 512 = 6.24) gets from 6.2 to about 2.9 nats in 60 AdamW steps of 512
// tokens at lr 3e-3 (a bigram table of 128 x 4 transitions).
// The stream is cut into blocks of kSyntheticBlock tokens; each block starts from a state
// hashed from (seed, block) and walks the chain, so any range is computed from at most
// one block's prefix. Immutable; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/token_source.h"

namespace slidedp {

inline constexpr int64_t kSyntheticMaxActive = 128;
inline constexpr int kSyntheticFanout = 4;
inline constexpr int64_t kSyntheticBlock = 1024;
inline constexpr int64_t kSyntheticTokens = int64_t{1} << 30;  // virtual stream length

class SyntheticCorpus final : public TokenSource {
 public:
  // vocab_size >= 1. The stream depends only on (seed, vocab_size).
  SyntheticCorpus(uint64_t seed, int64_t vocab_size);

  int64_t size() const override { return kSyntheticTokens; }
  absl::Status Read(int64_t start, absl::Span<int32_t> out) const override;
  std::string Describe() const override;

  // Number of distinct token ids the stream uses: min(vocab_size, kSyntheticMaxActive).
  int64_t active_tokens() const { return active_; }

  // The k-th successor of `token` in the chain; 0 <= token < active_tokens(),
  // 0 <= k < kSyntheticFanout.
  int32_t Successor(int32_t token, int k) const;

 private:
  // Writes tokens [skip, skip + out.size()) of block `block` to `out`; the caller keeps
  // skip + out.size() <= kSyntheticBlock.
  void WalkBlock(int64_t block, int64_t skip, absl::Span<int32_t> out) const;

  uint64_t seed_;
  int64_t vocab_size_;
  int64_t active_;
  std::vector<int32_t> successors_;  // [active_, kSyntheticFanout], from (seed, token, k)
};

}  // namespace slidedp
