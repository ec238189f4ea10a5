// DocumentEncoder: one text record (text_records.h) to token ids and TokenFlag bytes,
// with the model's tokenizer and its family's chat format. Each document ends with the
// family's end-of-text token, so that documents do not run into each other:
//   Qwen2/Qwen3 (ChatML): <|endoftext|>. A chat renders every message as
//     <|im_start|>{role}\n{content}<|im_end|>\n
//   Llama 3: <|end_of_text|>. A chat starts with <|begin_of_text|> once, then renders
//     every message as <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//   Llama 2 (a llama model whose tokenizer has no <|end_of_text|>: Llama 2, TinyLlama,
//     CodeLlama) and Mistral, the [INST] format of Meta's and Mistral's reference code:
//     </s>. A user message is <s> "[INST] {content} [/INST]" (Mistral: <s> before the
//     first only), an assistant message {content}</s> (tokenized apart, so its first
//     word gets the tokenizer's "\u2581" as after "[/INST] "). A system message goes into
//     the next user message: Llama 2 "<<SYS>>\n{system}\n<</SYS>>\n\n{content}",
//     Mistral "{system}\n\n{content}". A chat that ends with an assistant message gets no
//     second </s>.
// No default system prompt is inserted and contents are not trimmed. The header and the
// content are tokenized apart, as generation sees them (a prompt ends with the header):
// for content that starts with a letter or digit the ids equal those of the rendered
// string.
// Loss (kTokenLoss): text: every token and the end token; prompt_completion: the
// completion's tokens and the end token (the prompt is encoded with the tokenizer's
// special tokens, e.g. Llama 3's <|begin_of_text|>; so is a text document); chat: each
// assistant message's content and its <|im_end|> / <|eot_id|>, nothing else. The first
// token of each document carries kTokenDocumentStart.
// Immutable after Create; Encode may run on many threads, each with its own BpeCache.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/text_records.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/model/model_config.h"

namespace slidedp {

class DocumentEncoder {
 public:
  // `tokenizer` must outlive the encoder. FailedPrecondition naming the token and the
  // tokenizer's file when a special token the format needs for `family` is missing.
  static absl::StatusOr<DocumentEncoder> Create(const Tokenizer& tokenizer, TextFormat format,
                                                ModelFamily family);

  // Appends the ids of `record` to *ids and one TokenFlag byte per id to *flags.
  void Encode(const TextRecord& record, std::vector<int32_t>* ids, std::vector<uint8_t>* flags,
              BpeCache* cache = nullptr) const;

  // Everything besides the tokenizer and the input that decides the ids and flags, e.g.
  // "format=chat style=chatml end=<|endoftext|> encoder=1" (for cache keys).
  std::string Settings() const;

  TextFormat format() const { return format_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  enum class Style { kChatMl, kLlama3, kInst };
  DocumentEncoder() = default;

  const Tokenizer* tokenizer_ = nullptr;
  TextFormat format_ = TextFormat::kText;
  Style style_ = Style::kChatMl;
  int32_t document_end_ = -1;
  int32_t turn_end_ = -1;                 // chat
  std::vector<int32_t> chat_begin_;       // chat: before the first message
  std::array<std::vector<int32_t>, kChatRoles> headers_;  // chat: per role
  std::vector<int32_t> after_turn_;       // chat: after turn_end
  int32_t bos_ = -1;                      // kInst: <s>
  bool bos_every_turn_ = false;           // kInst: Llama 2 (true) or Mistral (false)

  void EncodeInstChat(const TextRecord& record, std::vector<int32_t>* ids,
                      std::vector<uint8_t>* flags, BpeCache* cache) const;
};

}  // namespace slidedp
