// `kvtier bench quality`: see bench_model_quality.h.
#include "bench_model_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "codecs/codec.h"
#include "codecs/precision_ladder.h"
#include "env/dir_trust.h"
#include "flags.h"
#include "input_file.h"
#include "interrupt.h"
#include "json_output.h"
#include "kv_quality.h"
#include "progress.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"

namespace kvtier::cli {
namespace {

using codecs::CodecParams;

// Tokens per KV block: the runtime's blocks are small for this model (32 channels), so 64 tokens
// make blocks of 4 KiB, as `bench codec` uses for the same model.
constexpr uint32_t kBlockTokens = 64;
constexpr uint64_t kTextBytesMax = uint64_t{16} << 20;
constexpr const char* kSharedCheckpointFile = "stories260K.bin";
constexpr const char* kSharedTokenizerFile = "tok512.bin";
// The targets that define "99.9 % precision" (docs/codecs.md).
constexpr double kTop1AgreementMin = 0.999;
constexpr double kPerplexityChangeMax = 0.001;

// Simple stories of the kind the small model was trained on, written for this benchmark.
constexpr const char* kBuiltInText =
    "Once upon a time, there was a little girl named Mia. She loved to play in the park near "
    "her house. One day, she saw a big red ball under a tree. She ran to the ball and picked it "
    "up. A boy named Sam came and said, \"That is my ball!\" Mia smiled and gave the ball back "
    "to Sam. Sam was happy and asked Mia to play with him. They kicked the ball and laughed all "
    "day. When the sun went down, Mia went home and told her mom about her new friend.\n"
    "Tom was a small dog who lived on a farm. Every morning he woke up early and ran to see the "
    "cows. The cows were big and slow, but they were kind to Tom. One day it began to rain. Tom "
    "was cold and wet, so he hid in the barn. In the barn he found a little cat. The cat was "
    "scared of the rain too. Tom sat next to the cat to keep her warm. When the rain stopped, "
    "they went outside and played in the mud together.\n"
    "Lily had a blue box full of toys. She liked to share her toys with her brother Ben. One day "
    "Ben wanted the toy car, but Lily wanted it too. They both pulled the car and it broke. Lily "
    "was sad and Ben began to cry. Their dad came and saw the broken car. He said, \"Let us fix "
    "it together.\" They found some glue and fixed the car. Then Lily and Ben took turns and "
    "played with the car all afternoon.\n"
    "There was a tall tree in the garden. A bird made a nest at the top of the tree. The bird "
    "had three small eggs in the nest. Every day the bird sat on the eggs to keep them warm. One "
    "sunny morning the eggs began to crack. Three baby birds came out and opened their mouths. "
    "The mother bird flew away to find food. She came back with worms, and the baby birds ate "
    "them all. Soon the baby birds grew big and learned to fly.\n"
    "Anna wanted to bake a cake for her grandma. She asked her mom to help her. They put flour, "
    "eggs and milk in a big bowl. Anna mixed it with a spoon. Then they put the cake in the hot "
    "oven. The kitchen smelled very good. When the cake was ready, Anna put pink frosting on it. "
    "She brought the cake to her grandma. Grandma hugged Anna and said it was the best cake in "
    "the world. They ate the cake and drank warm milk.\n"
    "Max found a shiny stone by the river. He thought it was magic. He put the stone in his "
    "pocket and walked home. On the way he met a sad frog. The frog had lost his way home. Max "
    "held the stone and wished to help the frog. Then he saw a path of little flowers. The frog "
    "followed the flowers and found his pond. The frog said thank you, and Max went home with a "
    "big smile on his face.\n";

struct NamedCodec {
  std::string name;
  // One codec for every block, or the ladder's choice by age (short ladder: see MakeCodecs).
  std::optional<CodecParams> params;
  std::optional<codecs::PrecisionLadder> ladder;
  // --per-layer: the codec on this layer only, every other layer's blocks exact.
  std::optional<uint32_t> only_layer;
};

// One codec as --codecs names it: name[@group][+zstd] (a group size other than the default, and
// a zstd stage at level 1).
Result<CodecParams> ParseNamedCodec(const std::string& name) {
  std::string base = name;
  const bool zstd = base.size() > 5 && base.ends_with("+zstd");
  if (zstd) base.resize(base.size() - 5);
  uint32_t group = 0;
  if (const size_t at = base.find('@'); at != std::string::npos) {
    const std::string digits = base.substr(at + 1);
    if (digits.empty() || digits.size() > 4 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("'" + name + "': the group after @ is a number");
    }
    group = static_cast<uint32_t>(std::stoul(digits));
    base.resize(at);
  }
  return codecs::ParseCodecParams(base, zstd ? 1 : 0, group);
}

// The layers of --ladder-finer-layers ("4" or "3,4"; empty: none).
Result<std::vector<uint32_t>> ParseLayerList(const std::string& text) {
  std::vector<uint32_t> out;
  std::stringstream in(text);
  std::string item;
  while (!text.empty() && std::getline(in, item, ',')) {
    if (item.empty() || item.size() > 4 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("--ladder-finer-layers: '" + item +
                                     "' is not a layer number (a comma list, as 3,4)");
    }
    out.push_back(static_cast<uint32_t>(std::stoul(item)));
  }
  return out;
}

// The ladder's options for `name` ("ladder", "ladder-short" or "ladder-flat") with the rungs of
// --ladder-int8 and --ladder-int4 (empty: the ladder's defaults) and --ladder-finer-layers.
Result<codecs::PrecisionLadderOptions> LadderOptions(const std::string& name,
                                                     const LadderFlags& flags) {
  codecs::PrecisionLadderOptions o;        // At rest: the SSD and Redis tiers' rungs.
  o.lossy_from_tier = codecs::Tier::kSsd;  // As the engine's at rest, so ecq rungs are taken.
  if (name == "ladder-short") {
    // Scaled to a short window: the sink and the newest block exact, then int8, then int4.
    o.recent_window_tokens = kBlockTokens;
    o.int4_age_tokens = 2 * kBlockTokens;
  } else if (name == "ladder-flat") {
    // Every block but the sink at the coarsest rung (a finer layer's at the middle one).
    o.recent_window_tokens = 0;
    o.int4_age_tokens = 0;
  }
  const std::string& int8_rung = flags.int8_rung;
  const std::string& int4_rung = flags.int4_rung;
  KV_ASSIGN_OR_RETURN(o.finer_layers, ParseLayerList(flags.finer_layers));
  if (!int8_rung.empty()) {
    Result<CodecParams> p = ParseNamedCodec(int8_rung);
    if (!p.ok()) return p.status().WithContext("--ladder-int8");
    o.int8 = *p;
  }
  if (!int4_rung.empty()) {
    Result<CodecParams> p = ParseNamedCodec(int4_rung);
    if (!p.ok()) return p.status().WithContext("--ladder-int4");
    o.int4 = *p;
  }
  return o;
}

Result<std::vector<NamedCodec>> MakeCodecs(const std::string& list, const LadderFlags& flags) {
  std::vector<NamedCodec> out;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name == "ladder" || name == "ladder-short" || name == "ladder-flat") {
      KV_ASSIGN_OR_RETURN(const codecs::PrecisionLadderOptions o, LadderOptions(name, flags));
      Result<codecs::PrecisionLadder> ladder = codecs::PrecisionLadder::Create(o);
      if (!ladder.ok()) return ladder.status().WithContext(name);
      out.push_back({name, std::nullopt, *ladder});
      continue;
    }
    Result<CodecParams> p = ParseNamedCodec(name);
    if (!p.ok()) {
      return Status::InvalidArgument("--codecs: " + p.status().message() +
                                     "; each also name@group and name+zstd; or ladder, "
                                     "ladder-short, ladder-flat");
    }
    out.push_back({name, *p, std::nullopt});
  }
  if (out.empty()) return Status::InvalidArgument("--codecs: no codec named");
  return out;
}

