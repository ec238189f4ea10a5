// ValidUtf8 and Echo (runtime/io/user_text.h): what reaches a proto string field or an
// error message is well-formed UTF-8 and of bounded length.
#include "runtime/io/user_text.h"

#include <string>

#include <gtest/gtest.h>

namespace slidedp {
namespace {

TEST(UserText, WellFormedTextIsUnchanged) {
  const std::string text = "plain ascii, \xC3\xA9t\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80 and a\nnewline";
  EXPECT_TRUE(IsValidUtf8(text));
  EXPECT_EQ(ValidUtf8(text), text);
}

TEST(UserText, IllFormedBytesAreEscaped) {
  // The reproduction: a jsonl line starting with \xff\xfe.
  EXPECT_FALSE(IsValidUtf8("\xff\xfe[1,2,3]"));
  EXPECT_EQ(ValidUtf8("\xff\xfe[1,2,3]"), "\\xFF\\xFE[1,2,3]");
  // A truncated sequence, an overlong '/', a UTF-16 surrogate, a code point past U+10FFFF.
  EXPECT_EQ(ValidUtf8("a\xE2\x82"), "a\\xE2\\x82");
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\\xC0\\xAF");
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), "\\xED\\xA0\\x80");
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");
  for (const char* s : {"\xff", "a\xE2\x82", "\xC0\xAF", "\xED\xA0\x80"}) {
    EXPECT_TRUE(IsValidUtf8(ValidUtf8(s))) << s;
  }
}

TEST(UserText, EchoCapsLengthWithoutSplittingASequence) {
  const std::string long_name(4096, 'x');
  const std::string echoed = Echo(long_name);
  EXPECT_EQ(echoed, std::string(kEchoBytes, 'x') + "... (4096 bytes)");
  // A 2-byte sequence straddling the cut is left out whole.
  const std::string text = std::string(kEchoBytes - 1, 'a') + "\xC3\xA9" + "tail";
  const std::string cut = Echo(text);
  EXPECT_TRUE(IsValidUtf8(cut));
  EXPECT_EQ(cut, std::string(kEchoBytes - 1, 'a') + "... (" + std::to_string(text.size()) + " bytes)");
  EXPECT_EQ(Echo("short"), "short");
}

TEST(UserText, EchoKeepsOneLine) {
  EXPECT_EQ(Echo("a\nb\tc\x1b[31m"), "a\\x0Ab\\x09c\\x1B[31m");
  EXPECT_EQ(Echo("\xff\n", 10), "\\xFF\\x0A");
}

}  // namespace
}  // namespace slidedp
