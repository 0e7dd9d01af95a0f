#include "bench/decode_bench.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "core/assert.h"
#include "engine/offload_sequence.h"
#include "env/env.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"
#include "runtime/offloaded_kv.h"
#include "runtime/quest.h"
#include "runtime/synthetic.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tier_adapter.h"

namespace kvtier::runtime {
namespace {

constexpr std::string_view kSyntheticPrefix = "synthetic:";

struct ConfigName {
  DecodeConfig config;
  std::string_view name;
};
constexpr ConfigName kConfigNames[] = {
    {DecodeConfig::kResident, "resident"}, {DecodeConfig::kResidentTopk, "resident-topk"},
    {DecodeConfig::kOffload, "offload"},   {DecodeConfig::kLadder, "ladder"},
    {DecodeConfig::kTopk, "topk"},         {DecodeConfig::kReference, "reference"},
    {DecodeConfig::kLadderDequant, "ladder-dequant"},
};

bool IsLadder(DecodeConfig c) {
  return c == DecodeConfig::kLadder || c == DecodeConfig::kLadderDequant;
}
bool IsOffloaded(DecodeConfig c) {
  return c == DecodeConfig::kOffload || IsLadder(c) || c == DecodeConfig::kTopk;
}
bool IsTopk(DecodeConfig c) { return c == DecodeConfig::kTopk || c == DecodeConfig::kResidentTopk; }

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Peak RSS: reset (Linux >= 4.0: "5" to clear_refs) and read (VmHWM). Best effort: 0 = unknown.
// The heap is trimmed first, so that memory the previous configuration freed but the allocator
// kept does not count against the next one.
void ResetPeakRss() {
  malloc_trim(0);
  std::ofstream f("/proc/self/clear_refs");
  if (f) f << "5";
}
uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

// Records the attention output of each layer for the token being decoded.
class AttentionRecorder final : public AttentionProbe {
 public:
  explicit AttentionRecorder(const ModelConfig& c)
      : q_dim_(c.q_dim()), out_(size_t{c.n_layers} * c.q_dim()) {}
  void OnAttentionOutput(uint32_t layer, uint32_t /*pos*/, std::span<const float> out) override {
    std::copy(out.begin(), out.end(), out_.begin() + static_cast<std::ptrdiff_t>(layer * q_dim_));
  }
  const std::vector<float>& outputs() const { return out_; }

 private:
  size_t q_dim_;
  std::vector<float> out_;  // [layer][q_dim]
};

double Cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  if (aa == 0 && bb == 0) return 1.0;
  return ab / std::sqrt(aa * bb + 1e-300);
}

uint32_t Argmax(const std::vector<float>& v) {
  return static_cast<uint32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Forwards everything to `inner` and measures, for a synthetic context, the share of the
// attention mass that decode gives the chunks holding salient tokens (how concentrated the
// context's attention is; the full-attention reference runs through it).
class MassTap final : public ForwardingKvBlocks {
 public:
  MassTap(KvBlockSource* inner, const SyntheticKvContext* context)
      : ForwardingKvBlocks(inner), context_(context) {}
  void ObserveAttention(uint32_t layer, std::span<const uint32_t> chunks,
                        std::span<const float> mass) override {
    ForwardingKvBlocks::ObserveAttention(layer, chunks, mass);
    if (context_ == nullptr) return;
    const uint32_t bt = Layout().block_tokens;
    const std::span<const uint32_t> salient = context_->salient_positions(layer);
    double on = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto it = std::lower_bound(salient.begin(), salient.end(), chunks[i] * bt);
      if (it != salient.end() && *it < (chunks[i] + 1) * bt) on += mass[i];
    }
    sum_ += on;
    ++count_;
  }
  double salient_mass() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }

