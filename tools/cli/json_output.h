// How every `--json` document of the CLI is printed, and what happens to text that is not valid
// UTF-8 (README.md, "JSON output"). JSON strings must be UTF-8, but the bytes the CLI reports are
// not always: a prompt file may hold any byte, a model may emit a token that is one byte of a
// multi-byte character (sampling at a high temperature does it often), and paths and model names
// are bytes. nlohmann::json's strict dump throws on them, and the whole result was lost.
//
// The rule: JsonText prints every string with each invalid UTF-8 sequence replaced by U+FFFD (the
// replacement character), so the output always parses; valid text, U+FFFD included, is kept as
// is. Where the exact bytes matter (the text a model generated or a user typed: run's "text",
// chat's "user" and "reply"), PutText also writes them as lower-case hex under "<key>_hex", only
// when the text is not valid UTF-8: a consumer that needs the bytes reads "<key>_hex" when it is
// present and "<key>" otherwise.
//
// Thread safety: pure functions. Ownership: returns new strings.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/hex.h"

namespace kvtier::cli {

// `j` as text, indented by `indent` spaces (-1: one line), invalid UTF-8 replaced by U+FFFD.
template <typename Json>
std::string JsonText(const Json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// True when `text` is valid UTF-8. The test is nlohmann's own: a dump that drops invalid bytes is
// as long as one that replaces them exactly when there is nothing to replace, so "valid" here
// means what JsonText keeps unchanged.
inline bool IsValidUtf8(std::string_view text) {
  const nlohmann::json s = std::string(text);
  using Handler = nlohmann::json::error_handler_t;
  return s.dump(-1, ' ', false, Handler::ignore).size() ==
         s.dump(-1, ' ', false, Handler::replace).size();
}

// (*j)[key] = text, plus (*j)[key + "_hex"] = its bytes in hex when text is not valid UTF-8.
inline void PutText(nlohmann::ordered_json* j, const std::string& key, std::string_view text) {
  (*j)[key] = std::string(text);
  if (!IsValidUtf8(text)) (*j)[key + "_hex"] = HexOf(text);
}

}  // namespace kvtier::cli
