// `kvtier chat`: a multi-turn conversation with the reference runtime, the way an inference
// engine serves one with a prefix cache. User turns come from stdin, one per line (a "> "
// prompt is shown on stderr only when stdin is a terminal). The conversation's tokens are kept;
// for every turn the whole conversation is prefilled again through CachedPrefill, so the earlier
// turns (their replies included: those chunks are stored after each reply) are found with
// Lookup and loaded, and only the new text is computed. Each reply goes to stdout, one line per
// turn (a reply ends at the model's first newline, BOS or EOS, or after --steps tokens), and a
// stat line (cached / computed tokens, prefill time) to stderr.
//
// There is no chat template: turns are concatenated text, so a story model (stories260K) just
// continues the story it is told. The conversation is bounded by the context (--context or the
// model's seq_len, at most 4096); a turn that does not fit ends the chat with a message and a
// failing status. A reply of no tokens is printed as "(no tokens: <why>)", never as an empty
// line. With --json nothing is printed per turn: stdout gets one JSON object at the end, with
// every turn's text, reply and statistics (and "error" when the chat ended on one).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_limits.h"
#include "command.h"
#include "flags.h"
#include "llm_session.h"
#include "report_json.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

// Reads one line of stdin without its newline. Returns false at the end of input; a line longer
// than kChatTurnBytesMax is an error. Byte by byte (stdio buffers them): a line may hold NULs, which
// fgets cannot measure (a stream of NULs, `chat < /dev/zero`, was read forever).
Result<bool> ReadLine(std::FILE* in, std::string* line) {
  line->clear();
  // Bounded: the loop ends at a newline, the end of input, or past kChatTurnBytesMax bytes.
  for (int c = std::getc(in); c != EOF; c = std::getc(in)) {
    if (c == '\n') {
      if (!line->empty() && line->back() == '\r') line->pop_back();
      return true;
    }
    if (line->size() == kChatTurnBytesMax) {
      return Status::InvalidArgument("a turn is longer than " + std::to_string(kChatTurnBytesMax) +
                                     " bytes");
    }
    line->push_back(static_cast<char>(c));
  }
  if (std::ferror(in)) return Status::FromErrno(errno, "reading stdin");
  return !line->empty();  // A last line without a newline still counts.
}

class ChatCommand final : public Command {
 public:
  explicit ChatCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "chat", "Multi-turn conversation from stdin; earlier turns come from the KV cache")) {
    flags_.steps = 64;
    AddModelFlags(subcommand(), &flags_, /*with_prompt=*/false, "Tokens per reply at most");
    subcommand()->add_flag("--json", json_,
                           "Print one JSON object on stdout at the end (every turn's reply and "
                           "statistics) instead of a line per reply");
  }

  int Run() override {
    const Status s = Chat();
    if (json_) PrintJson(s);
    if (!s.ok()) return Fail(s);
    // The replies were printed, but the cache did not keep what it was asked to: non-zero, so
    // scripts notice (the line saying why was printed when it happened).
    return cache_error_.ok() ? kExitOk : kExitFailure;
  }

 private:
  Status Chat();
  Status Turn(LlmSession& session, runtime::Sampler& sampler, const std::string& text);
  // Prints one line for the first failure to store into the cache; later ones are quiet.
  void CacheFailed(const Status& s);
  // --json: the turns so far, the context, and the error that ended the chat if any.
  void PrintJson(const Status& chat) const;

  Status cache_error_;
  ModelFlags flags_;
  bool json_ = false;
  std::vector<uint32_t> conversation_;
  size_t turns_ = 0;
  uint32_t context_tokens_ = 0;
  nlohmann::ordered_json turn_reports_ = nlohmann::ordered_json::array();
};

// The reply line for a reply of no tokens: why there is none.
std::string NoReplyText(LlmSession::Stop stop) {
  switch (stop) {
    case LlmSession::Stop::kEndOfText:
      return "(no tokens: the model ended the text at once)";
    case LlmSession::Stop::kEndOfLine:
      return "(no tokens: the model's first token was a line break, which ends a reply)";
    case LlmSession::Stop::kContext:
      return "(no tokens: the context is full; start a new chat or raise --context)";
    case LlmSession::Stop::kMaxTokens:
      break;
  }
  return "(no tokens: --steps allows none)";
}

