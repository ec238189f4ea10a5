// WindowPermutation: a seeded bijection of [0, n) computed per index in O(1) memory,
// used to shuffle the windows of an epoch without an O(n) table. A 6-round balanced
// Feistel network on the smallest even number of bits covering n, keyed by SplitMix64,
// with cycle walking to stay inside [0, n) (fewer than 4 rounds of walking on average).
// Identical on every platform. Immutable; any thread.
#pragma once

#include <cstdint>

namespace slidedp {

class WindowPermutation {
 public:
  // n >= 1. The permutation depends only on (n, key).
  WindowPermutation(uint64_t n, uint64_t key);

  // The image of i; precondition 0 <= i < n. Distinct i give distinct images in [0, n).
  uint64_t operator()(uint64_t i) const;

  uint64_t size() const { return n_; }

 private:
  static constexpr int kRounds = 6;
  uint64_t Encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[kRounds];
};

// The key of epoch `epoch`'s shuffle for a dataset seeded with `seed`.
uint64_t EpochShuffleKey(uint64_t seed, int64_t epoch);

}  // namespace slidedp
