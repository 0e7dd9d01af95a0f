// See prompt_source.h.
#include "prompt_source.h"

#include <nlohmann/json.hpp>

#include "cli_limits.h"
#include "input_file.h"

namespace kvtier::cli {
namespace {

bool Blank(std::string_view s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

// Why a JSON Lines line is not a prompt, or "" when it is one (then *prompt holds it).
std::string JsonPrompt(std::string_view line, std::string* prompt) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return "not a JSON object";
  auto it = j.find("prompt");
  if (it == j.end() || !it->is_string()) return "no \"prompt\" string";
  *prompt = it->get<std::string>();
  if (prompt->empty()) return "an empty \"prompt\"";
  return "";
}

}  // namespace

Result<std::vector<PromptText>> ReadDocument(const std::string& path) {
  std::string text;
  KV_RETURN_IF_ERROR(ReadInputFile(path, "--document " + path, kPromptFileBytesMax, &text));
  if (Blank(text)) return Status::InvalidArgument("--document " + path + ": the document is empty");
  std::vector<PromptText> out;
  out.push_back({std::move(text), 0});
  return out;
}

Result<std::vector<PromptText>> ReadTrace(const std::string& path) {
  std::string text;
  KV_RETURN_IF_ERROR(ReadInputFile(path, "--trace " + path, kTraceFileBytesMax, &text));
  return ParseTrace(text, "--trace " + path);
}

Result<std::vector<PromptText>> ParseTrace(std::string_view text, const std::string& name) {
  std::vector<PromptText> out;
  bool decided = false, jsonl = false;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Blank(line)) continue;
    if (!decided) {
      decided = true;
      jsonl = line[line.find_first_not_of(" \t")] == '{';
    }
    PromptText p{.line = line_number};
    if (!jsonl) {
      p.text = std::string(line);
    } else if (std::string why = JsonPrompt(line, &p.text); !why.empty()) {
      return Status::InvalidArgument(name + " line " + std::to_string(line_number) + ": " + why +
                                     " (a trace whose first line starts with '{' is JSON Lines: "
                                     "one {\"prompt\": \"...\"} object per line)");
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) return Status::InvalidArgument(name + ": no prompts (the trace is empty)");
  return out;
}

}  // namespace kvtier::cli