// What a row accumulates over every window.
struct CodecResult {
  NextTokenAgreement agreement;
  uint64_t raw_bytes = 0, encoded_bytes = 0;
};

// The exact prefix KV of one window: [layer][chunk] blocks of FP16.
struct PrefixKv {
  std::vector<std::vector<uint16_t>> blocks;
};

class QualityRun {
 public:
  QualityRun(runtime::Model* model, const KvLayout& layout, uint32_t prefix, uint32_t cont)
      : model_(model), layout_(layout), prefix_(prefix), cont_(cont) {}

  // The window `seq` (prefix + continuation + the token after it) through every codec.
  Status Window(std::span<const uint32_t> seq, std::span<NamedCodec> named,
                std::span<CodecResult> results, codecs::CodecContext* ctx) {
    KV_ASSIGN_OR_RETURN(const PrefixKv exact, Prefix(seq.first(prefix_)));
    std::vector<float> reference;
    KV_RETURN_IF_ERROR(Continue(exact, seq, &reference));
    const uint32_t vocab = model_->config().vocab_size;
    for (size_t c = 0; c < named.size(); ++c) {
      if (Interrupted()) return Status::Aborted("interrupted");
      KV_ASSIGN_OR_RETURN(const PrefixKv decoded, RoundTrip(exact, named[c], &results[c], ctx));
      std::vector<float> logits;
      KV_RETURN_IF_ERROR(Continue(decoded, seq, &logits));
      for (uint32_t row = 0; row < cont_; ++row) {
        results[c].agreement.Add(std::span(reference).subspan(size_t{row} * vocab, vocab),
                                 std::span(logits).subspan(size_t{row} * vocab, vocab),
                                 seq[prefix_ + row + 1]);
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t chunks() const { return prefix_ / kBlockTokens; }

  Result<PrefixKv> Prefix(std::span<const uint32_t> tokens) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InMemoryKvBlocks> kv,
                        runtime::InMemoryKvBlocks::Create(layout_, prefix_));
    std::vector<float> none;
    KV_RETURN_IF_ERROR(
        model_->Forward(tokens, 0, *kv, {.logits = runtime::LogitsMode::kNone}, &none));
    PrefixKv out;
    for (uint32_t l = 0; l < layout_.layers; ++l) {
      for (uint32_t c = 0; c < chunks(); ++c) {
        KV_ASSIGN_OR_RETURN(std::span<const uint16_t> b, kv->Block(l, c));
        out.blocks.emplace_back(b.begin(), b.end());
      }
    }
    return out;
  }

  // The continuation teacher-forced over `prefix`: one row of logits per continuation token.
  Status Continue(const PrefixKv& prefix, std::span<const uint32_t> seq,
                  std::vector<float>* logits) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InMemoryKvBlocks> kv,
                        runtime::InMemoryKvBlocks::Create(layout_, prefix_ + cont_));
    for (uint32_t l = 0; l < layout_.layers; ++l) {
      for (uint32_t c = 0; c < chunks(); ++c) {
        KV_ASSIGN_OR_RETURN(std::span<uint16_t> b, kv->MutableBlock(l, c));
        const std::vector<uint16_t>& src = prefix.blocks[size_t{l} * chunks() + c];
        std::copy(src.begin(), src.end(), b.begin());
      }
    }
    return model_->Forward(seq.subspan(prefix_, cont_), prefix_, *kv,
                           {.logits = runtime::LogitsMode::kAll}, logits);
  }

  Result<PrefixKv> RoundTrip(const PrefixKv& exact, const NamedCodec& codec, CodecResult* result,
                             codecs::CodecContext* ctx) {
    const codecs::BlockGeometry g{.tokens = kBlockTokens,
                                  .kv_heads = layout_.kv_heads,
                                  .head_dim = layout_.head_dim,
                                  .dtype = DType::kF16};
    KV_ASSIGN_OR_RETURN(const size_t max_encoded, codecs::MaxEncodedSizeAnyCodec(g));
    std::vector<std::byte> encoded(max_encoded);
    PrefixKv out = exact;
    for (size_t b = 0; b < exact.blocks.size(); ++b) {
      const uint32_t chunk = static_cast<uint32_t>(b % chunks());
      if (codec.only_layer.has_value() && b / chunks() != *codec.only_layer) continue;
      const uint64_t age = uint64_t{chunks() - 1 - chunk} * kBlockTokens;
      const CodecParams params =
          codec.params.has_value() ? *codec.params
                                   : codec.ladder->Choose(codecs::Tier::kSsd, age,
                                                          chunk == 0 ? codecs::ChunkKind::kSink
                                                                     : codecs::ChunkKind::kRegular,
                                                          static_cast<uint32_t>(b / chunks()));
      KV_ASSIGN_OR_RETURN(
          const size_t n,
          codecs::EncodeBlock(params, g, std::as_bytes(std::span(exact.blocks[b])), encoded, ctx));
      KV_RETURN_IF_ERROR(codecs::DecodeBlock(std::span<const std::byte>(encoded).first(n), g,
                                             std::as_writable_bytes(std::span(out.blocks[b])),
                                             ctx));
      result->raw_bytes += g.raw_bytes();
      result->encoded_bytes += n;
    }
    return out;
  }

  runtime::Model* model_;
  KvLayout layout_;
  uint32_t prefix_, cont_;
};

