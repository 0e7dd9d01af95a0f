// The prompts `kvtier preload` warms a cache with: a whole document (one prompt), or a trace of
// prompts. A trace is JSON Lines when its first non-blank line starts with '{': every non-blank
// line is then a JSON object with a "prompt" string (other keys are ignored); otherwise it is plain
// text, one prompt per non-blank line (the line without its "\n" or "\r\n"). Blank lines are
// skipped in both. Each prompt is the text `kvtier run --prompt` would be given, so that run
// computes the same keys.
//
// Thread safety: reentrant functions. Ownership: the returned prompts are the caller's.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::cli {

struct PromptText {
  std::string text;
  size_t line = 0;  // 1-based line of a trace; 0 for a document.
};

// The whole of `path` ("-": stdin) as one prompt, at most kPromptFileBytesMax bytes
// (cli_limits.h). InvalidArgument when it holds nothing but white space; the errors of
// ReadInputFile (input_file.h): not a regular file, too large, unreadable.
Result<std::vector<PromptText>> ReadDocument(const std::string& path);

// The prompts of the trace at `path` ("-": stdin), at most kTraceFileBytesMax bytes; the errors
// of ParseTrace and ReadInputFile.
Result<std::vector<PromptText>> ReadTrace(const std::string& path);

// The prompts of a trace whose bytes are `text`; `name` stands for the file in messages.
// InvalidArgument naming the line for a JSON Lines line that is not valid JSON, not an object, or
// has no "prompt" string (or an empty one), and when there is no prompt at all.
Result<std::vector<PromptText>> ParseTrace(std::string_view text, const std::string& name);

}  // namespace kvtier::cli
