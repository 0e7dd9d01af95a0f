// `kvtier demo`: the main job. It shows, on any machine and in a few seconds, what kvtier does
// for an inference engine: a transformer (synthetic weights with TinyLlama's KV geometry, cut to
// fit a laptop, or a real llama2.c/GGUF model with --model) serves a multi-turn conversation
// about a long document, and each step prints what the cache did:
//   1. turn 1 computes the document and stores its chunks (device, host and SSD tiers);
//   2. turn 2 finds the document with Lookup, loads it layer by layer and computes only the new
//      tokens; its logits are checked against a full recomputation without the cache;
//   3. another tenant (a different salt) gets no hit: keys carry the salt;
//   4. the engine is closed and reopened on the same SSD directory: the document is found on the
//      SSD, verified, loaded and checked again.
// With a real model and a tokenizer, the conversation is English text (a made-up story, repeated
// to the document length and cut to the model's seq_len), and turn 2 also decodes a greedy
// continuation twice, from the cached prefill and from the full recomputation; both texts are
// printed and must be identical.
// Exit status 0 means every check held. Each long prefill shows a progress line on stderr; with
// --json stdout gets one JSON object at the end instead of the step-by-step text. Ctrl-C stops
// the demo within a moment, removes its temporary SSD directory, and exits with 130.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "engine/engine.h"
#include "flags.h"
#include "interrupt.h"
#include "json_output.h"
#include "progress.h"
#include "report_json.h"
#include "runtime/cached_prefill.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"
#include "runtime/sampler.h"
#include "runtime/synthetic.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::cli {
namespace {

using runtime::CachedPrefillStats;
using runtime::InMemoryKvBlocks;
using runtime::Model;

constexpr uint32_t kBlockTokens = 256;
constexpr float kLogitsTolerance = 1e-3f;  // Relative to the largest |logit|; KV is FP16 both ways.

constexpr uint32_t kContinuationTokens = 32;  // Greedy tokens decoded after turn 2.

// The conversation's text when the model has a tokenizer (written for this demo).
constexpr char kDocumentText[] =
    "Tom had a red kite. Every morning he ran to the hill near his house and let the kite fly "
    "high in the sky. His sister Mia liked to watch it dance in the wind. One windy day the "
    "string broke and the kite flew over the trees. Tom and Mia looked for it all day. ";
constexpr char kTurn1Text[] = "Where did the kite go?";
constexpr char kTurn2Text[] = "Once upon a time, there was a little girl named Lily.";

struct DemoModel {
  std::unique_ptr<Model> model;
  std::optional<runtime::Tokenizer> tokenizer;  // Real models only.
  std::string description;
};

struct Conversation {
  std::vector<uint32_t> turn1;  // Document + question.
  std::vector<uint32_t> turn2;  // turn1 + another question.
};

Result<DemoModel> MakeModel(const std::string& model_path, const std::string& tokenizer_path) {
  DemoModel out;
  if (!model_path.empty()) {
    KV_ASSIGN_OR_RETURN(runtime::LoadedModel loaded,
                        runtime::LoadModel(model_path, tokenizer_path));
    out.description = model_path;
    out.tokenizer = std::move(loaded.tokenizer);
    KV_ASSIGN_OR_RETURN(out.model, Model::Create(std::move(loaded.weights)));
    return out;
  }
  KV_ASSIGN_OR_RETURN(runtime::ModelConfig config, runtime::SyntheticPreset("tinyllama-1.1b"));
  KV_ASSIGN_OR_RETURN(
      config, runtime::ShrinkConfig(
                  config, {.layers = 4, .dim = 512, .hidden_dim = 1536, .vocab_size = 4096}));
  KV_ASSIGN_OR_RETURN(runtime::ModelWeights weights, runtime::MakeSyntheticWeights(config, 7));
  out.description = "synthetic tinyllama-1.1b geometry (" + std::to_string(config.n_layers) +
                    " of 22 layers, " + std::to_string(config.n_kv_heads) + " KV heads x " +
                    std::to_string(config.head_dim) + ")";
  KV_ASSIGN_OR_RETURN(out.model, Model::Create(std::move(weights)));
  return out;
}

// `document_blocks`: the blocks of the longest prompt's chunks. Turn 1 stores them in one call,
// which needs a memory slot for each until they are written through, so the host tier (and the
// SSD) grow with the document.
EngineOptions MakeEngineOptions(const KvLayout& layout, const std::string& ssd_dir,
                                uint64_t document_blocks, Logger* logger) {
  const uint64_t block = layout.BlockBytes();
  EngineOptions o;
  o.layout = layout;
  o.model = {.name = "kvtier-demo"};
  o.device.capacity_bytes = 8 * block;  // A small device budget: blocks spill to host.
  o.host.capacity_bytes = std::max<uint64_t>(64, document_blocks + 8) * block;
  const uint64_t ssd_bytes = std::max<uint64_t>(256 * kMiB, 2 * document_blocks * block);
  o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {ssd_dir},
                                               .capacity_bytes = ssd_bytes,
                                               .segment_bytes = 16 * kMiB,
                                               .sync = SsdSyncMode::kPeriodic});
  o.write_policy = WritePolicy::kWriteThrough;
  o.ssd_codec = codecs::CodecParams::ShuffleZstd(1);
  o.logger = logger;
  return o;
}