// Precision is closeness: a perplexity that drops by more than 0.1 % misses it as one that rises.
bool MeetsTargets(const NextTokenAgreement& a) {
  return a.Top1Agreement() >= kTop1AgreementMin &&
         std::fabs(a.PerplexityChange()) <= kPerplexityChangeMax;
}

void Print(const std::string& model, size_t windows, std::span<const NamedCodec> named,
           std::span<const CodecResult> results, bool json) {
  if (json) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (size_t i = 0; i < named.size(); ++i) {
      const CodecResult& r = results[i];
      const NextTokenAgreement& a = r.agreement;
      nlohmann::ordered_json row;
      row["codec"] = named[i].name;
      if (named[i].only_layer.has_value()) row["layer"] = *named[i].only_layer;
      if (named[i].ladder.has_value() && !named[i].ladder->options().finer_layers.empty()) {
        row["finer_layers"] = named[i].ladder->options().finer_layers;
      }
      row["model"] = model;
      row["windows"] = windows;
      row["rows"] = a.rows();
      row["ratio"] = double(r.raw_bytes) / double(std::max<uint64_t>(r.encoded_bytes, 1));
      row["kl_mean"] = a.KlMean();
      row["kl_max"] = a.KlMax();
      row["top1_agreement"] = a.Top1Agreement();
      row["top1_flips"] = a.Flips();
      row["near_ties"] = a.NearTies();
      row["top1_flips_beyond_near_ties"] = a.FlipsBeyondNearTies();
      row["flip_gap_max"] = a.FlipGapMax();
      row["perplexity_exact"] = a.PerplexityExact();
      row["perplexity"] = a.Perplexity();
      row["perplexity_change"] = a.PerplexityChange();
      row["meets_99_9"] = MeetsTargets(a);
      rows.push_back(std::move(row));
    }
    std::printf("%s\n", JsonText(rows, 1).c_str());
    return;
  }
  std::printf("model %s, %zu windows, %zu predictions per codec\n", model.c_str(), windows,
              results.empty() ? size_t{0} : results[0].agreement.rows());
  std::printf("%-14s %7s %11s %11s %9s %10s %12s %s\n", "codec", "ratio", "KL mean", "KL max",
              "top-1", "ppl", "ppl change", "99.9 %");
  for (size_t i = 0; i < named.size(); ++i) {
    const CodecResult& r = results[i];
    const NextTokenAgreement& a = r.agreement;
    std::printf("%-14s %7.3f %11.3e %11.3e %8.3f%% %10.4f %11.4f%% %s\n", named[i].name.c_str(),
                double(r.raw_bytes) / double(std::max<uint64_t>(r.encoded_bytes, 1)), a.KlMean(),
                a.KlMax(), 100 * a.Top1Agreement(), a.Perplexity(), 100 * a.PerplexityChange(),
                MeetsTargets(a) ? "yes" : "no");
  }
}

}  // namespace

