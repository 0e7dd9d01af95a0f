#include "token_file.h"

#include <charconv>
#include <string_view>
#include <system_error>

#include "cli_limits.h"
#include "core/escape.h"
#include "input_file.h"

namespace kvtier::cli {
namespace {

// Longest token text kept for parsing and messages; any longer run of digits is out of range.
constexpr size_t kTokenTextMax = 32;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Splits a byte stream into whitespace-separated tokens and converts each one.
class TokenParser {
 public:
  TokenParser(const std::string& path, size_t tokens_max) : path_(path), tokens_max_(tokens_max) {}

  Status Feed(std::string_view bytes) {
    for (char c : bytes) {
      if (!IsSpace(c)) {
        if (text_.size() < kTokenTextMax) text_.push_back(c);
        truncated_ = truncated_ || text_.size() == kTokenTextMax;
        continue;
      }
      KV_RETURN_IF_ERROR(EndToken());
    }
    return Status::Ok();
  }

  Status Finish() { return EndToken(); }
  std::vector<uint32_t>&& TakeTokens() { return std::move(tokens_); }

 private:
  Status EndToken() {
    if (text_.empty()) return Status::Ok();
    const size_t number = tokens_.size() + 1;
    // Escaped (core/escape.h) so binary input cannot garble the terminal or split the one-line
    // message; the text is already cut at kTokenTextMax bytes, so all of it is shown.
    const std::string shown =
        EscapeForMessage(text_, 4 * kTokenTextMax) + (truncated_ ? "..." : "");
    uint32_t value = 0;
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(text_.data(), end, value);
    const bool digits_only = ptr == end || ec == std::errc::result_out_of_range;
    if (ec == std::errc::result_out_of_range || (digits_only && truncated_)) {
      return Error(number, "'" + shown + "' is out of range for a u32 token id");
    }
    if (ec != std::errc() || ptr != end) {
      return Error(number, "'" + shown + "' is not a decimal token id");
    }
    if (tokens_.size() == tokens_max_) {
      return Status::InvalidArgument(path_ + ": more than " + std::to_string(tokens_max_) +
                                     " tokens (the per-call limit)");
    }
    tokens_.push_back(value);
    text_.clear();
    truncated_ = false;
    return Status::Ok();
  }

  Status Error(size_t number, const std::string& what) const {
    return Status::InvalidArgument(path_ + ": token " + std::to_string(number) + ": " + what);
  }

  const std::string& path_;
  const size_t tokens_max_;
  std::string text_;
  bool truncated_ = false;
  std::vector<uint32_t> tokens_;
};

}  // namespace

Result<std::vector<uint32_t>> ParseTokenText(std::string_view text, const std::string& name,
                                             size_t tokens_max) {
  TokenParser parser(name, tokens_max);
  KV_RETURN_IF_ERROR(parser.Feed(text));
  KV_RETURN_IF_ERROR(parser.Finish());
  return parser.TakeTokens();
}

Result<std::vector<uint32_t>> ReadTokenFile(const std::string& path, size_t tokens_max) {
  const std::string name = path == "-" ? std::string("<stdin>") : path;
  std::string text;
  KV_RETURN_IF_ERROR(ReadInputFile(path, "token file " + name, kTokenFileBytesMax, &text));
  return ParseTokenText(text, name, tokens_max);
}

}  // namespace kvtier::cli
