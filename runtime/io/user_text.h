// User text in messages: what the daemon repeats of a user's input (file contents,
// names, paths) and every string that reaches a proto string field or the job store
// goes through here, so that it is valid UTF-8 and of bounded length. Pure functions;
// any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace slidedp {

// `text` with every byte that is not part of a well-formed UTF-8 sequence written as
// the four characters "\xNN". Well-formed text comes back unchanged. (Overlong forms,
// surrogates and code points above U+10FFFF count as ill-formed, as protobuf counts them.)
std::string ValidUtf8(std::string_view text);

// True when `text` is well-formed UTF-8 (ValidUtf8(text) == text).
bool IsValidUtf8(std::string_view text);

// For repeating user input inside an error message: ValidUtf8, with control characters
// (newlines, tabs, ESC, ...) escaped as "\xNN" so that one message stays one line, and
// cut to at most `max_bytes` of the input, marked "... (N bytes)" with the input's full
// length when cut. Never splits a UTF-8 sequence.
inline constexpr size_t kEchoBytes = 160;
std::string Echo(std::string_view text, size_t max_bytes = kEchoBytes);

}  // namespace slidedp