BenchQuality::BenchQuality(CLI::App* bench)
    : app_(bench->add_subcommand(
          "quality",
          "What each codec does to the model's next-token predictions: KL, top-1 "
          "agreement and perplexity over decoded against exact KV")) {
  app_->add_option("--model", model_,
                   "llama2.c/GGUF model (default: shared/models/stories260K.gguf beside the "
                   "repository)");
  app_->add_option("--tokenizer", tokenizer_, "llama2.c tokenizer for --model");
  app_->add_option("--text-file", text_file_, "The text (default: built-in short stories)");
  app_->add_option("--codecs", codecs_text_,
                   "Comma list of identity, shuffle-zstd, int8, int4, int8-rot, int4-rot, k8v4, "
                   "k8v4-rot (each also name@GROUP for another group size and name+zstd), "
                   "ladder (the default precision ladder at rest), ladder-short (the ladder "
                   "scaled to the window), ladder-flat (every block but the sink at the "
                   "coarsest rung)")
      ->capture_default_str();
  app_->add_option("--ladder-int8", ladder_.int8_rung,
                   "The ladders' middle rung as --codecs names a codec (default: int8)");
  app_->add_option("--ladder-int4", ladder_.int4_rung,
                   "The ladders' coarsest rung as --codecs names a codec (default: int4)");
  app_->add_option("--ladder-finer-layers", ladder_.finer_layers,
                   "Comma list of layers whose blocks the ladders keep one rung finer (the "
                   "sensitive ones --per-layer finds)");
  app_->add_option("--prefix-tokens", prefix_tokens_,
                   "Tokens whose KV goes through the codec, a multiple of 64 (default 256)")
      ->check(WholeNumber(kBlockTokens, 1u << 20));
  app_->add_option("--continue-tokens", continue_tokens_,
                   "Teacher-forced tokens after the prefix, each one prediction (default 128)")
      ->check(WholeNumber(1, 1u << 20));
  app_->add_option("--stride", stride_, "Tokens between windows of the text (default 64)")
      ->check(WholeNumber(1, 1u << 20));
  app_->add_option("--windows-max", windows_max_, "At most this many windows (default 64)")
      ->check(WholeNumber(1, 1u << 16));
  app_->add_flag("--per-layer", per_layer_,
                 "Also one row per layer for each codec (not the ladders): the codec on that "
                 "layer's blocks only, the other layers exact; its name is codec/LAYER");
  app_->add_flag("--json", json_, "Print one JSON array of rows");
  app_->add_option("--windows-json", windows_json_,
                   "Also write the windows' token ids to this file as JSON, so that another "
                   "engine (bench/vllm_quality.py) judges the same predictions");
}