 private:
  const SyntheticKvContext* context_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What every configuration starts from: the context's blocks and the first decode input.
class Context {
 public:
  static Result<std::unique_ptr<Context>> Synthetic(const KvLayout& layout,
                                                    const SyntheticKvOptions& options) {
    KV_ASSIGN_OR_RETURN(SyntheticKvContext c, SyntheticKvContext::Create(layout, options));
    auto ctx = std::unique_ptr<Context>(new Context());
    ctx->synthetic_ = std::make_unique<SyntheticKvContext>(std::move(c));
    ctx->first_input_ = 1;
    return ctx;
  }
  // A real model's own KV: greedy generation from BOS over `tokens` positions.
  static Result<std::unique_ptr<Context>> Generated(Model& model, const KvLayout& layout,
                                                    uint32_t tokens,
                                                    const std::function<bool()>& cancelled) {
    auto ctx = std::unique_ptr<Context>(new Context());
    KV_ASSIGN_OR_RETURN(ctx->master_, InMemoryKvBlocks::Create(layout, tokens));
    std::vector<float> logits;
    uint32_t input = 1;
    for (uint32_t pos = 0; pos < tokens; ++pos) {
      if (cancelled && cancelled()) return Status::Aborted("decode bench: cancelled");
      KV_RETURN_IF_ERROR(model.Forward(std::span(&input, 1), pos, *ctx->master_, {}, &logits));
      input = Argmax(logits);
    }
    ctx->first_input_ = input;
    ctx->chunks_ = (tokens + layout.block_tokens - 1) / layout.block_tokens;
    return ctx;
  }

  const SyntheticKvContext* synthetic() const { return synthetic_.get(); }
  uint32_t first_input() const { return first_input_; }

  Status Fill(KvBlockSource& kv) const {
    if (synthetic_ != nullptr) return FillSyntheticContext(*synthetic_, kv);
    for (uint32_t c = 0; c < chunks_; ++c) {
      for (uint32_t layer = 0; layer < kv.Layout().layers; ++layer) {
        KV_ASSIGN_OR_RETURN(std::span<const uint16_t> src, master_->Block(layer, c));
        KV_ASSIGN_OR_RETURN(std::span<uint16_t> dst, kv.MutableBlock(layer, c));
        std::copy(src.begin(), src.end(), dst.begin());
      }
    }
    return Status::Ok();
  }

 private:
  Context() = default;
  std::unique_ptr<SyntheticKvContext> synthetic_;
  std::unique_ptr<InMemoryKvBlocks> master_;
  uint32_t chunks_ = 0;
  uint32_t first_input_ = 1;
};

// The run's progress in KV blocks (DecodeBenchOptions::progress_blocks) and its cancellation.
class Work {
 public:
  explicit Work(const DecodeBenchOptions& o) : o_(o) {}
  void SetTotal(uint64_t total) { total_ = total; }
  void Advance(uint64_t blocks, std::string_view phase) {
    done_ += blocks;
    if (o_.progress_blocks) o_.progress_blocks(done_, total_, phase);
  }
  Status CheckCancelled() const {
    if (o_.cancelled && o_.cancelled()) return Status::Aborted("decode bench: cancelled");
    return Status::Ok();
  }

 private:
  const DecodeBenchOptions& o_;
  uint64_t done_ = 0, total_ = 0;
};

// Forwards to `inner` while a context is filled, counting each block written as work done and
// refusing the next one (Aborted) once the run is cancelled.
class FillMeter final : public ForwardingKvBlocks {
 public:
  FillMeter(KvBlockSource* inner, Work* work, std::string phase)
      : ForwardingKvBlocks(inner), work_(work), phase_(std::move(phase)) {}
  Result<std::span<uint16_t>> MutableBlock(uint32_t layer, uint32_t chunk_index) override {
    KV_RETURN_IF_ERROR(work_->CheckCancelled());
    work_->Advance(1, phase_);
    return ForwardingKvBlocks::MutableBlock(layer, chunk_index);
  }

 private:
  Work* work_;
  std::string phase_;
};

Result<std::unique_ptr<Model>> BuildModel(const DecodeBenchOptions& o, bool* synthetic) {
  *synthetic = o.model.rfind(kSyntheticPrefix, 0) == 0;
  if (*synthetic) {
    KV_ASSIGN_OR_RETURN(ModelConfig preset,
                        SyntheticPreset(std::string_view(o.model).substr(kSyntheticPrefix.size())));
    const uint32_t layers = o.layers != 0 ? o.layers : kDecodeBenchLayersDefault;
    KV_ASSIGN_OR_RETURN(ModelConfig config, ShrinkConfig(preset, {.layers = layers,
                                                                  .dim = o.dim,
                                                                  .hidden_dim = o.hidden_dim,
                                                                  .vocab_size = o.vocab_size}));
    KV_ASSIGN_OR_RETURN(ModelWeights weights, MakeSyntheticWeights(config, o.seed));
    return Model::Create(std::move(weights));
  }
  KV_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(o.model, o.tokenizer));
  if (o.layers != 0 && o.layers != loaded.weights.config().n_layers) {
    return Status::InvalidArgument("--layers cuts synthetic models only; " + o.model + " has " +
                                   std::to_string(loaded.weights.config().n_layers) + " layers");
  }
  return Model::Create(std::move(loaded.weights));
}

