// WindowPermutation: see window_permutation.h.
#include "runtime/data/window_permutation.h"

#include <cassert>

#include "runtime/data/splitmix64.h"

namespace slidedp {

WindowPermutation::WindowPermutation(uint64_t n, uint64_t key) : n_(n) {
  assert(n >= 1 && "a permutation of an empty range");
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  if (bits % 2 != 0) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  splitmix::Stream rng(key);
  for (uint64_t& k : round_keys_) k = rng.Next();
}

uint64_t WindowPermutation::Encrypt(uint64_t x) const {
  uint64_t left = (x >> half_bits_) & half_mask_;
  uint64_t right = x & half_mask_;
  for (uint64_t k : round_keys_) {
    const uint64_t f = splitmix::Mix(right ^ k) & half_mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t WindowPermutation::operator()(uint64_t i) const {
  assert(i < n_ && "index outside the permutation");
  // Encrypt is a bijection of [0, 2^bits); walking the cycle of i until it re-enters
  // [0, n) restricts it to a bijection of [0, n). The walk ends: the cycle contains i.
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);
  return x;
}

uint64_t EpochShuffleKey(uint64_t seed, int64_t epoch) {
  constexpr uint64_t kShuffleSalt = 0x73687566666c6531ULL;  // "shuffle1"
  return splitmix::Hash(seed ^ kShuffleSalt, static_cast<uint64_t>(epoch));
}

}  // namespace slidedp
