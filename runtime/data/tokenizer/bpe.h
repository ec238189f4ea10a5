// BytePairEncoding: the "BPE" model of tokenizer.json, of two kinds.
//   Byte-level (Qwen2/3, Llama 3, GPT-2): works on raw bytes (the vocabulary's byte-level
//     stand-in characters are mapped back to bytes at load); a word starts as single bytes.
//   SentencePiece-style (Llama 2, Mistral, TinyLlama): vocabulary keys are plain UTF-8
//     ("▁" stands for a space, done by the normalizer or the Metaspace pre-tokenizer);
//     a word starts as single characters; a character not in the vocabulary becomes its
//     UTF-8 bytes' "<0xNN>" pieces (byte_fallback) or the unknown piece (runs of unknown
//     characters fused into one with fuse_unk), as Hugging Face tokenizers' BPE does.
// Then the lowest-ranked adjacent pair is merged until none is left, ties to the
// leftmost, exactly as Hugging Face tokenizers' Word merge loop does; with ignore_merges
// a word that is itself in the vocabulary maps to its id directly. Immutable after
// construction; Encode may run on many threads, each with its own BpeCache.
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

// The byte a byte-fallback piece "<0xNN>" stands for (NN hexadecimal, either case, as
// Hugging Face's ByteFallback decoder reads it), -1 for any other text.
int BytePieceValue(absl::string_view piece);

class BytePairEncoding {
 public:
  // `model` is tokenizer.json's "model" object (type BPE); `byte_level` says which kind
  // (the tokenizer has a ByteLevel pre-tokenizer). InvalidArgument naming the entry for
  // a vocabulary token that is not byte-level text (byte-level kind), a merge whose parts
  // or result are not in the vocabulary, an unk_token missing from it, or options this
  // implementation lacks (dropout, subword prefixes, byte_fallback with byte-level).
  static absl::StatusOr<BytePairEncoding> FromJson(const nlohmann::json& model, bool byte_level);

  // Appends the ids of `word` (raw bytes for the byte-level kind, UTF-8 text otherwise)
  // to `out`. Byte-level: bytes without a vocabulary entry are dropped (byte-level
  // vocabularies have all 256). SentencePiece-style: see the top of this file; a
  // character with neither a piece, byte pieces nor an unk_token is dropped.
  void Encode(absl::string_view word, std::vector<int32_t>* out, BpeCache* cache) const;

  // The raw bytes of token `id` (byte-level) or its vocabulary text (SentencePiece-style,
  // e.g. "▁the" or "<0x0A>"), empty if the vocabulary has no such id.
  absl::string_view TokenBytes(int32_t id) const;
  // The id of the token whose raw bytes (byte-level) or text are `bytes`, -1 if none.
  int32_t TokenId(absl::string_view bytes) const;
  bool byte_level() const { return byte_level_; }
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
  // The word's first symbols: bytes (byte-level) or characters with their fallbacks.
  void InitialSymbols(absl::string_view word, std::vector<int32_t>* ids) const;
  void MergeWord(absl::string_view word, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;
  std::vector<std::string> id_to_bytes_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256];  // byte-level: id of each byte; SentencePiece: of "<0xNN>"
  int32_t ascii_id_[128];  // SentencePiece-style: id of each one-byte character
  bool byte_level_ = true;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace slidedp
