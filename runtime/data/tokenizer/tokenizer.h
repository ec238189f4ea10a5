// Tokenizer: a Hugging Face tokenizer.json of the byte-level BPE kind that Qwen2/Qwen3,
// Llama 3 and GPT-2 ship, run natively: added tokens split out first (leftmost-longest,
// with their lstrip/rstrip/single_word/normalized flags), then the normalizer (none or
// NFC, via utf8proc), the pre-tokenizer (pretokenizer.h), the BPE model (bpe.h) and,
// when asked for special tokens, the post-processor (TemplateProcessing; ByteLevel adds
// nothing to ids). The ids equal those of the tokenizers package
// (tests/runtime/data/tokenizer/tokenizer_test.cc checks fixtures made with it). Immutable after Load; Encode is safe on many threads,
// each with its own BpeCache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/data/tokenizer/bpe.h"
#include "runtime/data/tokenizer/pretokenizer.h"

namespace slidedp {

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one. Errors name the file and the
  // field that is malformed or unsupported.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // The same from the file's text; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json_text,
                                                             const std::string& source);
  ~Tokenizer();

  // Appends the ids of `text` to `out`. With add_special_tokens the post-processor's
  // template is applied (Llama 3's <|begin_of_text|>). Added tokens written in the text
  // (e.g. "<|im_end|>") become their ids either way, as in `tokenizer.encode`.
  void Encode(absl::string_view text, bool add_special_tokens, std::vector<int32_t>* out,
              BpeCache* cache = nullptr) const;
  std::vector<int32_t> Encode(absl::string_view text, bool add_special_tokens = false) const;

  // The text of `ids` (bytes of BPE tokens, contents of added ones); with
  // skip_special_tokens, special added tokens are left out.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The id of an added token by content, or of a vocabulary token by its raw text.
  std::optional<int32_t> TokenId(absl::string_view token) const;

  // One more than the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const { return vocab_size_; }
  // A hash of the file's text, for cache keys.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& source() const { return source_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
  };
  // A piece of input: either an added token (id >= 0) or text to tokenize.
  struct Piece {
    absl::string_view text;
    int32_t added_id = -1;
  };

  Tokenizer() = default;
  absl::Status Parse(absl::string_view json_text);
  // Splits `text` on the added tokens with normalized == `normalized`.
  void SplitAdded(absl::string_view text, bool normalized, std::vector<Piece>* out) const;
  void EncodeText(absl::string_view text, std::vector<int32_t>* out, BpeCache* cache) const;
  bool Normalize(absl::string_view text, std::string* out) const;

  std::string source_;
  uint64_t fingerprint_ = 0;
  int64_t vocab_size_ = 0;
  bool nfc_ = false;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BytePairEncoding> bpe_;
  std::vector<AddedToken> added_;
  bool any_normalized_added_ = false;
  bool first_byte_[2][256] = {};  // [normalized][byte]: some added token starts with it
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // the template around sequence A
};

}  // namespace slidedp
