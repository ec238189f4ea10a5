// Text records: one line of a `text`, `prompt_completion` or `chat` JSON-lines file,
// parsed and checked, before any tokenization:
//   text:              {"text": "..."}
//   prompt_completion: {"prompt": "...", "completion": "..."}
//   chat:              {"messages": [{"role": "system"|"user"|"assistant",
//                                     "content": "..."}, ...]}
// Other keys are ignored. Plain functions; any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/train_config_enums.h"

namespace slidedp {

enum class TextFormat { kText, kPromptCompletion, kChat };

// The text format of data.format text, prompt_completion or chat; InvalidArgument for
// the others. Its name is the data.format's.
absl::StatusOr<TextFormat> TextFormatOf(DataFormat format);
absl::string_view TextFormatName(TextFormat format);

enum class ChatRole { kSystem, kUser, kAssistant };
inline constexpr int kChatRoles = 3;
absl::string_view ChatRoleName(ChatRole role);

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// The fields of one record; which are set depends on the format.
struct TextRecord {
  std::string text;        // kText
  std::string prompt;      // kPromptCompletion (may be empty)
  std::string completion;  // kPromptCompletion
  std::vector<ChatMessage> messages;  // kChat
};

// Parses one non-blank line. InvalidArgument saying what is wrong (without the file
// and line, which the caller adds): not valid JSON, not an object, a missing or
// non-string field, an empty "text" or "completion", "messages" not a non-empty array,
// a message that is not an object, an unknown role, no assistant message.
absl::StatusOr<TextRecord> ParseTextRecord(absl::string_view line, TextFormat format);

}  // namespace slidedp