// Each window's tokens (BOS, the prefix, the continuation and the token after it): the
// predictions are those of positions prefix_tokens .. prefix_tokens + continue_tokens - 1.
Status BenchQuality::WriteWindows(const std::vector<std::vector<uint32_t>>& seqs) const {
  nlohmann::ordered_json out;
  out["prefix_tokens"] = prefix_tokens_;
  out["continue_tokens"] = continue_tokens_;
  out["windows"] = seqs;
  return ReplaceRegularFile("--windows-json", windows_json_, JsonText(out, -1) + "\n", 0644);
}

// The text's windows: BOS, then `window` - 1 tokens of the text, --stride apart, at most
// --windows-max of them.
Result<std::vector<std::vector<uint32_t>>> BenchQuality::Windows(
    const runtime::Tokenizer& tokenizer, uint64_t window) const {
  std::string text = kBuiltInText;
  if (!text_file_.empty()) {
    KV_RETURN_IF_ERROR(
        ReadInputFile(text_file_, "--text-file " + text_file_, kTextBytesMax, &text));
  }
  KV_ASSIGN_OR_RETURN(const std::vector<uint32_t> stream,
                      tokenizer.Encode(text, {.add_bos = false}));
  // Each window starts with BOS, as a sequence does: BOS + prefix - 1 + continuation + next.
  if (stream.size() + 1 < window) {
    return Status::InvalidArgument("the text holds " + std::to_string(stream.size()) +
                                   " tokens; a window needs " + std::to_string(window - 1));
  }
  const size_t windows = std::min<size_t>(windows_max_, (stream.size() + 1 - window) / stride_ + 1);
  std::vector<std::vector<uint32_t>> seqs(windows);
  for (size_t w = 0; w < windows; ++w) {
    seqs[w] = {tokenizer.bos_id()};
    const auto first = stream.begin() + static_cast<std::ptrdiff_t>(w * stride_);
    seqs[w].insert(seqs[w].end(), first, first + static_cast<std::ptrdiff_t>(window - 1));
  }
  return seqs;
}

