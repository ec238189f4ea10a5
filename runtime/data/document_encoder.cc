// DocumentEncoder: see document_encoder.h.
#include "runtime/data/document_encoder.h"

#include "absl/strings/str_cat.h"
#include "runtime/data/token_source.h"
#include "runtime/io/file_access.h"

namespace slidedp {
namespace {

constexpr int kEncoderVersion = 1;  // bump when the rendering or the flags change

// Appends `ids` with the same flag byte.
void Append(absl::Span<const int32_t> ids, uint8_t flag, std::vector<int32_t>* out_ids,
            std::vector<uint8_t>* out_flags) {
  out_ids->insert(out_ids->end(), ids.begin(), ids.end());
  out_flags->insert(out_flags->end(), ids.size(), flag);
}

// Tokenizes `text` (no template) and appends it with `flag`.
void AppendText(const Tokenizer& tokenizer, absl::string_view text, bool add_special, uint8_t flag,
                std::vector<int32_t>* ids, std::vector<uint8_t>* flags, BpeCache* cache) {
  const size_t before = ids->size();
  tokenizer.Encode(text, add_special, ids, cache);
  flags->insert(flags->end(), ids->size() - before, flag);
}

}  // namespace

absl::StatusOr<DocumentEncoder> DocumentEncoder::Create(const Tokenizer& tokenizer,
                                                        TextFormat format, ModelFamily family) {
  DocumentEncoder e;
  e.tokenizer_ = &tokenizer;
  e.format_ = format;
  switch (family) {
    case ModelFamily::kQwen2:
    case ModelFamily::kQwen3:
      e.style_ = Style::kChatMl;
      break;
    case ModelFamily::kLlama:
      // Llama 3's tokenizer has its own end token; Llama 2's kind has </s>.
      e.style_ = tokenizer.TokenId("<|end_of_text|>") || !tokenizer.TokenId("</s>") ? Style::kLlama3
                                                                                   : Style::kInst;
      break;
    case ModelFamily::kMistral:
      e.style_ = Style::kInst;
      break;
  }
  const bool llama = e.style_ == Style::kLlama3;
  absl::Status missing;
  auto special = [&](const char* token) -> int32_t {
    std::optional<int32_t> id = tokenizer.TokenId(token);
    if (!id && missing.ok()) {
      missing = absl::FailedPreconditionError(absl::StrCat(
          "tokenizer ", EchoPath(tokenizer.source()), " has no ", token, " token, which data.format ",
          TextFormatName(format), " needs for a ", std::string(FamilyName(family)), " model"));
    }
    return id.value_or(-1);
  };
  if (e.style_ == Style::kInst) {
    e.document_end_ = special("</s>");
    e.bos_every_turn_ = family != ModelFamily::kMistral;
    if (format == TextFormat::kChat) e.bos_ = special("<s>");
    if (!missing.ok()) return missing;
    return e;
  }
  e.document_end_ = special(llama ? "<|end_of_text|>" : "<|endoftext|>");
  if (format == TextFormat::kChat) {
    e.turn_end_ = special(llama ? "<|eot_id|>" : "<|im_end|>");
    for (int r = 0; r < kChatRoles; ++r) {
      const std::string role(ChatRoleName(static_cast<ChatRole>(r)));
      std::vector<int32_t>& header = e.headers_[r];
      if (llama) {
        header.push_back(special("<|start_header_id|>"));
        tokenizer.Encode(role, false, &header);
        header.push_back(special("<|end_header_id|>"));
        tokenizer.Encode("\n\n", false, &header);
      } else {
        header.push_back(special("<|im_start|>"));
        tokenizer.Encode(role + "\n", false, &header);
      }
    }
    if (llama) e.chat_begin_.push_back(special("<|begin_of_text|>"));
    if (!llama) tokenizer.Encode("\n", false, &e.after_turn_);
  }
  if (!missing.ok()) return missing;
  return e;
}

void DocumentEncoder::Encode(const TextRecord& record, std::vector<int32_t>* ids,
                             std::vector<uint8_t>* flags, BpeCache* cache) const {
  const size_t start = ids->size();
  uint8_t end_flag = kTokenLoss;
  switch (format_) {
    case TextFormat::kText:
      AppendText(*tokenizer_, record.text, true, kTokenLoss, ids, flags, cache);
      break;
    case TextFormat::kPromptCompletion:
      AppendText(*tokenizer_, record.prompt, true, 0, ids, flags, cache);
      AppendText(*tokenizer_, record.completion, false, kTokenLoss, ids, flags, cache);
      break;
    case TextFormat::kChat:
      if (style_ == Style::kInst) {
        EncodeInstChat(record, ids, flags, cache);
        (*flags)[start] |= kTokenDocumentStart;
        return;
      }
      Append(chat_begin_, 0, ids, flags);
      for (const ChatMessage& m : record.messages) {
        const uint8_t loss = m.role == ChatRole::kAssistant ? kTokenLoss : 0;
        Append(headers_[static_cast<int>(m.role)], 0, ids, flags);
        AppendText(*tokenizer_, m.content, false, loss, ids, flags, cache);
        Append({turn_end_}, loss, ids, flags);
        Append(after_turn_, 0, ids, flags);
      }
      end_flag = 0;
      break;
  }
  Append({document_end_}, end_flag, ids, flags);
  (*flags)[start] |= kTokenDocumentStart;
}

void DocumentEncoder::EncodeInstChat(const TextRecord& record, std::vector<int32_t>* ids,
                                     std::vector<uint8_t>* flags, BpeCache* cache) const {
  const size_t start = ids->size();
  std::string system;
  bool first_user = true, ended = false;
  for (const ChatMessage& m : record.messages) {
    switch (m.role) {
      case ChatRole::kSystem:
        system = m.content;
        break;
      case ChatRole::kUser: {
        if (first_user || bos_every_turn_) Append({bos_}, 0, ids, flags);
        first_user = false;
        std::string text = "[INST] ";
        if (!system.empty()) {
          absl::StrAppend(&text, bos_every_turn_ ? "<<SYS>>\n" : "", system,
                          bos_every_turn_ ? "\n<</SYS>>\n\n" : "\n\n");
          system.clear();
        }
        absl::StrAppend(&text, m.content, " [/INST]");
        AppendText(*tokenizer_, text, false, 0, ids, flags, cache);
        ended = false;
        break;
      }
      case ChatRole::kAssistant:
        if (ids->size() == start) Append({bos_}, 0, ids, flags);
        AppendText(*tokenizer_, m.content, false, kTokenLoss, ids, flags, cache);
        Append({document_end_}, kTokenLoss, ids, flags);
        ended = true;
        break;
    }
  }
  if (!ended) Append({document_end_}, 0, ids, flags);
}

std::string DocumentEncoder::Settings() const {
  const char* style = style_ == Style::kLlama3 ? "llama3"
                      : style_ == Style::kChatMl ? "chatml"
                      : bos_every_turn_ ? "inst-llama2" : "inst-mistral";
  return absl::StrCat("format=", TextFormatName(format_),
                      " style=", style,
                      " end=", tokenizer_->Decode({document_end_}), " encoder=", kEncoderVersion);
}

}  // namespace slidedp