QuestOptions Quest(const DecodeBenchOptions& o) {
  return {.top_k = o.top_k, .sink_chunks = o.sink_chunks, .recent_chunks = o.recent_chunks};
}

double Attended(const QuestStats& q) {
  return static_cast<double>(q.chunks_selected) /
         static_cast<double>(std::max<uint64_t>(1, q.chunks_considered));
}

// Tiers and sequence of one offloaded configuration; removes its SSD files when destroyed.
struct OffloadRig {
  std::unique_ptr<Env> env;
  std::unique_ptr<SsdTierAdapter> ssd;  // The SSD tier as the sequence sees it (tiers/tier.h).
  std::unique_ptr<DeviceTier> device;
  std::unique_ptr<HostTier> host;
  std::unique_ptr<OffloadedSequence> seq;
  std::unique_ptr<OffloadedKvBlocks> kv;
  std::string dir;

  ~OffloadRig() {
    kv.reset();
    seq.reset();
    if (ssd != nullptr) ssd->Close().IgnoreError();
    ssd.reset();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

struct Budget {
  uint32_t device_blocks = 0;
  uint32_t host_slots = 0;
};

std::optional<codecs::PrecisionLadderOptions> LadderOf(const DecodeBenchOptions& o,
                                                       DecodeConfig config) {
  if (!IsLadder(config)) return std::nullopt;
  return o.ladder;
}

// A host slot of the offloaded sequence over the (unsealed) SSD tier the bench opens:
// OffloadedSequence::HostSlotBytes before the tier is open.
uint32_t SsdHostSlot(const KvLayout& layout,
                     const std::optional<codecs::PrecisionLadderOptions>& ladder = {}) {
  return static_cast<uint32_t>(
      SsdTierAdapter::RecordBufferBytes(OffloadedSequence::PayloadBytesMax(layout, ladder), false));
}

uint32_t HostSlot(const DecodeBenchOptions& o, DecodeConfig config, const KvLayout& layout) {
  return SsdHostSlot(layout, LadderOf(o, config));
}

// Chunks of a layer at the end of the run: the context and every decoded token.
uint32_t FinalChunks(const DecodeBenchOptions& o, const KvLayout& layout) {
  const uint32_t bt = layout.block_tokens;
  return (o.context_tokens + o.warmup_tokens + o.tokens + bt - 1) / bt;
}

// Blocks one layer's AcquireLayer pins at the end of the run: every chunk (full attention), or
// the selection (top-k, sink, recent window) and the tail.
uint32_t WorkingSetBlocks(const DecodeBenchOptions& o, DecodeConfig config,
                          const KvLayout& layout) {
  const uint32_t chunks = FinalChunks(o, layout);
  if (config != DecodeConfig::kTopk) return chunks;
  return std::min(chunks, o.top_k + o.sink_chunks + o.recent_chunks);
}

Result<Budget> ComputeBudget(const DecodeBenchOptions& o, DecodeConfig config,
                             const KvLayout& layout) {
  const uint64_t block = layout.BlockBytes();
  const uint32_t bt = layout.block_tokens;
  const uint32_t context_chunks = (o.context_tokens + bt - 1) / bt;
  const uint64_t kv_blocks = uint64_t{layout.layers} * context_chunks;
  const uint64_t host_slot = HostSlot(o, config, layout);
  Budget b;
  uint64_t device_blocks = 0;
  if (o.device_budget_bytes != 0) {
    device_blocks = o.device_budget_bytes / block;
  } else if (config == DecodeConfig::kTopk) {
    // KV / 8, or within a DRAM budget a quarter of it, at least the selection of one layer.
    uint64_t share = kv_blocks / 8;
    if (o.dram_budget_bytes != 0) share = std::min(share, o.dram_budget_bytes / 4 / block);
    device_blocks = std::max<uint64_t>(share, o.top_k + o.sink_chunks + o.recent_chunks);
  } else {
    // Two layers' working sets: layer N+1 is copied (or decoded) in while N computes.
    device_blocks = 2 * uint64_t{FinalChunks(o, layout)} + layout.layers;
  }
  if (device_blocks == 0) return Status::InvalidArgument("device budget below one block");
  uint64_t host_bytes = o.host_budget_bytes != 0 ? o.host_budget_bytes : kv_blocks * block / 4;
  if (o.dram_budget_bytes != 0) {
    if (device_blocks * block >= o.dram_budget_bytes) {
      return Status::InvalidArgument(
          "DRAM budget " + std::to_string(o.dram_budget_bytes) + " bytes leaves nothing for the " +
          "host tier after a device budget of " + std::to_string(device_blocks * block) + " bytes");
    }
    host_bytes = o.dram_budget_bytes - device_blocks * block;
  }
  // More than every block the sequence can hold would only be memory never used.
  const uint64_t blocks_max = uint64_t{layout.layers} * (FinalChunks(o, layout) + 1);
  b.device_blocks = static_cast<uint32_t>(std::min(device_blocks, blocks_max));
  b.host_slots = static_cast<uint32_t>(std::max<uint64_t>(1, host_bytes / host_slot));
  return b;
}

std::string GiBText(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / double(kGiB));
  return buf;
}

// NoSpace when the filesystem of `dir` (or of its nearest existing parent) cannot hold the SSD
// tier of an offloaded configuration: the whole run's KV at FP16 (the ladder's is smaller; the
// configurations run one at a time, each removing its files) and 256 MiB of segment slack.
Status CheckFreeSpace(const DecodeBenchOptions& o, const KvLayout& layout) {
  if (std::none_of(o.configs.begin(), o.configs.end(), IsOffloaded)) return Status::Ok();
  const uint64_t kv = uint64_t{layout.layers} * FinalChunks(o, layout) * layout.BlockBytes();
  const uint64_t need = kv + 256 * kMiB;
  std::filesystem::path existing(o.dir);
  std::error_code ec;
  while (!existing.empty() && !std::filesystem::exists(existing, ec)) {
    existing = existing.parent_path();
  }
  if (existing.empty()) existing = ".";
  KV_ASSIGN_OR_RETURN(const uint64_t free_bytes, NewPosixEnv()->FreeSpaceBytes(existing.string()));
  if (free_bytes < need) {
    return Status::NoSpace(o.dir + " has " + GiBText(free_bytes) + " free; the offloaded " +
                           "configurations need about " + GiBText(need) + " there (" +
                           GiBText(kv) + " of FP16 KV for " + std::to_string(o.context_tokens) +
                           " context tokens)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<OffloadRig>> MakeRig(const DecodeBenchOptions& o, DecodeConfig config,
                                            const KvLayout& layout, const Budget& budget) {
  auto rig = std::make_unique<OffloadRig>();
  const uint64_t block = layout.BlockBytes();
  const uint32_t chunks_max = FinalChunks(o, layout) + 1;
  const uint64_t kv_bytes = uint64_t{layout.layers} * chunks_max * block;
  rig->dir = o.dir + "/" + std::string(DecodeConfigName(config));
  std::error_code ec;
  std::filesystem::remove_all(rig->dir, ec);
  rig->env = NewPosixEnv();
  SsdTierOptions so;
  so.dirs = {rig->dir};
  so.capacity_bytes = kv_bytes * 2 + kGiB;
  so.sync = SsdSyncMode::kNone;
  so.queue_jobs_max = 256;
  so.io_depth = 64;  // Reads of several layers are in flight at once.
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so, rig->env.get()));
  rig->ssd = std::make_unique<SsdTierAdapter>(std::move(ssd), LayoutDigest(layout));
  KV_ASSIGN_OR_RETURN(rig->device,
                      DeviceTier::OpenCpu({.capacity_bytes = block * budget.device_blocks,
                                           .slot_bytes = static_cast<uint32_t>(block)}));
  const uint32_t host_slot = HostSlot(o, config, layout);
  KV_ASSIGN_OR_RETURN(rig->host,
                      HostTier::Open({.capacity_bytes = uint64_t{host_slot} * budget.host_slots,
                                      .slot_bytes = host_slot}));
  OffloadSequenceOptions so2;
  so2.layout = layout;
  so2.chunks_max = chunks_max;
  so2.device_blocks_max = budget.device_blocks;
  so2.sink_chunks = o.sink_chunks;
  so2.sequence_id = static_cast<uint64_t>(config) + 1;
  so2.depth = {.depth_min = 1, .depth_max = 4, .depth_initial = 1};
  so2.ladder = LadderOf(o, config);
  so2.ladder_attention = config == DecodeConfig::kLadderDequant ? LadderAttention::kDequantize
                                                                : LadderAttention::kQuantized;
  so2.codec_threads = o.codec_threads;
  KV_ASSIGN_OR_RETURN(rig->seq, OffloadedSequence::Create(so2, {.device = rig->device.get(),
                                                                .host = rig->host.get(),
                                                                .ssd = rig->ssd.get()}));
  const QuestOptions quest = config == DecodeConfig::kTopk ? Quest(o) : QuestOptions{};
  KV_ASSIGN_OR_RETURN(rig->kv, OffloadedKvBlocks::Create(rig->seq.get(), quest));
  return rig;
}

// The reference run's tokens, logits and attention outputs, per decoded token.
struct Reference {
  std::vector<uint32_t> inputs;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> attention;
};

// Per measured token: the time, and for offloaded runs the stall and bytes moved.
struct TokenSamples {
  std::vector<double> stall_ms, read_bytes, write_bytes, h2d_bytes;
  std::vector<double> bandwidth;  // Probes: before each measured token and after the last.
  OffloadStats first;             // Before the first measured token.
};

struct Runner {
  const DecodeBenchOptions& o;
  Model& model;
  const Context& context;
  const KvLayout& layout;
  Work& work;
  uint64_t context_blocks = 0;  // Work units of one decoded token.
  Reference reference;
  bool have_reference = false;
  double resident_ms = 0;
  double salient_mass = 0;

