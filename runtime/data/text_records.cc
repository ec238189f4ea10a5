// Text records: see text_records.h.
#include "runtime/data/text_records.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(what); }

// The string member `name` of `object` into *out; `what` names it in errors.
absl::Status GetString(const json& object, const char* name, const std::string& what,
                       std::string* out) {
  auto it = object.find(name);
  if (it == object.end()) return Bad(absl::StrCat("missing ", what));
  if (!it->is_string()) {
    return Bad(absl::StrCat(what, " must be a string, got ", it->type_name()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<ChatRole> ParseRole(const std::string& role, size_t index) {
  if (role == "system") return ChatRole::kSystem;
  if (role == "user") return ChatRole::kUser;
  if (role == "assistant") return ChatRole::kAssistant;
  return Bad(absl::StrCat("messages[", index, "].role \"", Echo(role, 40),
                          "\" is not system, user or assistant"));
}

absl::Status ParseMessages(const json& doc, TextRecord* record) {
  auto it = doc.find("messages");
  if (it == doc.end()) return Bad("missing \"messages\"");
  if (!it->is_array()) return Bad(absl::StrCat("\"messages\" must be an array, got ", it->type_name()));
  if (it->empty()) return Bad("\"messages\" is empty");
  bool assistant = false;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string name = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(absl::StrCat(name, " must be an object, got ", m.type_name()));
    std::string role;
    if (absl::Status s = GetString(m, "role", absl::StrCat(name, ".role"), &role); !s.ok()) return s;
    absl::StatusOr<ChatRole> parsed = ParseRole(role, i);
    if (!parsed.ok()) return parsed.status();
    ChatMessage message;
    message.role = *parsed;
    absl::Status s = GetString(m, "content", absl::StrCat(name, ".content"), &message.content);
    if (!s.ok()) return s;
    assistant = assistant || message.role == ChatRole::kAssistant;
    record->messages.push_back(std::move(message));
  }
  if (!assistant) return Bad("\"messages\" has no assistant message (nothing to train on)");
  return absl::OkStatus();
}

absl::Status ParseFields(const json& doc, TextFormat format, TextRecord* record) {
  switch (format) {
    case TextFormat::kText: {
      absl::Status s = GetString(doc, "text", "\"text\"", &record->text);
      if (s.ok() && record->text.empty()) return Bad("\"text\" is empty");
      return s;
    }
    case TextFormat::kPromptCompletion: {
      absl::Status s = GetString(doc, "prompt", "\"prompt\"", &record->prompt);
      if (s.ok()) s = GetString(doc, "completion", "\"completion\"", &record->completion);
      if (s.ok() && record->completion.empty()) return Bad("\"completion\" is empty");
      return s;
    }
    case TextFormat::kChat:
      return ParseMessages(doc, record);
  }
  return Bad("unknown format");
}

}  // namespace

absl::StatusOr<TextFormat> TextFormatOf(DataFormat format) {
  switch (format) {
    case DataFormat::kText: return TextFormat::kText;
    case DataFormat::kPromptCompletion: return TextFormat::kPromptCompletion;
    case DataFormat::kChat: return TextFormat::kChat;
    default: break;
  }
  return Bad(absl::StrCat("\"", NameOf(format), "\" is not text, prompt_completion or chat"));
}

absl::string_view TextFormatName(TextFormat format) {
  switch (format) {
    case TextFormat::kText: return NameOf(DataFormat::kText);
    case TextFormat::kPromptCompletion: return NameOf(DataFormat::kPromptCompletion);
    case TextFormat::kChat: break;
  }
  return NameOf(DataFormat::kChat);
}

absl::string_view ChatRoleName(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: break;
  }
  return "assistant";
}

absl::StatusOr<TextRecord> ParseTextRecord(absl::string_view line, TextFormat format) {
  // Deep nesting would exhaust the stack in the JSON library's recursive parts.
  if (JsonNestingExceeded(std::string_view(line.data(), line.size()), kMaxJsonNesting) != 0) {
    return Bad(absl::StrCat("JSON nested deeper than ", kMaxJsonNesting, " levels"));
  }
  json doc;
  try {
    doc = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {  // parse_error; out_of_range for huge numbers
    return Bad(absl::StrCat("not valid JSON (", Echo(e.what(), 400), ")"));
  }
  if (!doc.is_object()) return Bad(absl::StrCat("expected a JSON object, got ", doc.type_name()));
  TextRecord record;
  if (absl::Status s = ParseFields(doc, format, &record); !s.ok()) return s;
  return record;
}

}  // namespace slidedp
