// Tokenizer: a Hugging Face tokenizer.json with a BPE model, run natively, of the two
// kinds that the common models ship:
//   byte-level BPE (Qwen2/Qwen3, Llama 3, GPT-2): a ByteLevel pre-tokenizer step;
//   SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, CodeLlama): "\u2581" for spaces
//     via the Prepend + Replace normalizers or the Metaspace pre-tokenizer, byte fallback
//     to "<0xNN>" pieces, an unknown piece.
// Added tokens are split out first (leftmost-longest, with their lstrip/rstrip/
// single_word/normalized flags), then each remaining piece goes through the normalizer
// (a sequence of NFC via utf8proc, Prepend and Replace of a string), the pre-tokenizer
// (pretokenizer.h), the BPE model (bpe.h) and, when asked for special tokens, the
// post-processor (TemplateProcessing; ByteLevel adds nothing to ids). Decoding follows
// the file's decoder (ByteLevel; or Replace, ByteFallback, Fuse, Strip, Metaspace).
// Anything else is refused at load with an error naming it. The ids equal those of the
// tokenizers package (tests/runtime/data/tokenizer/tokenizer_test.cc checks fixtures
// made with it). Immutable after Load; Encode is safe on many threads, each with its own
// BpeCache.
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

  // The text of `ids` as the tokenizers package's decode gives it: byte-level, the bytes
  // of the tokens; otherwise the decoder's steps over the tokens' texts (Llama 2's turns
  // "\u2581" into spaces, "<0xNN>" runs into their UTF-8 text, and drops the first
  // space). With skip_special_tokens, special added tokens are left out.
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

  // One step of the normalizer sequence.
  struct NormalizerStep {
    enum Kind { kNfc, kPrepend, kReplace } kind;
    std::string pattern, content;  // kPrepend: content; kReplace: pattern -> content
  };
  // One step of the decoder sequence (SentencePiece-style tokenizers).
  struct DecoderStep {
    enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern, content;  // kReplace; kMetaspace: pattern = replacement
    int start = 0, stop = 0;       // kStrip (content is the character); kMetaspace: start=1
                                   // drops the first token's replacements
  };

  Tokenizer() = default;
  absl::Status Parse(absl::string_view json_text);
  absl::Status ParseNormalizer(const nlohmann::json& n);
  absl::Status ParseDecoder(const nlohmann::json& d);
  // Splits `text` on the added tokens with normalized == `normalized`.
  void SplitAdded(absl::string_view text, bool normalized, std::vector<Piece>* out) const;
  // `at_start`: `text` begins the input (Metaspace's prepend_scheme "first").
  void EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* out,
                  BpeCache* cache) const;
  bool Normalize(absl::string_view text, std::string* out) const;

  std::string source_;
  uint64_t fingerprint_ = 0;
  int64_t vocab_size_ = 0;
  std::vector<NormalizerStep> normalizer_;
  std::vector<DecoderStep> decoder_;
  bool has_decoder_ = false;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BytePairEncoding> bpe_;
  std::vector<AddedToken> added_;
  bool any_normalized_added_ = false;
  bool first_byte_[2][256] = {};  // [normalized][byte]: some added token starts with it
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // the template around sequence A
};

}  // namespace slidedp