std::vector<uint32_t> RandomTokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> t(n);
  for (uint32_t& v : t) v = 1 + static_cast<uint32_t>(rng() % (vocab - 1));
  return t;
}

// Random tokens, or with a tokenizer the demo's text, repeated to `document_tokens` and cut so
// that the conversation and the continuation fit the model's seq_len (when it has one).
Result<Conversation> MakeConversation(const DemoModel& m, size_t document_tokens) {
  const uint32_t vocab = m.model->config().vocab_size;
  Conversation c;
  if (!m.tokenizer.has_value()) {
    c.turn1 = RandomTokens(document_tokens, vocab, 1);
    for (uint32_t t : RandomTokens(40, vocab, 2)) c.turn1.push_back(t);
    c.turn2 = c.turn1;
    for (uint32_t t : RandomTokens(60, vocab, 3)) c.turn2.push_back(t);
    return c;
  }
  const runtime::Tokenizer& tok = *m.tokenizer;
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> q1, tok.Encode(kTurn1Text, {.add_bos = false}));
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> q2, tok.Encode(kTurn2Text, {.add_bos = false}));
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> para, tok.Encode(kDocumentText, {.add_bos = false}));
  const size_t seq_len = m.model->config().seq_len;
  const size_t extra = q1.size() + q2.size() + kContinuationTokens + 1;
  if (seq_len > extra) {
    // At least one chunk, so that there is something to cache even for a short seq_len.
    document_tokens = std::max<size_t>(kBlockTokens, std::min(document_tokens, seq_len - extra));
  }
  c.turn1 = {tok.bos_id()};
  while (c.turn1.size() < document_tokens) {
    const size_t n = std::min(para.size(), document_tokens - c.turn1.size());
    c.turn1.insert(c.turn1.end(), para.begin(), para.begin() + static_cast<std::ptrdiff_t>(n));
  }
  c.turn1.insert(c.turn1.end(), q1.begin(), q1.end());
  c.turn2 = c.turn1;
  c.turn2.insert(c.turn2.end(), q2.begin(), q2.end());
  return c;
}

// Greedy decoding of `n` tokens after a prefill of `pos` tokens whose KV is in `kv` and whose
// last logits are `logits`.
Result<std::vector<uint32_t>> Continue(Model& model, runtime::KvBlockSource& kv, size_t pos,
                                       std::vector<float> logits, uint32_t n) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t token = runtime::ArgMax(logits);
    out.push_back(token);
    if (i + 1 == n) break;
    KV_RETURN_IF_ERROR(model.Forward(std::span<const uint32_t>(&token, 1),
                                     static_cast<uint32_t>(pos + i), kv,
                                     {.cancelled = Interrupted}, &logits));
  }
  return out;
}

double Ms(uint64_t us) { return static_cast<double>(us) / 1000.0; }

uint64_t NowUs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The forward options of a prefill: stops at Ctrl-C, and counts its tokens on `progress`
// (which it sizes to the call).
runtime::ForwardOptions Tracked(Progress* progress) {
  runtime::ForwardOptions o;
  o.cancelled = Interrupted;
  o.progress = [progress](uint32_t done, uint32_t total) {
    progress->SetTotal(total);
    progress->Update(done);
  };
  return o;
}

std::string TierList(const std::vector<TierKind>& tiers) {
  std::string out;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (i > 0) out += ",";
    out += TierKindName(tiers[i]);
  }
  return out.empty() ? "-" : out;
}

// Max |a - b| relative to max |a|.
float RelativeGap(const std::vector<float>& a, const std::vector<float>& b) {
  float gap = 0, scale = 1e-6f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    gap = std::max(gap, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(a[i]));
  }
  return a.size() == b.size() ? gap / scale : INFINITY;
}

