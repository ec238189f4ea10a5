// BytePairEncoding: the "BPE" model of a byte-level tokenizer.json, working on raw bytes
// (the vocabulary's byte-level stand-in characters are mapped back to bytes at load).
// A word is split into single bytes, then the lowest-ranked adjacent pair is merged
// until none is left, ties to the leftmost, exactly as Hugging Face tokenizers' Word
// merge loop does; with ignore_merges a word that is itself in the vocabulary maps to
// its id directly. Immutable after construction; Encode may run on many threads, each
// with its own BpeCache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace slidedp {

// Word -> ids memo of one thread. Bounded: stops adding entries when full.
class BpeCache {
 public:
  explicit BpeCache(size_t capacity = 1 << 16) : capacity_(capacity) {}
  const std::vector<int32_t>* Find(absl::string_view word) const {
    auto it = map_.find(word);
    return it == map_.end() ? nullptr : &it->second;
  }
  void Insert(absl::string_view word, std::vector<int32_t> ids) {
    if (map_.size() < capacity_) map_.emplace(word, std::move(ids));
  }

 private:
  size_t capacity_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> map_;
};

class BytePairEncoding {
 public:
  // `model` is tokenizer.json's "model" object (type BPE). InvalidArgument naming the
  // entry for a vocabulary token that is not byte-level text, a merge whose parts or
  // result are not in the vocabulary, or options this implementation lacks (dropout,
  // byte_fallback, subword prefixes).
  static absl::StatusOr<BytePairEncoding> FromJson(const nlohmann::json& model);

  // Appends the ids of `word` (raw bytes) to `out`. Bytes without a vocabulary entry
  // are dropped (byte-level vocabularies have all 256).
  void Encode(absl::string_view word, std::vector<int32_t>* out, BpeCache* cache) const;

  // The raw bytes of token `id`, empty if the vocabulary has no such id.
  absl::string_view TokenBytes(int32_t id) const;
  // The id of the token whose raw bytes are `bytes`, -1 if none.
  int32_t TokenId(absl::string_view bytes) const;
  // One more than the largest id.
  int64_t size() const { return static_cast<int64_t>(id_to_bytes_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void MergeWord(absl::string_view word, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;
  std::vector<std::string> id_to_bytes_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256];
  bool ignore_merges_ = false;
};

}  // namespace slidedp