Status BenchQuality::Run() {
  InstallInterruptHandler();
  if (prefix_tokens_ % kBlockTokens != 0) {
    return Status::InvalidArgument("--prefix-tokens: a multiple of 64 (whole KV blocks)");
  }
  KV_ASSIGN_OR_RETURN(std::vector<NamedCodec> named, MakeCodecs(codecs_text_, ladder_));
  std::string model_path = model_, tokenizer_path = tokenizer_;
  if (model_path.empty()) {
    // The llama2.c checkpoint and its tokenizer: its context is 512 tokens (the GGUF
    // conversion declares 128, too short for the default window).
    std::optional<std::string> found = FindSharedModel(kSharedCheckpointFile);
    std::optional<std::string> tokens = FindSharedModel(kSharedTokenizerFile);
    if (!found.has_value() || !tokens.has_value()) {
      return Status::NotFound(std::string("no model: shared/models/") + kSharedCheckpointFile +
                              " and " + kSharedTokenizerFile +
                              " are not beside the repository; give --model FILE");
    }
    model_path = *found;
    tokenizer_path = *tokens;
  }
  KV_ASSIGN_OR_RETURN(runtime::LoadedModel loaded, runtime::LoadModel(model_path, tokenizer_path));
  if (!loaded.tokenizer.has_value()) {
    return Status::InvalidArgument("--model " + model_path +
                                   " has no vocabulary: give its --tokenizer");
  }
  const runtime::Tokenizer tokenizer = std::move(*loaded.tokenizer);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Model> model,
                      runtime::Model::Create(std::move(loaded.weights)));
  const uint64_t window = uint64_t{prefix_tokens_} + continue_tokens_ + 1;
  if (window > model->config().seq_len) {
    return Status::InvalidArgument(
        "--prefix-tokens + --continue-tokens + 1 = " + std::to_string(window) +
        " exceeds the model's context of " + std::to_string(model->config().seq_len));
  }
  KV_ASSIGN_OR_RETURN(const std::vector<std::vector<uint32_t>> seqs, Windows(tokenizer, window));
  const size_t windows = seqs.size();
  const KvLayout layout = model->config().KvLayoutFor(kBlockTokens);
  KV_RETURN_IF_ERROR(layout.Validate());
  if (per_layer_) {
    // Which layer is sensitive to a codec: the ladder's schedule per layer is chosen from this.
    const size_t listed = named.size();
    for (size_t i = 0; i < listed; ++i) {
      if (!named[i].params.has_value()) continue;
      for (uint32_t l = 0; l < layout.layers; ++l) {
        NamedCodec one = named[i];
        one.name += "/" + std::to_string(l);
        one.only_layer = l;
        named.push_back(std::move(one));
      }
    }
  }
  if (!windows_json_.empty()) KV_RETURN_IF_ERROR(WriteWindows(seqs));
  KV_ASSIGN_OR_RETURN(codecs::CodecContext ctx, codecs::CodecContext::Create());
  QualityRun run(model.get(), layout, prefix_tokens_, continue_tokens_);
  std::vector<CodecResult> results(named.size());
  Progress progress("bench quality", windows, ProgressUnit::kCount, "windows");
  for (const std::vector<uint32_t>& seq : seqs) {
    KV_RETURN_IF_ERROR(run.Window(seq, named, results, &ctx));
    progress.Add(1);
  }
  progress.Finish();
  Print(std::filesystem::path(model_path).filename().string(), windows, named, results, json_);
  return Status::Ok();
}

}  // namespace kvtier::cli