class DemoCommand final : public Command {
 public:
  explicit DemoCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "demo", "Multi-turn prefix reuse through the tiers, with correctness checks")) {
    subcommand()->add_option("--model", model_path_,
                             "A llama2.c checkpoint or GGUF file (default: synthetic weights)");
    subcommand()->add_option("--tokenizer", tokenizer_path_, "Tokenizer of a llama2.c model");
    subcommand()->add_option("--dir", base_dir_,
                             "Where the temporary SSD directory goes (default: $TMPDIR or "
                             "/var/tmp)");
    subcommand()
        ->add_option("--document-tokens", document_tokens_, "Length of the shared document")
        ->check(WholeNumber(256, 65536));
    subcommand()->add_flag("--json", json_,
                           "Print one JSON object at the end (model, every turn's statistics and "
                           "checks, passed) instead of the step-by-step text");
  }

  int Run() override;

 private:
  // printf to stdout, unless --json.
  void Say(const char* format, ...) const __attribute__((format(printf, 2, 3)));

  Status RunDemo(const std::string& ssd_dir);
  // A full prefill of the prompt without any cache (and, with a tokenizer, kContinuationTokens
  // greedy tokens after it): the reference for the checks.
  struct ReferenceRun {
    std::vector<uint32_t> prompt;
    std::vector<float> logits;
    std::vector<uint32_t> continuation;
    uint64_t compute_us = 0;
    bool reused = false;  // Computed for an earlier turn with the same prompt.
  };
  // Turn 4 checks the same prompt as turn 2, so the last run is kept and reused (the demo's
  // time goes to real work, not to recomputing the same reference).
  Result<const ReferenceRun*> Reference(std::span<const uint32_t> prompt);
  // One turn of `tenant` (its namespace `ns`): printed, and added to turns_.
  Status Turn(const char* title, Engine& engine, const char* tenant, const Namespace& ns,
              std::span<const uint32_t> prompt, bool check, CachedPrefillStats* stats);
  // With a tokenizer: greedy continuations with and without the cache must be identical.
  Status CheckContinuation(std::span<const uint32_t> prompt, runtime::KvBlockSource& kv,
                           const std::vector<float>& logits);

  std::string model_path_, tokenizer_path_, base_dir_;
  size_t document_tokens_ = 1536;
  bool json_ = false;
  nlohmann::ordered_json report_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json turns_ = nlohmann::ordered_json::array();
  DemoModel model_;
  KvLayout layout_;
  std::optional<ReferenceRun> reference_;
};

void DemoCommand::Say(const char* format, ...) const {
  if (json_) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

Result<const DemoCommand::ReferenceRun*> DemoCommand::Reference(std::span<const uint32_t> prompt) {
  if (reference_.has_value() && std::equal(prompt.begin(), prompt.end(), reference_->prompt.begin(),
                                           reference_->prompt.end())) {
    reference_->reused = true;
    return &*reference_;
  }
  const uint64_t t0 = NowUs();
  ReferenceRun run;
  run.prompt.assign(prompt.begin(), prompt.end());
  KV_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryKvBlocks> kv,
                      InMemoryKvBlocks::Create(
                          layout_, static_cast<uint32_t>(prompt.size() + kContinuationTokens)));
  {
    Progress progress("demo reference (no cache)", prompt.size(), ProgressUnit::kCount, "tokens");
    KV_RETURN_IF_ERROR(model_.model->Forward(prompt, 0, *kv, Tracked(&progress), &run.logits));
  }
  if (model_.tokenizer.has_value()) {
    KV_ASSIGN_OR_RETURN(run.continuation, Continue(*model_.model, *kv, prompt.size(), run.logits,
                                                   kContinuationTokens));
  }
  run.compute_us = NowUs() - t0;
  reference_ = std::move(run);
  return &*reference_;
}

Status DemoCommand::CheckContinuation(std::span<const uint32_t> prompt, runtime::KvBlockSource& kv,
                                      const std::vector<float>& logits) {
  const runtime::Tokenizer& tok = *model_.tokenizer;
  KV_ASSIGN_OR_RETURN(std::vector<uint32_t> cached,
                      Continue(*model_.model, kv, prompt.size(), logits, kContinuationTokens));
  KV_ASSIGN_OR_RETURN(const ReferenceRun* reference, Reference(prompt));
  const std::vector<uint32_t>& uncached = reference->continuation;
  Say("  continuation with the cache:    \"%s\"\n"
      "  continuation without the cache: \"%s\"\n",
      tok.Decode(cached).c_str(), tok.Decode(uncached).c_str());
  turns_.back()["continuation_cached"] = tok.Decode(cached);
  turns_.back()["continuation_uncached"] = tok.Decode(uncached);
  turns_.back()["continuation_identical"] = cached == uncached;
  if (cached != uncached) {
    return Status::Corruption("the greedy continuation differs with and without the cache");
  }
  Say("  check: the %u greedy tokens are identical\n", kContinuationTokens);
  return Status::Ok();
}

