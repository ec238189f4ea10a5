// Nesting of user text: see json_nesting.h.
#include "runtime/io/json_nesting.h"

#include <algorithm>

namespace slidedp {
namespace {

// Scans JSON `text`; returns the deepest nesting, and in *line the 1-based line where
// the nesting first went above `max_depth` (0 if never).
int ScanJson(std::string_view text, int max_depth, int* line) {
  int depth = 0, deepest = 0, current_line = 1;
  bool in_string = false, escaped = false;
  *line = 0;
  for (char c : text) {
    if (c == '\n') ++current_line;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"' || c == '\n') in_string = false;  // JSON strings hold no raw newline
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (depth > max_depth && *line == 0) *line = current_line;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

int JsonNestingDepth(std::string_view text) {
  int line = 0;
  return ScanJson(text, 1 << 30, &line);
}

int JsonNestingExceeded(std::string_view text, int max_depth) {
  int line = 0;
  ScanJson(text, max_depth, &line);
  return line;
}

int YamlNestingExceeded(std::string_view text, int max_depth) {
  int brackets = 0, line = 1;
  bool line_start = true;  // still in the line's leading run of spaces and indicators
  int lead = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      lead = 0;
      continue;
    }
    if (c == '[' || c == '{') {
      if (++brackets > max_depth) return line;
    }
    if (line_start) {
      if (c == ' ' || c == '\t' || c == '-' || c == '?' || c == ':') {
        if (++lead > max_depth) return line;
      } else {
        line_start = false;
      }
    }
  }
  return 0;
}

}  // namespace slidedp
