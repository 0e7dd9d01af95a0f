// Goal: EscapeForMessage keeps printable ASCII, turns every other byte (control bytes, NUL,
// DEL, bytes >= 0x80) and the backslash into an unambiguous escape, and cuts long values with
// "..." and their full length without splitting an escape.
// Method: exact expected strings for hand-picked inputs (a terminal clear-screen sequence, a
// NUL, a newline, UTF-8 bytes), then every one of the 256 byte values is checked to come out
// with no byte outside printable ASCII, and lengths around the limit are checked exactly.
#include "core/escape.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

bool AllPrintable(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

TEST(EscapeTest, KeepsPrintableAscii) {
  EXPECT_EQ(EscapeForMessage("llama.context_length"), "llama.context_length");
  EXPECT_EQ(EscapeForMessage(""), "");
  EXPECT_EQ(EscapeForMessage("a b~!"), "a b~!");
}

TEST(EscapeTest, EscapesControlBytesNulAndHighBytes) {
  EXPECT_EQ(EscapeForMessage(std::string("key\x1b[2J\0x", 9)), "key\\x1b[2J\\x00x");
  EXPECT_EQ(EscapeForMessage("a\nb\r\t"), "a\\x0ab\\x0d\\x09");
  EXPECT_EQ(EscapeForMessage("\x7f\x80\xff"), "\\x7f\\x80\\xff");
  EXPECT_EQ(EscapeForMessage("\xe2\x96\x81"), "\\xe2\\x96\\x81");
}

TEST(EscapeTest, EscapesTheBackslashSoEscapesAreUnambiguous) {
  // The four characters \x1b in the input must not read like the byte 0x1b in the output.
  EXPECT_EQ(EscapeForMessage("\\x1b"), "\\\\x1b");
}

TEST(EscapeTest, EveryByteValueComesOutPrintable) {
  for (int b = 0; b < 256; ++b) {
    const std::string in(1, static_cast<char>(b));
    const std::string out = EscapeForMessage(in);
    EXPECT_TRUE(AllPrintable(out)) << "byte " << b;
    EXPECT_FALSE(out.empty()) << "byte " << b;
  }
}

TEST(EscapeTest, TruncatesLongValuesWithTheirLength) {
  EXPECT_EQ(EscapeForMessage(std::string(64, 'a')), std::string(64, 'a'));
  EXPECT_EQ(EscapeForMessage(std::string(65, 'a')), std::string(64, 'a') + "... (65 bytes)");
  EXPECT_EQ(EscapeForMessage(std::string(1 << 20, 'z'), 8), "zzzzzzzz... (1048576 bytes)");
  EXPECT_EQ(EscapeForMessage("abcdef", 0), "... (6 bytes)");
}

TEST(EscapeTest, TruncationNeverSplitsAnEscape) {
  // "ab" fits in 4 characters, the next byte's escape (4 more) does not.
  EXPECT_EQ(EscapeForMessage("ab\x01\x02", 5), "ab... (4 bytes)");
  EXPECT_EQ(EscapeForMessage("ab\x01\x02", 6), "ab\\x01... (4 bytes)");
  EXPECT_EQ(EscapeForMessage("ab\x01", 6), "ab\\x01");
}

}  // namespace
}  // namespace kvtier