Status DemoCommand::Turn(const char* title, Engine& engine, const char* tenant,
                         const Namespace& ns, std::span<const uint32_t> prompt, bool check,
                         CachedPrefillStats* out) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryKvBlocks> kv,
                      InMemoryKvBlocks::Create(
                          layout_, static_cast<uint32_t>(prompt.size() + kContinuationTokens)));
  std::vector<float> logits;
  runtime::CachedPrefillOptions options;
  Progress progress("demo turn " + std::to_string(turns_.size() + 1), prompt.size(),
                    ProgressUnit::kCount, "tokens");
  options.forward = Tracked(&progress);
  KV_ASSIGN_OR_RETURN(
      CachedPrefillStats s,
      runtime::CachedPrefill(*model_.model, engine, ns, prompt, *kv, options, &logits));
  progress.Finish();
  // Time to first token: until the last prompt token's logits exist (lookup and load of the
  // cached chunks, then compute); storing the new chunks comes after.
  const double ttft_ms = Ms(s.lookup_us + s.compute_us);
  Say("%s\n  prompt %zu tokens: %zu from the cache (chunks in %s), %zu computed in "
      "%.0f ms, %zu new chunks stored; time to first token %.0f ms\n",
      title, s.prompt_tokens, s.cached_tokens, TierList(s.chunk_tiers).c_str(), s.computed_tokens,
      Ms(s.compute_us), s.stored_chunks, ttft_ms);
  if (s.cached_tokens > 0) {
    Say("  of which lookup %.1f ms, waiting for the load %.1f ms (the rest of the load ran "
        "behind the compute)\n",
        Ms(s.lookup_us), Ms(s.load_wait_us));
  }
  nlohmann::ordered_json turn = {{"turn", turns_.size() + 1},
                                 {"title", std::string(title).substr(title[0] == '\n' ? 1 : 0)},
                                 {"tenant", tenant}};
  turn.update(PrefillJson(s));
  turn["compute_ms"] = Ms(s.compute_us);
  turn["ttft_ms"] = ttft_ms;
  turn["lookup_ms"] = Ms(s.lookup_us);
  turn["load_wait_ms"] = Ms(s.load_wait_us);
  turn["stored_chunks"] = s.stored_chunks;
  turns_.push_back(std::move(turn));
  if (check) {
    KV_ASSIGN_OR_RETURN(const ReferenceRun* reference, Reference(prompt));
    const float gap = RelativeGap(reference->logits, logits);
    Say("  check: logits match a full recomputation without the cache (%.0f ms%s) within "
        "%.1e (relative gap %.1e)\n",
        Ms(reference->compute_us), reference->reused ? ", done for turn 2" : "",
        double(kLogitsTolerance), double(gap));
    turns_.back()["reference_ms"] = Ms(reference->compute_us);
    turns_.back()["reference_reused"] = reference->reused;
    turns_.back()["logits_relative_gap"] = gap;
    turns_.back()["logits_tolerance"] = kLogitsTolerance;
    if (!(gap <= kLogitsTolerance)) return Status::Corruption("logits differ from the reference");
    if (model_.tokenizer.has_value()) KV_RETURN_IF_ERROR(CheckContinuation(prompt, *kv, logits));
  }
  *out = s;
  return Status::Ok();
}