Status ChatCommand::Turn(LlmSession& session, runtime::Sampler& sampler, const std::string& text) {
  const bool first = conversation_.empty();
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens,
                      session.tokenizer().Encode(text, {.add_bos = first}));
  // Room for the turn and at least one reply token.
  if (conversation_.size() + tokens.size() >= session.context_tokens()) {
    return Status::NoSpace("turn " + std::to_string(turns_ + 1) + " (" +
                           std::to_string(tokens.size()) + " tokens) does not fit: the " +
                           "conversation holds " + std::to_string(conversation_.size()) + " of " +
                           std::to_string(session.context_tokens()) +
                           " context tokens; start a new chat or raise --context");
  }
  conversation_.insert(conversation_.end(), tokens.begin(), tokens.end());
  ++turns_;
  std::vector<float> logits;
  const uint64_t t0 = SteadyNowUs();
  KV_ASSIGN_OR_RETURN(runtime::CachedPrefillStats stats, session.Prefill(conversation_, &logits));
  const uint64_t prefill_us = SteadyNowUs() - t0;
  if (!stats.store_status.ok()) CacheFailed(stats.store_status);
  // The reply is streamed to stdout, or with --json collected in memory.
  char* reply_buffer = nullptr;
  size_t reply_bytes = 0;
  std::FILE* reply_out = json_ ? open_memstream(&reply_buffer, &reply_bytes) : stdout;
  if (reply_out == nullptr) return Status::FromErrno(errno, "open_memstream");
  const uint64_t t1 = SteadyNowUs();
  Result<LlmSession::Decoded> decoded =
      session.Decode(conversation_, logits, sampler,
                     {.max_new_tokens = flags_.steps,
                      .run_last = LlmSession::RunLast::kYes,
                      .stop_at = LlmSession::StopAt::kEndOfLine},
                     reply_out);
  const uint64_t decode_us = SteadyNowUs() - t1;
  std::string reply;
  if (json_) {
    std::fclose(reply_out);
    reply.assign(reply_buffer, reply_bytes);
    std::free(reply_buffer);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer.
  }
  KV_RETURN_IF_ERROR(decoded.status());
  if (!json_) {
    // One line per turn: an empty reply says why rather than printing an empty line.
    if (decoded->tokens == 0) std::fputs(NoReplyText(decoded->stop).c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  // Every reply token was run: its full chunks are stored so the next turn loads them.
  Result<size_t> stored = session.StoreSequence(conversation_);
  if (!stored.ok()) CacheFailed(stored.status());
  const size_t stored_chunks = stats.stored_chunks + (stored.ok() ? *stored : 0);
  if (json_) {
    nlohmann::ordered_json turn = {{"turn", turns_}};
    PutText(&turn, "user", text);  // "user_hex", "reply_hex": when not valid UTF-8.
    PutText(&turn, "reply", reply);
    turn.update(nlohmann::ordered_json{{"reply_tokens", decoded->tokens},
                                       {"stop", LlmSession::StopName(decoded->stop)}});
    turn.update(PrefillJson(stats));
    turn.update(nlohmann::ordered_json{{"prefill_ms", MsFromUs(prefill_us)},
                                       {"decode_ms", MsFromUs(decode_us)},
                                       {"stored_chunks", stored_chunks},
                                       {"context_used_tokens", conversation_.size()}});
    turn_reports_.push_back(std::move(turn));
    return Status::Ok();
  }
  std::fprintf(
      stderr,
      "[turn %zu] %zu cached / %zu computed tokens (cached chunks: %s), prefill %.2f ms%s; "
      "reply %zu tokens in %.1f ms; %zu new chunks stored; context %zu/%u\n",
      turns_, stats.cached_tokens, stats.computed_tokens, CachedTierList(stats.chunk_tiers).c_str(),
      MsFromUs(prefill_us), stats.fell_back ? " (a cached block failed: recomputed)" : "",
      decoded->tokens, MsFromUs(decode_us), stored_chunks, conversation_.size(),
      session.context_tokens());
  return Status::Ok();
}

void ChatCommand::PrintJson(const Status& chat) const {
  const nlohmann::ordered_json j = {
      {"turns", turn_reports_},
      {"context_tokens", context_tokens_},
      {"persistent", !flags_.session.cache_dir.empty() || !flags_.session.server.empty()},
      {"cache_error", cache_error_.ok() ? "" : cache_error_.ToString()},
      {"error", chat.ok() ? "" : chat.ToString()}};
  std::printf("%s\n", JsonText(j, 1).c_str());
}

void ChatCommand::CacheFailed(const Status& s) {
  if (!cache_error_.ok()) return;
  cache_error_ = s;
  std::fprintf(stderr, "kvtier chat: error: the KV cache could not store this conversation: %s\n",
               s.ToString().c_str());
}

Status ChatCommand::Chat() {
  KV_RETURN_IF_ERROR(FinishModelFlags(&flags_));
  KV_RETURN_IF_ERROR(runtime::Sampler::Validate(flags_.sampler));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LlmSession> session, LlmSession::Open(flags_.session));
  context_tokens_ = session->context_tokens();
  const bool interactive = ::isatty(STDIN_FILENO) == 1;
  if (interactive) {
    std::fprintf(stderr, "kvtier chat: %s\none turn per line; end with Ctrl-D\n",
                 session->Description().c_str());
  }
  runtime::Sampler sampler(flags_.sampler);
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    KV_ASSIGN_OR_RETURN(bool more, ReadLine(stdin, &line));
    if (!more) break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // Blank line.
    KV_RETURN_IF_ERROR(Turn(*session, sampler, line));
  }
  return WriteMetricsFile(flags_, session->MetricsText());
}

}  // namespace

std::unique_ptr<Command> MakeChatCommand(CLI::App* app) {
  return std::make_unique<ChatCommand>(app);
}

}  // namespace kvtier::cli
