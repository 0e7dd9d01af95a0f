// Reading token ids for CLI subcommands: a text file (or stdin) of whitespace-separated decimal
// u32 token ids, as produced by a tokenizer dump. Bounded: only a regular file (or "-", stdin) of
// at most kTokenFileBytesMax bytes is read (input_file.h, cli_limits.h), and parsing stops with
// an error at `tokens_max` + 1 tokens, so a huge input or a device cannot exhaust memory.
//
// Thread safety: the function is reentrant. Ownership: the returned vector is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::cli {

// `path` "-" reads stdin. Errors: IoError/NotFound when the file cannot be opened or read,
// InvalidArgument for a file that is not a regular one or is larger than kTokenFileBytesMax, a
// token that is not a decimal number, one above 2^32 - 1, or more than
// `tokens_max` tokens. Messages name the file and the 1-based token number.
Result<std::vector<uint32_t>> ReadTokenFile(const std::string& path, size_t tokens_max);

// The same parse over bytes already in memory; `name` stands for the file in messages.
Result<std::vector<uint32_t>> ParseTokenText(std::string_view text, const std::string& name,
                                             size_t tokens_max);

}  // namespace kvtier::cli
