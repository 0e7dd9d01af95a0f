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
// failing status.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "flags.h"
#include "llm_session.h"

namespace kvtier::cli {
namespace {

// A user turn longer than this is refused (the line reader's bound).
constexpr size_t kTurnBytesMax = size_t{64} << 10;

// Reads one line of stdin without its newline. Returns false at the end of input; a line longer
// than kTurnBytesMax is an error.
Result<bool> ReadLine(std::FILE* in, std::string* line) {
  line->clear();
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), in) != nullptr) {
    line->append(buf);
    if (line->size() > kTurnBytesMax) {
      return Status::InvalidArgument("a turn is longer than " + std::to_string(kTurnBytesMax) +
                                     " bytes");
    }
    if (!line->empty() && line->back() == '\n') {
      line->pop_back();
      if (!line->empty() && line->back() == '\r') line->pop_back();
      return true;
    }
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
  }

  int Run() override {
    const Status s = Chat();
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

  Status cache_error_;
  ModelFlags flags_;
  std::vector<uint32_t> conversation_;
  size_t turns_ = 0;
};

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
  const uint64_t t1 = SteadyNowUs();
  KV_ASSIGN_OR_RETURN(size_t generated, session.Decode(conversation_, logits, sampler,
                                                       {.max_new_tokens = flags_.steps,
                                                        .run_last = LlmSession::RunLast::kYes,
                                                        .stop_at = LlmSession::StopAt::kEndOfLine},
                                                       stdout));
  const uint64_t decode_us = SteadyNowUs() - t1;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  // Every reply token was run: its full chunks are stored so the next turn loads them.
  Result<size_t> stored = session.StoreSequence(conversation_);
  if (!stored.ok()) CacheFailed(stored.status());
  std::fprintf(
      stderr,
      "[turn %zu] %zu cached / %zu computed tokens (cached chunks: %s), prefill %.2f ms%s; "
      "reply %zu tokens in %.1f ms; %zu new chunks stored; context %zu/%u\n",
      turns_, stats.cached_tokens, stats.computed_tokens, CachedTierList(stats.chunk_tiers).c_str(),
      MsFromUs(prefill_us), stats.fell_back ? " (a cached block failed: recomputed)" : "",
      generated, MsFromUs(decode_us), stats.stored_chunks + (stored.ok() ? *stored : 0),
      conversation_.size(), session.context_tokens());
  return Status::Ok();
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
