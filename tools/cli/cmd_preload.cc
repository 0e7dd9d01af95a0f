// `kvtier preload`: warms an SSD cache directory with the KV of a document or of a trace of
// prompts, so that a later `kvtier run`/`chat` (or an engine) with the same model, block size and
// salt finds their chunks. Each prompt is encoded as `run` encodes its prompt (BOS + the text),
// its chunks already in the cache are found by Lookup and not computed again, the rest are
// computed and stored (LlmSession::CacheChunks), and the SSD tier is flushed at the end.
//
// Resumable without a side file: Ctrl-C (or SIGTERM) stops after the step being computed, flushes
// what was stored, says how far it got and exits 130; the same command run again finds the stored
// chunks by Lookup and computes only the rest. Progress (tokens, rate, ETA) and log lines go to
// stderr; the summary, or one JSON object with --json, to stdout.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "flags.h"
#include "interrupt.h"
#include "llm_session.h"
#include "progress.h"
#include "prompt_source.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

struct PreloadTotals {
  size_t prompts = 0, prompts_done = 0;
  uint64_t tokens = 0, tokens_done = 0, computed_tokens = 0;
  uint64_t chunks = 0, chunks_stored = 0, chunks_present = 0;
  uint64_t bytes_written = 0;
  uint64_t compute_us = 0, store_us = 0;
  double seconds = 0, flush_seconds = 0;
  bool interrupted = false;
};

// Where a prompt came from, for messages: "the document" or "--trace FILE line N".
std::string PromptName(const PromptText& p, const std::string& trace) {
  return p.line == 0 ? std::string("the document")
                     : "--trace " + trace + " line " + std::to_string(p.line);
}

class PreloadCommand final : public Command {
 public:
  explicit PreloadCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "preload", "Warm a cache directory with the KV of a document or a trace of prompts, "
                       "for later runs with the same model, block size and salt")) {
    AddModelCacheFlags(subcommand(), &flags_);
    // --cache-dir, or --server (a service's tiers): checked in Run().
    CLI::Option_group* input = subcommand()->add_option_group("input", "What to preload");
    input->add_option("--document", document_,
                      "A text file cached whole as one prompt (as run --prompt-file reads it); "
                      "- reads stdin");
    input->add_option("--trace", trace_,
                      "Prompts, one per line: JSON Lines ({\"prompt\": \"...\"}) when the first "
                      "line starts with '{', else plain text; - reads stdin");
    input->require_option(1);
    subcommand()->add_flag("--json", json_, "Print the summary as one JSON object on stdout");
  }

  int Run() override {
    if (flags_.session.cache_dir.empty() && flags_.session.server.empty()) {
      std::fprintf(stderr, "kvtier: --cache-dir is required (or --server, a running kvtier "
                           "serve's socket) (run with --help for usage)\n");
      return kExitUsage;
    }
    InstallInterruptHandler();
    PreloadTotals t;
    if (const Status s = Preload(&t); !s.ok()) return Fail(s);
    if (json_) {
      PrintJson(t);
    } else {
      PrintText(t);
    }
    if (!t.interrupted) return kExitOk;
    PrintInterrupted("preload",
                     "stopped after " + std::to_string(t.prompts_done) + " of " +
                         std::to_string(t.prompts) + " prompts (" + std::to_string(t.tokens_done) +
                         " of " + std::to_string(t.tokens) +
                         " tokens); what was stored is on disk, and the same command finishes "
                         "the rest");
    return kExitInterrupted;
  }

 private:
  Status Preload(PreloadTotals* t);
  void PrintText(const PreloadTotals& t) const;
  void PrintJson(const PreloadTotals& t) const;

  ModelFlags flags_;
  std::string document_, trace_;
  bool json_ = false;
};