  void Progress(const std::string& line) const {
    if (o.progress) o.progress(line);
  }
  // Fills `kv` with the context through a FillMeter.
  Status Fill(DecodeConfig config, KvBlockSource& kv) {
    FillMeter meter(&kv, &work, std::string(DecodeConfigName(config)) + ": filling");
    return context.Fill(meter);
  }

  Status Decode(DecodeConfig config, KvBlockSource& kv, OffloadedSequence* seq,
                const std::string& tier_dir, DecodeConfigReport* r);
  void Record(double ms, const OffloadStats& before, const OffloadStats& after,
              TokenSamples* samples, DecodeConfigReport* r) const;
  void Summarize(OffloadedSequence* seq, const TokenSamples& samples, DecodeConfigReport* r) const;
  // The probe's bandwidth; infinite (no I/O bound) while the tier holds nothing to read.
  Result<double> Probe(const std::string& tier_dir) const {
    Result<double> b = o.ssd_probe(tier_dir, SsdHostSlot(layout));
    if (!b.ok() && b.status().code() == StatusCode::kNotFound) {
      return std::numeric_limits<double>::infinity();
    }
    return b;
  }
  Result<DecodeConfigReport> Run(DecodeConfig config);
};

Status Runner::Decode(DecodeConfig config, KvBlockSource& kv, OffloadedSequence* seq,
                      const std::string& tier_dir, DecodeConfigReport* r) {
  const uint32_t total = o.warmup_tokens + o.tokens;
  AttentionRecorder recorder(model.config());
  std::vector<float> logits;
  TokenSamples samples;
  uint32_t input = context.first_input();
  uint32_t agree = 0;
  double cos_sum = 0;
  const bool probe = IsOffloaded(config) && static_cast<bool>(o.ssd_probe);
  const std::string phase = std::string(DecodeConfigName(config)) + ": decoding";
  for (uint32_t t = 0; t < total; ++t) {
    KV_RETURN_IF_ERROR(work.CheckCancelled());
    const bool measured = t >= o.warmup_tokens;
    if (have_reference) input = reference.inputs[t];
    if (measured && probe) {
      KV_ASSIGN_OR_RETURN(double b, Probe(tier_dir));
      samples.bandwidth.push_back(b);
    }
    const OffloadStats before = seq != nullptr ? seq->Stats() : OffloadStats{};
    if (t == o.warmup_tokens) samples.first = before;
    const double start = NowMs();
    KV_RETURN_IF_ERROR(model.Forward(std::span(&input, 1), o.context_tokens + t, kv,
                                     {.probe = &recorder,
                                      .attention_threads = o.attention_threads,
                                      .cancelled = o.cancelled},
                                     &logits));
    const double ms = NowMs() - start;
    work.Advance(context_blocks, phase);
    if (measured) Record(ms, before, seq != nullptr ? seq->Stats() : OffloadStats{}, &samples, r);
    if (!have_reference) {
      reference.inputs.push_back(input);
      reference.logits.push_back(logits);
      reference.attention.push_back(recorder.outputs());
      input = Argmax(logits);
      continue;
    }
    if (logits != reference.logits[t]) r->logits_identical = false;
    if (Argmax(logits) == Argmax(reference.logits[t])) ++agree;
    const size_t q_dim = model.config().q_dim();
    for (uint32_t l = 0; l < model.config().n_layers; ++l) {
      const double c = Cosine(std::span(recorder.outputs()).subspan(l * q_dim, q_dim),
                              std::span(reference.attention[t]).subspan(l * q_dim, q_dim));
      r->attention_cosine_min = std::min(r->attention_cosine_min, c);
      cos_sum += c;
    }
  }
  if (probe) {
    KV_ASSIGN_OR_RETURN(double b, Probe(tier_dir));
    samples.bandwidth.push_back(b);
  }
  if (have_reference) {
    r->greedy_agreement = static_cast<double>(agree) / total;
    r->attention_cosine_mean = cos_sum / (static_cast<double>(total) * model.config().n_layers);
  }
  Summarize(seq, samples, r);
  return Status::Ok();
}

void Runner::Record(double ms, const OffloadStats& before, const OffloadStats& after,
                    TokenSamples* samples, DecodeConfigReport* r) const {
  r->ms_per_token.push_back(ms);
  samples->stall_ms.push_back(static_cast<double>(after.stall_us - before.stall_us) / 1e3);
  samples->read_bytes.push_back(static_cast<double>(after.bytes_ssd_read - before.bytes_ssd_read));
  samples->write_bytes.push_back(
      static_cast<double>(after.bytes_ssd_written - before.bytes_ssd_written));
  samples->h2d_bytes.push_back(
      static_cast<double>(after.bytes_host_to_device - before.bytes_host_to_device));
}

// Medians over the measured tokens, and the roofline per token: the bound with the bandwidth
// probed just before and just after it, so that the disk's swings between tokens do not end up
// in the ratio.
void Runner::Summarize(OffloadedSequence* seq, const TokenSamples& s, DecodeConfigReport* r) const {
  r->ms_per_token_median = Median(r->ms_per_token);
  r->ms_per_token_min = *std::min_element(r->ms_per_token.begin(), r->ms_per_token.end());
  r->ms_per_token_max = *std::max_element(r->ms_per_token.begin(), r->ms_per_token.end());
  if (seq != nullptr) {
    r->stall_ms_per_token = Median(s.stall_ms);
    std::vector<double> compute;
    for (size_t i = 0; i < s.stall_ms.size(); ++i) {
      compute.push_back(r->ms_per_token[i] - s.stall_ms[i]);
    }
    r->compute_ms_per_token = Median(compute);
    r->ssd_read_bytes_per_token = Median(s.read_bytes);
    r->ssd_write_bytes_per_token = Median(s.write_bytes);
    r->host_to_device_bytes_per_token = Median(s.h2d_bytes);
    const OffloadStats now = seq->Stats();
    const uint64_t acquired = now.blocks_acquired - s.first.blocks_acquired;
    const uint64_t demand = now.blocks_demand - s.first.blocks_demand;
    r->prefetch_coverage =
        acquired == 0 ? 0.0 : 1.0 - static_cast<double>(demand) / static_cast<double>(acquired);
    r->depth = now.depth;
    r->blocks_prefetched = now.blocks_prefetched;
    r->blocks_demand = now.blocks_demand;
  }
  if (s.bandwidth.size() != r->ms_per_token.size() + 1) return;
  std::vector<double> roofs, ratios, finite;
  for (size_t i = 0; i < r->ms_per_token.size(); ++i) {
    const double token_bw = 0.5 * (s.bandwidth[i] + s.bandwidth[i + 1]);
    const double roof = std::max(resident_ms, s.read_bytes[i] / token_bw * 1e3);
    roofs.push_back(roof);
    ratios.push_back(r->ms_per_token[i] / roof);
  }
  for (const double b : s.bandwidth) {
    if (std::isfinite(b)) finite.push_back(b);
  }
  r->ssd_read_bytes_per_s = Median(finite);
  r->roofline_ms_per_token = Median(roofs);
  r->over_roofline = Median(ratios);
}

Result<DecodeConfigReport> Runner::Run(DecodeConfig config) {
  DecodeConfigReport r;
  r.config = config;
  r.weights_bytes = model.config().WeightFloats() * sizeof(float);
  const uint32_t capacity = o.context_tokens + o.warmup_tokens + o.tokens + layout.block_tokens;
  ResetPeakRss();
  Progress("config " + std::string(DecodeConfigName(config)) + ": filling the context");
  if (config == DecodeConfig::kResident || config == DecodeConfig::kResidentTopk) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<InMemoryKvBlocks> kv,
                        InMemoryKvBlocks::Create(layout, capacity));
    std::unique_ptr<SelectingKvBlocks> selecting;
    KvBlockSource* source = kv.get();
    if (config == DecodeConfig::kResidentTopk) {
      KV_ASSIGN_OR_RETURN(selecting, SelectingKvBlocks::Create(kv.get(), Quest(o)));
      source = selecting.get();
    }
    KV_RETURN_IF_ERROR(Fill(config, *source));
    Progress("config " + std::string(DecodeConfigName(config)) + ": decoding");
    MassTap tap(source, context.synthetic());
    KV_RETURN_IF_ERROR(Decode(config, tap, nullptr, "", &r));
    if (selecting != nullptr) r.chunks_attended = Attended(selecting->quest_stats());
    if (config == DecodeConfig::kResident) salient_mass = tap.salient_mass();
  } else if (config == DecodeConfig::kReference) {
    if (context.synthetic() == nullptr) {
      return Status::InvalidArgument("the reference configuration needs a synthetic model");
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<GeneratedKvBlocks> kv,
                        GeneratedKvBlocks::Create(context.synthetic(), capacity));
    Progress("config reference: decoding");
    MassTap tap(kv.get(), context.synthetic());
    KV_RETURN_IF_ERROR(Decode(config, tap, nullptr, "", &r));
    salient_mass = tap.salient_mass();
  } else {
    KV_ASSIGN_OR_RETURN(Budget budget, ComputeBudget(o, config, layout));
    r.device_budget_bytes = uint64_t{budget.device_blocks} * layout.BlockBytes();
    r.host_budget_bytes = uint64_t{budget.host_slots} * HostSlot(o, config, layout);
    KV_ASSIGN_OR_RETURN(std::unique_ptr<OffloadRig> rig, MakeRig(o, config, layout, budget));
    KV_RETURN_IF_ERROR(Fill(config, *rig->kv));
    // The prefill's write-back (blocks written on the device and those demoted to the host) is
    // done before decode, where a serving engine would run it (between prefill and the first step):
    // otherwise the decoded tokens would pay for writing the context (top-k touches few chunks
    // per token, so it meets those blocks over many tokens).
    KV_RETURN_IF_ERROR(rig->seq->WriteBack());
    Progress("config " + std::string(DecodeConfigName(config)) + ": decoding");
    KV_RETURN_IF_ERROR(Decode(config, *rig->kv, rig->seq.get(), rig->dir, &r));
    if (IsTopk(config)) r.chunks_attended = Attended(rig->kv->quest_stats());
    const DecodeAttentionStats& a = rig->kv->attention_stats();
    const double decoded = o.warmup_tokens + o.tokens;
    r.quantized_attention = a.quantized_blocks > 0;
    r.quantized_attention_bytes_per_token = static_cast<double>(a.quantized_bytes) / decoded;
    r.fp16_attention_bytes_per_token = static_cast<double>(a.raw_bytes) / decoded;
  }
  r.peak_rss_bytes = PeakRssBytes();
  if (!have_reference) {
    have_reference = true;
    if (config == DecodeConfig::kResident) resident_ms = r.ms_per_token_median;
  }
  return r;
}

}  // namespace

