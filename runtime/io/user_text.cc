// ValidUtf8, Echo: see user_text.h.
#include "runtime/io/user_text.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace slidedp {
namespace {

// Length of the well-formed UTF-8 sequence at text[i], or 0 if the byte there does not
// start one (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
size_t SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

void AppendEscaped(uint8_t b, std::string* out) {
  char buf[5];
  std::snprintf(buf, sizeof(buf), "\\x%02X", b);
  out->append(buf, 4);
}

std::string Clean(std::string_view text, bool escape_controls, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  size_t i = 0;
  while (i < text.size() && i < max_bytes) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) {
      AppendEscaped(static_cast<uint8_t>(text[i]), &out);
      ++i;
      continue;
    }
    if (i + n > max_bytes) break;  // never split a sequence at the cut
    const uint8_t b0 = static_cast<uint8_t>(text[i]);
    if (escape_controls && n == 1 && (b0 < 0x20 || b0 == 0x7F)) {
      AppendEscaped(b0, &out);
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  if (i < text.size()) {
    out += "... (";
    out += std::to_string(text.size());
    out += " bytes)";
  }
  return out;
}

}  // namespace

std::string ValidUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  return Clean(text, /*escape_controls=*/false, text.size());
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Echo(std::string_view text, size_t max_bytes) {
  return Clean(text, /*escape_controls=*/true, max_bytes);
}

}  // namespace slidedp