Status PreloadCommand::Preload(PreloadTotals* t) {
  KV_RETURN_IF_ERROR(FinishModelFlags(&flags_));
  KV_ASSIGN_OR_RETURN(std::vector<PromptText> prompts,
                      document_.empty() ? ReadTrace(trace_) : ReadDocument(document_));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LlmSession> session, LlmSession::Open(flags_.session));
  // Every prompt is encoded and checked before anything is computed: a prompt that cannot fit is
  // an error now, not after an hour of work.
  std::vector<std::vector<uint32_t>> encoded;
  encoded.reserve(prompts.size());
  const size_t block_tokens = flags_.session.block_tokens;
  for (const PromptText& p : prompts) {
    KV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, session->tokenizer().Encode(p.text));
    if (tokens.size() > session->context_tokens()) {
      return Status::NoSpace(PromptName(p, trace_) + " has " + std::to_string(tokens.size()) +
                             " tokens; the context holds " +
                             std::to_string(session->context_tokens()) + " (raise --context)");
    }
    t->tokens += tokens.size();
    t->chunks += tokens.size() / block_tokens;
    encoded.push_back(std::move(tokens));
  }
  t->prompts = prompts.size();
  if (CliLogLevel() < LogLevel::kError) {
    std::fprintf(stderr,
                 "kvtier preload: %zu prompts, %llu tokens, %llu chunks of %zu tokens; %s\n",
                 t->prompts, static_cast<unsigned long long>(t->tokens),
                 static_cast<unsigned long long>(t->chunks), block_tokens,
                 session->Description().c_str());
  }
  const uint64_t live_before = session->SsdLiveBytes();
  const uint64_t t0 = SteadyNowUs();
  Progress progress("preload", t->tokens, ProgressUnit::kCount, "tokens");
  Status failed;
  // Interrupted() is polled after each step and each prompt, so a signal always lets the step in
  // progress (or the first one) finish and be stored.
  for (size_t i = 0; i < encoded.size(); ++i) {
    const uint64_t base = t->tokens_done;
    Result<LlmSession::CacheChunksStats> st =
        session->CacheChunks(encoded[i], [&](size_t done) {
          progress.Update(base + done);
          return !Interrupted();
        });
    if (!st.ok()) {
      failed = st.status().WithContext(PromptName(prompts[i], trace_));
      break;
    }
    t->chunks_present += st->present_chunks;
    t->chunks_stored += st->stored_chunks;
    t->computed_tokens += st->computed_tokens;
    t->compute_us += st->compute_us;
    t->store_us += st->store_us;
    if (st->stopped) {
      t->interrupted = true;
      break;
    }
    ++t->prompts_done;
    t->tokens_done += encoded[i].size();
    progress.Update(t->tokens_done);
    if (Interrupted() && i + 1 < encoded.size()) {
      t->interrupted = true;
      break;
    }
  }
  // What was stored is made durable whatever happened: an interrupted or failed preload keeps its
  // work for the next one.
  const uint64_t flush_start = SteadyNowUs();
  const Status flushed = session->Flush();
  t->flush_seconds = static_cast<double>(SteadyNowUs() - flush_start) / 1e6;
  t->seconds = static_cast<double>(SteadyNowUs() - t0) / 1e6;
  const uint64_t live_after = session->SsdLiveBytes();
  t->bytes_written = live_after > live_before ? live_after - live_before : 0;
  progress.Finish();
  KV_RETURN_IF_ERROR(failed);
  KV_RETURN_IF_ERROR(flushed.WithContext("flushing the cache"));
  return WriteMetricsFile(flags_, session->MetricsText());
}

void PreloadCommand::PrintText(const PreloadTotals& t) const {
  std::printf("preload: %zu of %zu prompts, %llu of %llu tokens; %llu chunks stored, %llu already "
              "in the cache; %s written in %.2f s (%llu tokens computed, %.0f tokens/s)\n",
              t.prompts_done, t.prompts, static_cast<unsigned long long>(t.tokens_done),
              static_cast<unsigned long long>(t.tokens),
              static_cast<unsigned long long>(t.chunks_stored),
              static_cast<unsigned long long>(t.chunks_present),
              Progress::FormatBytes(static_cast<double>(t.bytes_written)).c_str(), t.seconds,
              static_cast<unsigned long long>(t.computed_tokens),
              t.seconds > 0 ? static_cast<double>(t.computed_tokens) / t.seconds : 0.0);
}

void PreloadCommand::PrintJson(const PreloadTotals& t) const {
  const nlohmann::ordered_json j = {
      {"prompts", t.prompts},
      {"prompts_done", t.prompts_done},
      {"tokens", t.tokens},
      {"tokens_done", t.tokens_done},
      {"computed_tokens", t.computed_tokens},
      {"block_tokens", flags_.session.block_tokens},
      {"chunks", t.chunks},
      {"chunks_stored", t.chunks_stored},
      {"chunks_present", t.chunks_present},
      {"bytes_written", t.bytes_written},
      {"seconds", t.seconds},
      {"compute_seconds", static_cast<double>(t.compute_us) / 1e6},
      {"store_seconds", static_cast<double>(t.store_us) / 1e6},
      {"flush_seconds", t.flush_seconds},
      {"computed_tokens_per_s",
       t.seconds > 0 ? static_cast<double>(t.computed_tokens) / t.seconds : 0.0},
      {"interrupted", t.interrupted},
      {"cache_dir", flags_.session.cache_dir}};
  std::printf("%s\n", JsonText(j, 1).c_str());
}

}  // namespace

std::unique_ptr<Command> MakePreloadCommand(CLI::App* app) {
  return std::make_unique<PreloadCommand>(app);
}

}  // namespace kvtier::cli
