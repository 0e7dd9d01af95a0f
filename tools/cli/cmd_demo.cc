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
// Exit status 0 means every check held.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "command.h"
#include "engine/engine.h"
#include "runtime/cached_prefill.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"
#include "runtime/synthetic.h"

namespace kvtier::cli {
namespace {

using runtime::CachedPrefillStats;
using runtime::InMemoryKvBlocks;
using runtime::Model;

constexpr uint32_t kBlockTokens = 256;
constexpr float kLogitsTolerance = 1e-3f;  // Relative to the largest |logit|; KV is FP16 both ways.

struct DemoModel {
  std::unique_ptr<Model> model;
  std::string description;
};

Result<DemoModel> MakeModel(const std::string& model_path, const std::string& tokenizer_path) {
  DemoModel out;
  if (!model_path.empty()) {
    KV_ASSIGN_OR_RETURN(runtime::LoadedModel loaded,
                        runtime::LoadModel(model_path, tokenizer_path));
    out.description = model_path;
    KV_ASSIGN_OR_RETURN(out.model, Model::Create(std::move(loaded.weights)));
    return out;
  }
  KV_ASSIGN_OR_RETURN(runtime::ModelConfig config, runtime::SyntheticPreset("tinyllama-1.1b"));
  KV_ASSIGN_OR_RETURN(config, runtime::ShrinkConfig(config, {.layers = 4,
                                                             .dim = 512,
                                                             .hidden_dim = 1536,
                                                             .vocab_size = 4096}));
  KV_ASSIGN_OR_RETURN(runtime::ModelWeights weights, runtime::MakeSyntheticWeights(config, 7));
  out.description = "synthetic tinyllama-1.1b geometry (" + std::to_string(config.n_layers) +
                    " of 22 layers, " + std::to_string(config.n_kv_heads) + " KV heads x " +
                    std::to_string(config.head_dim) + ")";
  KV_ASSIGN_OR_RETURN(out.model, Model::Create(std::move(weights)));
  return out;
}

EngineOptions MakeEngineOptions(const KvLayout& layout, const std::string& ssd_dir,
                                Logger* logger) {
  const uint64_t block = layout.BlockBytes();
  EngineOptions o;
  o.layout = layout;
  o.model = {.name = "kvtier-demo"};
  o.device.capacity_bytes = 8 * block;  // A small device budget: blocks spill to host.
  o.host.capacity_bytes = 64 * block;
  o.ssd = SsdTierOptions{.dirs = {ssd_dir}, .capacity_bytes = 256 * kMiB,
                         .segment_bytes = 16 * kMiB, .sync = SsdSyncMode::kPeriodic};
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

double Ms(uint64_t us) { return static_cast<double>(us) / 1000.0; }

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
    subcommand()->add_option("--document-tokens", document_tokens_,
                             "Length of the shared document")
        ->check(CLI::Range(256, 65536));
  }

  int Run() override;

 private:
  Status RunDemo(const std::string& ssd_dir);
  // Full prefill without any cache: the reference for the logits checks.
  Result<std::vector<float>> Reference(std::span<const uint32_t> prompt);
  Status Turn(const char* title, Engine& engine, const Namespace& ns,
              std::span<const uint32_t> prompt, bool check, CachedPrefillStats* stats);

  std::string model_path_, tokenizer_path_, base_dir_;
  size_t document_tokens_ = 1536;
  DemoModel model_;
  KvLayout layout_;
};

Result<std::vector<float>> DemoCommand::Reference(std::span<const uint32_t> prompt) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryKvBlocks> kv,
                      InMemoryKvBlocks::Create(layout_, static_cast<uint32_t>(prompt.size())));
  std::vector<float> logits;
  KV_RETURN_IF_ERROR(model_.model->Forward(prompt, 0, *kv, {}, &logits));
  return logits;
}