codecs::PrecisionLadderOptions DefaultDecodeLadder() {
  codecs::PrecisionLadderOptions l;
  l.recent_window_tokens = 2048;
  l.int4_age_tokens = 16384;
  l.full_precision_memory = codecs::CodecParams::Identity();
  l.full_precision_at_rest = codecs::CodecParams::Identity();
  l.int8 = codecs::CodecParams::Int8(32);
  l.int4 = codecs::CodecParams::Int4(32);
  l.lossy_from_tier = codecs::Tier::kHost;
  return l;
}

std::string_view DecodeConfigName(DecodeConfig config) {
  for (const ConfigName& c : kConfigNames) {
    if (c.config == config) return c.name;
  }
  return "unknown";
}

Result<DecodeConfig> ParseDecodeConfig(std::string_view name) {
  std::string known;
  for (const ConfigName& c : kConfigNames) {
    if (c.name == name) return c.config;
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  return Status::InvalidArgument("unknown configuration '" + std::string(name) +
                                 "' (known: " + known + ")");
}

Status DecodeBenchOptions::Validate() const {
  if (context_tokens == 0) return Status::InvalidArgument("context_tokens must be >= 1");
  if (tokens == 0 || tokens > kDecodeBenchTokensMax || warmup_tokens > kDecodeBenchTokensMax) {
    return Status::InvalidArgument("tokens must be in [1, 4096] and warmup_tokens <= 4096");
  }
  if (configs.empty()) return Status::InvalidArgument("no configuration to run");
  for (const DecodeConfig c : configs) {
    if (IsTopk(c) && top_k == 0) return Status::InvalidArgument("top_k must be >= 1 for topk");
  }
  if (recent_chunks == 0) return Status::InvalidArgument("recent_chunks must be >= 1");
  if (codec_threads == 0 || codec_threads > kOffloadCodecThreadsMax) {
    return Status::InvalidArgument("codec_threads must be in [1, " +
                                   std::to_string(kOffloadCodecThreadsMax) + "]");
  }
  if (attention_threads == 0 || attention_threads > kAttentionThreadsMax) {
    return Status::InvalidArgument("attention_threads must be in [1, " +
                                   std::to_string(kAttentionThreadsMax) + "]");
  }
  if (dir.empty()) return Status::InvalidArgument("dir must be set");
  return Status::Ok();
}

const DecodeConfigReport* DecodeBenchReport::Find(DecodeConfig config) const {
  for (const DecodeConfigReport& r : configs) {
    if (r.config == config) return &r;
  }
  return nullptr;
}

Result<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  bool synthetic = false;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, BuildModel(options, &synthetic));
  const KvLayout layout = model->config().KvLayoutFor(options.block_tokens);
  KV_RETURN_IF_ERROR(layout.Validate());
  KV_RETURN_IF_ERROR(CheckFreeSpace(options, layout));
  std::unique_ptr<Context> context;
  if (synthetic) {
    SyntheticKvOptions so = options.context;
    so.context_tokens = options.context_tokens;
    KV_ASSIGN_OR_RETURN(context, Context::Synthetic(layout, so));
  } else {
    if (options.progress) options.progress("generating the context with the model");
    KV_ASSIGN_OR_RETURN(context, Context::Generated(*model, layout, options.context_tokens,
                                                    options.cancelled));
  }
  DecodeBenchReport report;
  report.model = options.model;
  report.model_config = model->config();
  report.layout = layout;
  report.context_tokens = options.context_tokens;
  report.tokens = options.tokens;
  report.warmup_tokens = options.warmup_tokens;
  report.top_k = options.top_k;
  const uint32_t bt = layout.block_tokens;
  report.kv_bytes =
      uint64_t{layout.layers} * ((options.context_tokens + bt - 1) / bt) * layout.BlockBytes();
  // The reference runs first: resident when asked for, else the regenerated reference.
  std::vector<DecodeConfig> order;
  const bool has_resident = std::find(options.configs.begin(), options.configs.end(),
                                      DecodeConfig::kResident) != options.configs.end();
  order.push_back(has_resident ? DecodeConfig::kResident : DecodeConfig::kReference);
  if (!has_resident && !synthetic) order[0] = DecodeConfig::kResident;
  report.reference = order[0];
  for (const DecodeConfig c : options.configs) {
    if (c != order[0]) order.push_back(c);
  }
  // Budgets are checked before anything runs: a device budget below one layer's working set
  // would only fail after minutes of filling.
  for (const DecodeConfig c : order) {
    if (!IsOffloaded(c)) continue;
    KV_ASSIGN_OR_RETURN(Budget b, ComputeBudget(options, c, layout));
    const uint32_t ws = WorkingSetBlocks(options, c, layout);
    if (b.device_blocks < ws) {
      return Status::NoSpace("configuration " + std::string(DecodeConfigName(c)) +
                             ": device budget of " + std::to_string(b.device_blocks) +
                             " blocks is below the " + std::to_string(ws) + " blocks of " +
                             std::to_string(layout.BlockBytes()) + " bytes one layer reads");
    }
  }
  Work work(options);
  const uint64_t context_blocks = uint64_t{layout.layers} * ((options.context_tokens + bt - 1) / bt);
  uint64_t total_work = 0;
  for (const DecodeConfig c : order) {
    if (c != DecodeConfig::kReference) total_work += context_blocks;  // The fill.
    total_work += uint64_t{options.warmup_tokens + options.tokens} * context_blocks;
  }
  work.SetTotal(total_work);
  Runner runner{.o = options,
                .model = *model,
                .context = *context,
                .layout = layout,
                .work = work,
                .context_blocks = context_blocks};
  for (const DecodeConfig c : order) {
    KV_ASSIGN_OR_RETURN(DecodeConfigReport r, runner.Run(c));
    report.configs.push_back(std::move(r));
  }
  report.salient_attention_mass = runner.salient_mass;
  return report;
}

}  // namespace kvtier::runtime
