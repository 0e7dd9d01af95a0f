// EscapeForMessage: untrusted bytes (names and strings read from model, tokenizer or token
// files) made safe to put in a Status message or a log line. A hostile file can hold terminal
// escape sequences, NULs, newlines or megabytes in a key name; copied verbatim into a message
// they would rewrite the user's terminal, cut the message short or split its one line.
//
// Printable ASCII (0x20..0x7e) is kept, except the backslash, which becomes "\\" so that an
// escape in the output always stands for a byte of the input; every other byte becomes "\xNN"
// (two lower-case hex digits). Values whose escaped form would exceed `max_chars` are cut
// before the escape that would cross the limit and end with "... (N bytes)", N being the
// input's full length. Callers add their own quotes.
//
// Thread safety: pure function. Ownership: returns a new string.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvtier {

// Characters of escaped text a message shows of one value by default.
inline constexpr size_t kEscapedCharsDefault = 64;

std::string EscapeForMessage(std::string_view bytes, size_t max_chars = kEscapedCharsDefault);

}  // namespace kvtier
