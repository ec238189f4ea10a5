// SplitMix64: the deterministic 64-bit mixer and generator behind the data module's
// shuffles and synthetic corpus. Same results on every platform and standard library
// (unlike std::shuffle / std::uniform_int_distribution). Pure functions; any thread.
#pragma once

#include <cstdint>

namespace slidedp {
namespace splitmix {

// The SplitMix64 finalizer: a bijective, well-mixing map of 64-bit words.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Hash of an ordered pair of words (not symmetric).
inline uint64_t Hash(uint64_t a, uint64_t b) { return Mix(Mix(a + 0x9e3779b97f4a7c15ULL) ^ b); }

// The SplitMix64 generator: Next() returns a fresh 64-bit word per call.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix(state_);
  }

 private:
  uint64_t state_;
};

}  // namespace splitmix
}  // namespace slidedp