Status DemoCommand::Turn(const char* title, Engine& engine, const Namespace& ns,
                         std::span<const uint32_t> prompt, bool check, CachedPrefillStats* out) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryKvBlocks> kv,
                      InMemoryKvBlocks::Create(layout_, static_cast<uint32_t>(prompt.size())));
  std::vector<float> logits;
  KV_ASSIGN_OR_RETURN(CachedPrefillStats s,
                      runtime::CachedPrefill(*model_.model, engine, ns, prompt, *kv, {}, &logits));
  std::printf("%s\n  prompt %zu tokens: %zu from the cache (chunks in %s), %zu computed in "
              "%.0f ms, %zu new chunks stored\n",
              title, s.prompt_tokens, s.cached_tokens, TierList(s.chunk_tiers).c_str(),
              s.computed_tokens, Ms(s.compute_us), s.stored_chunks);
  if (check) {
    const uint64_t t0 = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count());
    KV_ASSIGN_OR_RETURN(std::vector<float> want, Reference(prompt));
    const uint64_t t1 = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count());
    const float gap = RelativeGap(want, logits);
    std::printf("  check: logits match a full recomputation without the cache (%.0f ms) within "
                "%.1e (relative gap %.1e)\n",
                Ms(t1 - t0), double(kLogitsTolerance), double(gap));
    if (!(gap <= kLogitsTolerance)) return Status::Corruption("logits differ from the reference");
  }
  *out = s;
  return Status::Ok();
}

Status DemoCommand::RunDemo(const std::string& ssd_dir) {
  KV_ASSIGN_OR_RETURN(model_, MakeModel(model_path_, tokenizer_path_));
  const runtime::ModelConfig& config = model_.model->config();
  layout_ = config.KvLayoutFor(kBlockTokens);
  std::printf("model: %s\nKV layout: %s, %.0f KiB per block\n", model_.description.c_str(),
              layout_.ToString().c_str(), double(layout_.BlockBytes()) / 1024.0);
  StderrLogger logger(LogLevel::kWarn);
  const std::vector<uint32_t> doc = RandomTokens(document_tokens_, config.vocab_size, 1);
  std::vector<uint32_t> turn1 = doc, turn2, other;
  for (uint32_t t : RandomTokens(40, config.vocab_size, 2)) turn1.push_back(t);
  turn2 = turn1;
  for (uint32_t t : RandomTokens(60, config.vocab_size, 3)) turn2.push_back(t);
  CachedPrefillStats s1, s2, s3, s4;
  {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        Engine::Open(MakeEngineOptions(layout_, ssd_dir, &logger)));
    KV_ASSIGN_OR_RETURN(Namespace alice, engine->MakeNamespace("tenant-alice"));
    KV_ASSIGN_OR_RETURN(Namespace bob, engine->MakeNamespace("tenant-bob"));
    KV_RETURN_IF_ERROR(Turn("\n[1] turn 1: document + question", *engine, alice, turn1, false, &s1));
    KV_RETURN_IF_ERROR(Turn("\n[2] turn 2: same document, earlier turn, new question", *engine,
                            alice, turn2, true, &s2));
    if (s2.cached_tokens == 0) return Status::Corruption("turn 2 found nothing in the cache");
    KV_RETURN_IF_ERROR(Turn("\n[3] another tenant sends the same tokens", *engine, bob, turn1,
                            false, &s3));
    if (s3.cached_tokens != 0) return Status::Corruption("a tenant saw another tenant's KV");
    KV_RETURN_IF_ERROR(engine->Flush());
  }
  std::printf("\n(engine closed; memory tiers are gone, the SSD directory stays)\n");
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Open(MakeEngineOptions(layout_, ssd_dir, &logger)));
  KV_ASSIGN_OR_RETURN(Namespace alice, engine->MakeNamespace("tenant-alice"));
  KV_RETURN_IF_ERROR(Turn("\n[4] after a restart: turn 2 again", *engine, alice, turn2, true, &s4));
  if (s4.cached_tokens == 0) return Status::Corruption("the SSD tier lost the document");
  std::printf("\nprefill compute: turn 1 %.0f ms for %zu tokens; turn 2 %.0f ms (%.1fx less) "
              "from memory; after restart %.0f ms from SSD\n",
              Ms(s1.compute_us), s1.computed_tokens, Ms(s2.compute_us),
              double(s1.compute_us) / double(std::max<uint64_t>(s2.compute_us, 1)),
              Ms(s4.compute_us));
  return Status::Ok();
}

int DemoCommand::Run() {
  if (base_dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base_dir_ = (tmp != nullptr && *tmp != '\0') ? tmp : "/var/tmp";
  }
  std::string dir = base_dir_ + "/kvtier-demo-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return Fail(Status::FromErrno(errno, "mkdtemp " + dir));
  const Status s = RunDemo(dir + "/ssd");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!s.ok()) return Fail(s);
  std::printf("demo passed\n");
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> MakeDemoCommand(CLI::App* app) {
  return std::make_unique<DemoCommand>(app);
}

}  // namespace kvtier::cli