Status DemoCommand::RunDemo(const std::string& ssd_dir) {
  KV_ASSIGN_OR_RETURN(model_, MakeModel(model_path_, tokenizer_path_));
  const runtime::ModelConfig& config = model_.model->config();
  layout_ = config.KvLayoutFor(kBlockTokens);
  Say("model: %s\nKV layout: %s, %.0f KiB per block\n", model_.description.c_str(),
      layout_.ToString().c_str(), double(layout_.BlockBytes()) / 1024.0);
  report_["model"] = model_.description;
  report_["kv_layout"] = layout_.ToString();
  report_["block_bytes"] = layout_.BlockBytes();
  report_["turns"] = nullptr;  // Filled at the end; the key keeps its place.
  StderrLogger logger(CliLogLevel());
  KV_ASSIGN_OR_RETURN(const Conversation conversation, MakeConversation(model_, document_tokens_));
  const std::vector<uint32_t>& turn1 = conversation.turn1;
  const std::vector<uint32_t>& turn2 = conversation.turn2;
  // Another tenant sends the start of the same document: its first chunks would hit if keys did
  // not carry the salt (two chunks show it as well as the whole document, at a fraction of the
  // compute).
  const std::span<const uint32_t> bob_prompt =
      std::span(turn1).first(std::min<size_t>(turn1.size(), 2 * kBlockTokens));
  CachedPrefillStats s1, s2, s3, s4;
  const uint64_t document_blocks = uint64_t{turn2.size() / kBlockTokens} * layout_.layers;
  {
    KV_ASSIGN_OR_RETURN(
        std::unique_ptr<Engine> engine,
        Engine::Open(MakeEngineOptions(layout_, ssd_dir, document_blocks, &logger)));
    KV_ASSIGN_OR_RETURN(Namespace alice, engine->MakeNamespace("tenant-alice"));
    KV_ASSIGN_OR_RETURN(Namespace bob, engine->MakeNamespace("tenant-bob"));
    KV_RETURN_IF_ERROR(Turn("\n[1] turn 1: document + question", *engine, "tenant-alice", alice,
                            turn1, false, &s1));
    if (!s1.store_status.ok()) {
      return s1.store_status.WithContext("turn 1 could not store the document");
    }
    KV_RETURN_IF_ERROR(Turn("\n[2] turn 2: same document, earlier turn, new question", *engine,
                            "tenant-alice", alice, turn2, true, &s2));
    if (s2.cached_tokens == 0) return Status::Corruption("turn 2 found nothing in the cache");
    KV_RETURN_IF_ERROR(Turn("\n[3] another tenant sends the same document", *engine, "tenant-bob",
                            bob, bob_prompt, false, &s3));
    if (s3.cached_tokens != 0) return Status::Corruption("a tenant saw another tenant's KV");
    KV_RETURN_IF_ERROR(engine->Flush());
  }
  Say("\n(engine closed; memory tiers are gone, the SSD directory stays)\n");
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Open(MakeEngineOptions(layout_, ssd_dir, document_blocks, &logger)));
  KV_ASSIGN_OR_RETURN(Namespace alice, engine->MakeNamespace("tenant-alice"));
  KV_RETURN_IF_ERROR(Turn("\n[4] after a restart: turn 2 again", *engine, "tenant-alice", alice,
                          turn2, true, &s4));
  if (s4.cached_tokens == 0) return Status::Corruption("the SSD tier lost the document");
  const double less = double(s1.compute_us) / double(std::max<uint64_t>(s2.compute_us, 1));
  Say("\nprefill compute: turn 1 %.0f ms for %zu tokens; turn 2 %.0f ms (%.1fx less) "
      "from memory; after restart %.0f ms from SSD\n",
      Ms(s1.compute_us), s1.computed_tokens, Ms(s2.compute_us), less, Ms(s4.compute_us));
  report_["turn1_over_turn2_compute"] = less;
  const auto ttft = [](const CachedPrefillStats& st) { return Ms(st.lookup_us + st.compute_us); };
  Say("time to first token: turn 1 %.0f ms (all computed); turn 2 %.0f ms (%.1fx less) from "
      "memory; after restart %.0f ms (%.1fx less) from SSD\n",
      ttft(s1), ttft(s2), ttft(s1) / std::max(ttft(s2), 1e-3), ttft(s4),
      ttft(s1) / std::max(ttft(s4), 1e-3));
  report_["turn1_over_turn2_ttft"] = ttft(s1) / std::max(ttft(s2), 1e-3);
  report_["turn1_over_restart_ttft"] = ttft(s1) / std::max(ttft(s4), 1e-3);
  return Status::Ok();
}

int DemoCommand::Run() {
  InstallInterruptHandler();
  Status s;
  {
    ScopedRemoval removal;  // Gone before the result is printed.
    Result<std::string> dir = MakeScratchTempDir(base_dir_, "kvtier-demo", &removal);
    if (!dir.ok()) return Fail(dir.status());
    s = RunDemo(*dir + "/ssd");
  }
  if (!s.ok() && Interrupted()) {
    PrintInterrupted("demo", "its temporary SSD directory was removed");
    return kExitInterrupted;
  }
  if (json_) {
    report_["turns"] = turns_;
    report_["passed"] = s.ok();
    report_["error"] = s.ok() ? "" : s.ToString();
    std::printf("%s\n", JsonText(report_, 1).c_str());
  }
  if (!s.ok()) return Fail(s);
  Say("demo passed\n");
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> MakeDemoCommand(CLI::App* app) {
  return std::make_unique<DemoCommand>(app);
}

}  // namespace kvtier::cli
