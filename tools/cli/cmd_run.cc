// `kvtier run`: text generation with the reference runtime, its KV going through an Engine.
// The prompt (BOS + the encoded text) is prefilled with CachedPrefill, so the leading chunks
// that an earlier run with the same prompt prefix stored (in the host tier, or on the SSD under
// --cache-dir across processes) are loaded instead of computed; then the continuation is decoded
// token by token and printed as it comes. stdout carries the text only; the cache report (cached
// and computed prompt tokens, prefill time) and the decode speed go to stderr.
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "command.h"
#include "flags.h"
#include "llm_session.h"
#include "report_json.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

class RunCommand final : public Command {
 public:
  explicit RunCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "run",
            "Generate text from a prompt with a llama2.c or GGUF model, KV through kvtier")) {
    AddModelFlags(subcommand(), &flags_, /*with_prompt=*/true, "Tokens to generate at most");
    subcommand()->add_flag("--json", json_,
                           "Print one JSON object on stdout (the text and the statistics) "
                           "instead of streaming the text");
    subcommand()
        ->add_option("--repeat", repeat_,
                     "Prefill the prompt this many times in one process: after the first run "
                     "(generation included) each further time is timed alone, its chunks "
                     "loaded from the tiers the first run filled (host memory first)")
        ->check(CLI::Range(1u, 1000u))
        ->default_val(1);
  }

  int Run() override {
    const Status s = Generate();
    if (!s.ok()) return Fail(s);
    // The text was printed, but the cache did not keep what it was asked to: say so once (the
    // line is printed where it happened) and exit non-zero, so scripts notice.
    return cache_error_.ok() ? kExitOk : kExitFailure;
  }

 private:
  // What one run did, for its report on stdout (--json) or stderr.
  struct RunReport {
    runtime::CachedPrefillStats stats;
    uint64_t prefill_us = 0;
    uint64_t decode_us = 0;
    LlmSession::Decoded decoded;
    size_t stored_chunks = 0;
    bool persistent = false;  // Stored chunks outlive this process.
    std::string text;         // The prompt and the continuation, with --json only.
    nlohmann::ordered_json repeats;
  };

  Status Generate();
  // Decodes the continuation of `sequence`, printing the prompt's text and then each token's as
  // it comes on stdout; with --json into report->text instead. Sets report->decode_us.
  Result<LlmSession::Decoded> DecodeText(LlmSession& session, std::vector<uint32_t>& sequence,
                                         std::vector<float>& logits, RunReport* report);
  void PrintJsonReport(const RunReport& report, LlmSession& session) const;
  static void PrintTextReport(const RunReport& report, LlmSession& session);
  // Prints one line for the first failure to store into the cache; later ones are quiet.
  void CacheFailed(const Status& s);

  // The prompt prefilled again (repeat_ - 1 times) after the run: time to first token and
  // where its chunks came from, one element per repeat.
  Result<nlohmann::ordered_json> Repeat(LlmSession& session, std::span<const uint32_t> prompt);

  Status cache_error_;
  ModelFlags flags_;
  bool json_ = false;
  uint32_t repeat_ = 1;
};

// One stderr line on a prefill: what was loaded and computed, and the time to first token.
void PrintPrefill(const std::string& label, const runtime::CachedPrefillStats& stats,
                  uint64_t prefill_us) {
  const std::string where =
      stats.cached_tokens > 0 ? " (chunks: " + CachedTierList(stats.chunk_tiers) + ")" : "";
  std::fprintf(stderr,
               "kvtier run: %sprompt of %zu tokens: %zu loaded from the cache%s and %zu "
               "computed%s; time to first token %.2f ms (lookup %.2f, compute %.2f)\n",
               label.c_str(), stats.prompt_tokens, stats.cached_tokens, where.c_str(),
               stats.computed_tokens,
               stats.fell_back ? " (a cached block failed verification: recomputed)" : "",
               MsFromUs(prefill_us), MsFromUs(stats.lookup_us), MsFromUs(stats.compute_us));
}

Result<nlohmann::ordered_json> RunCommand::Repeat(LlmSession& session,
                                                  std::span<const uint32_t> prompt) {
  nlohmann::ordered_json repeats = nlohmann::ordered_json::array();
  std::vector<float> logits;
  for (uint32_t r = 2; r <= repeat_; ++r) {
    const uint64_t t0 = SteadyNowUs();
    KV_ASSIGN_OR_RETURN(runtime::CachedPrefillStats stats, session.Prefill(prompt, &logits));
    const uint64_t prefill_us = SteadyNowUs() - t0;
    if (!stats.store_status.ok()) CacheFailed(stats.store_status);
    if (!json_) PrintPrefill("repeat " + std::to_string(r) + ": ", stats, prefill_us);
    nlohmann::ordered_json j = PrefillJson(stats);
    j["ttft_ms"] = MsFromUs(prefill_us);
    j["lookup_ms"] = MsFromUs(stats.lookup_us);
    j["compute_ms"] = MsFromUs(stats.compute_us);
    repeats.push_back(std::move(j));
  }
  return repeats;
}

Status RunCommand::Generate() {
  KV_RETURN_IF_ERROR(FinishModelFlags(&flags_));
  KV_RETURN_IF_ERROR(runtime::Sampler::Validate(flags_.sampler));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LlmSession> session, LlmSession::Open(flags_.session));
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> sequence, session->tokenizer().Encode(flags_.prompt));
  if (sequence.size() >= session->context_tokens()) {
    return Status::NoSpace("the prompt has " + std::to_string(sequence.size()) +
                           " tokens; the context holds " +
                           std::to_string(session->context_tokens()) +
                           " (leave room to generate, or raise --context)");
  }
  RunReport report;
  std::vector<float> logits;
  const uint64_t t0 = SteadyNowUs();
  KV_ASSIGN_OR_RETURN(report.stats, session->Prefill(sequence, &logits));
  report.prefill_us = SteadyNowUs() - t0;
  if (!report.stats.store_status.ok()) CacheFailed(report.stats.store_status);
  // Stored chunks outlive this process on the SSD, or in the service that holds them.
  report.persistent = !flags_.session.cache_dir.empty() || session->via_server();
  if (!json_) PrintPrefill("", report.stats, report.prefill_us);

  const size_t prompt_tokens = sequence.size();
  const std::vector<uint32_t> prompt(sequence);
  KV_ASSIGN_OR_RETURN(report.decoded, DecodeText(*session, sequence, logits, &report));
  const size_t generated = report.decoded.tokens;
  // The decoded tokens' chunks too (all but the last token were run), so a later prompt that
  // extends this text starts from the cache.
  const size_t run_tokens = generated > 0 ? sequence.size() - 1 : prompt_tokens;
  Result<size_t> stored = session->StoreSequence(std::span(sequence).first(run_tokens));
  if (!stored.ok()) CacheFailed(stored.status());
  report.stored_chunks = report.stats.stored_chunks + (stored.ok() ? *stored : 0);
  KV_ASSIGN_OR_RETURN(report.repeats, Repeat(*session, prompt));
  KV_RETURN_IF_ERROR(WriteMetricsFile(flags_, session->MetricsText()));
  if (json_) {
    PrintJsonReport(report, *session);
  } else {
    PrintTextReport(report, *session);
  }
  return Status::Ok();
}

Result<LlmSession::Decoded> RunCommand::DecodeText(LlmSession& session,
                                                   std::vector<uint32_t>& sequence,
                                                   std::vector<float>& logits, RunReport* report) {
  // With --json the text is collected (the decoder writes it to a memory stream).
  char* text_buffer = nullptr;
  size_t text_bytes = 0;
  std::FILE* text_out = json_ ? open_memstream(&text_buffer, &text_bytes) : stdout;
  if (text_out == nullptr) return Status::FromErrno(errno, "open_memstream");
  const std::string prompt_text = session.tokenizer().Decode(sequence);
  std::fwrite(prompt_text.data(), 1, prompt_text.size(), text_out);
  runtime::Sampler sampler(flags_.sampler);
  const uint64_t t1 = SteadyNowUs();
  Result<LlmSession::Decoded> decoded =
      session.Decode(sequence, logits, sampler, {.max_new_tokens = flags_.steps}, text_out);
  report->decode_us = SteadyNowUs() - t1;
  if (json_) {
    std::fclose(text_out);
    report->text.assign(text_buffer, text_bytes);
    std::free(text_buffer);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer.
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  return decoded;
}

double TokensPerSecond(size_t tokens, uint64_t us) {
  return us > 0 ? double(tokens) * 1e6 / double(us) : 0.0;
}

void RunCommand::PrintJsonReport(const RunReport& report, LlmSession& session) const {
  const runtime::CachedPrefillStats& stats = report.stats;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  PutText(&j, "text", report.text);  // And "text_hex" when the bytes are not valid UTF-8.
  j.update(PrefillJson(stats));
  j.update(nlohmann::ordered_json{
      {"ttft_ms", MsFromUs(report.prefill_us)},
      {"lookup_ms", MsFromUs(stats.lookup_us)},
      {"compute_ms", MsFromUs(stats.compute_us)},
      {"generated_tokens", report.decoded.tokens},
      {"decode_ms", MsFromUs(report.decode_us)},
      {"tokens_per_s", TokensPerSecond(report.decoded.tokens, report.decode_us)},
      {"stop", LlmSession::StopName(report.decoded.stop)},
      {"stored_chunks", report.stored_chunks},
      {"persistent", report.persistent},
      {"repeats", report.repeats},
      {"tiers", TierActivityJson(session.Stats())},
      {"cache_error", cache_error_.ok() ? "" : cache_error_.ToString()}});
  std::printf("%s\n", JsonText(j, 1).c_str());
}

void RunCommand::PrintTextReport(const RunReport& report, LlmSession& session) {
  const bool at_context = report.decoded.stop == LlmSession::Stop::kContext;
  std::fprintf(stderr, "kvtier run: generated %zu tokens in %.1f ms (%.0f tokens/s)%s; %zu chunks "
               "stored%s\n",
               report.decoded.tokens, MsFromUs(report.decode_us),
               TokensPerSecond(report.decoded.tokens, report.decode_us),
               at_context ? ", stopped at the context limit (raise --context)" : "",
               report.stored_chunks,
               report.persistent ? "" : " in memory only (gone at exit; --cache-dir keeps them)");
  std::string tiers;
  for (const TierStats& t : session.Stats().tiers) {
    char line[160];
    std::snprintf(line, sizeof(line), "%s%s %llu blocks (%.1f MiB), %llu evicted",
                  tiers.empty() ? "" : "; ", std::string(TierKindName(t.kind)).c_str(),
                  static_cast<unsigned long long>(t.blocks), double(t.used_bytes) / (1 << 20),
                  static_cast<unsigned long long>(t.evictions));
    tiers += line;
  }
  std::fprintf(stderr, "kvtier run: cache tiers: %s\n", tiers.c_str());
}

void RunCommand::CacheFailed(const Status& s) {
  if (!cache_error_.ok()) return;
  cache_error_ = s;
  std::fprintf(stderr, "kvtier run: error: the KV cache could not store this run's chunks: %s\n",
               s.ToString().c_str());
}

}  // namespace

std::unique_ptr<Command> MakeRunCommand(CLI::App* app) { return std::make_unique<RunCommand>(app); }

}  // namespace kvtier::cli
