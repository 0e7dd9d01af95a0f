// Decode benchmark: per-token decode latency of one long sequence, with its KV all resident or
// offloaded below a device budget (the offloaded-sequence mode of docs/offload.md), behind
// `kvtier bench decode` (docs/benchmarks.md, docs/offload.md).
//
// One run builds a model (a synthetic preset cut to a few layers, which keeps the real model's KV
// geometry, or a llama2.c / GGUF file), gives every configuration the same context (a synthetic
// KV context, runtime/synthetic_kv.h, or for a file model the KV of a real greedy generation) and
// decodes warmup + measured tokens in each configuration:
//   resident       every block in host memory (InMemoryKvBlocks), full attention;
//   resident-topk  the same with attention-guided selection (the selection's own cost);
//   offload        OffloadedSequence over a CPU device tier (budget: two layers' working sets
//                  plus the tails), a host tier and the SSD tier, full attention, lossless;
//   ladder         offload with the INT8/INT4 precision ladder by age below the device tier;
//                  int8/int4 blocks stay encoded on the device and decode attends them from
//                  their codes (quantized attention, LadderAttention::kQuantized);
//   ladder-dequant the same ladder with blocks decoded to FP16 on promotion (the codec threads)
//                  and attended as FP16 (LadderAttention::kDequantize), for comparison;
//   topk           offload with Quest selection of top_k chunks and a device budget of KV / 8;
//   reference      GeneratedKvBlocks: all-resident bytes regenerated on demand (one layer in
//                  memory), for correctness checks of runs too large for resident memory.
// The first of resident / reference decodes greedily and is the reference: the other
// configurations are fed its tokens (teacher forcing) and compared with it: identical logits,
// greedy agreement, cosine of every layer's attention output.
//
// Offloaded configurations report their SSD traffic and the roofline,
// max(resident ms per token, SSD bytes read per token / SSD read bandwidth), with the bandwidth
// measured by `ssd_probe` between tokens of the same run (the disk is noisy; medians).
//
// Before anything is filled, the free space of `dir` is checked against the KV the offloaded
// configurations write there (NoSpace naming both).
//
// Thread safety: RunDecodeBench is a blocking call on the caller's thread (tiers run their own
// threads). Ownership: the bench owns everything it creates and removes its SSD files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "codecs/precision_ladder.h"
#include "core/kv_layout.h"
#include "kvtier/result.h"
#include "runtime/model_config.h"
#include "runtime/synthetic_kv.h"

namespace kvtier::runtime {

enum class DecodeConfig : uint8_t {
  kResident = 0,
  kResidentTopk = 1,
  kOffload = 2,
  kLadder = 3,
  kTopk = 4,
  kReference = 5,
  kLadderDequant = 6,
};
std::string_view DecodeConfigName(DecodeConfig config);
// InvalidArgument listing the known names.
Result<DecodeConfig> ParseDecodeConfig(std::string_view name);

// Layers a synthetic preset is cut to by default: 8 layers of llama2-7b at 32k tokens are 4 GiB
// of FP16 KV, a run of every configuration takes a few minutes on 2 cores, and a device budget
// of one layer is then KV / 8.
inline constexpr uint32_t kDecodeBenchLayersDefault = 8;
inline constexpr uint32_t kDecodeBenchTokensMax = 4096;

codecs::PrecisionLadderOptions DefaultDecodeLadder();

struct DecodeBenchOptions {
  std::string model = "synthetic:llama2-7b";  // "synthetic:<preset>" or a model file.
  std::string tokenizer;                      // llama2.c tokenizer (unused by the bench).
  uint32_t layers = 0;  // 0: kDecodeBenchLayersDefault for synthetic models, all for files.
  // Synthetic models only; the KV geometry (heads, KV heads, head_dim) stays the preset's.
  uint32_t dim = 256, hidden_dim = 512, vocab_size = 1024;
  uint64_t seed = 1;
  uint32_t context_tokens = 32768;
  uint32_t block_tokens = 256;
  uint32_t tokens = 5;         // Measured decode tokens per configuration.
  uint32_t warmup_tokens = 1;  // Decoded first and not measured (the ladder re-encodes then).
  // 0 = automatic. Device: two layers' working sets plus one tail block per layer (full
  // attention: layer N+1 moves to the device while N computes), KV / 8 (topk; with
  // dram_budget_bytes at most a quarter of it). Host: KV / 4, or with dram_budget_bytes what the
  // device leaves.
  uint64_t device_budget_bytes = 0;
  uint64_t host_budget_bytes = 0;
  uint64_t dram_budget_bytes = 0;  // Device + host together (the capacity run).
  uint32_t top_k = 16;
  uint32_t sink_chunks = 1, recent_chunks = 2;
  std::vector<DecodeConfig> configs = {DecodeConfig::kResident, DecodeConfig::kOffload,
                                       DecodeConfig::kLadder, DecodeConfig::kTopk};
  // The ladder configuration's rungs by age (Tier::kHost rungs of the sequence): lossless raw
  // for the sink and the recent window, int8, int4 from int4_age_tokens; no zstd (it does not
  // shrink quantized KV enough to pay for its decode time).
  codecs::PrecisionLadderOptions ladder = DefaultDecodeLadder();
  uint32_t codec_threads = 2;      // Decoders of the ladder configurations (both cores here).
  uint32_t attention_threads = 1;  // ForwardOptions::attention_threads of every configuration.
  std::string dir = "/var/tmp/kvtier-bench-decode";  // SSD tier files (removed at the end).
  SyntheticKvOptions context;  // Synthetic models; context_tokens is set from above.
  // The disk's read bandwidth in bytes/s, read off the SSD tier's own files in `tier_dir` with
  // requests of `request_bytes` (one record; fio in the CLI), so that the probe and the tier
  // read the same data on the same disk. Called before every measured token of an offloaded
  // configuration and once after; NotFound while the tier holds no file to read (nothing
  // offloaded yet: no I/O bound); unset: no roofline.
  std::function<Result<double>(const std::string& tier_dir, uint64_t request_bytes)> ssd_probe;
  std::function<void(std::string_view)> progress;  // One line per step; unset: silent.
  // The run's work done so far and in all, in KV blocks: filling a configuration's context
  // counts its blocks, and so does each decoded token (one pass over the context); `phase` names
  // the step ("offload: decoding"). On the calling thread. Unset: none.
  std::function<void(uint64_t done_blocks, uint64_t total_blocks, std::string_view phase)>
      progress_blocks;
  // Polled between blocks of a fill and between decoded tokens; once it returns true (and it
  // must stay true) the run stops with Aborted, and the SSD files are still removed.
  std::function<bool()> cancelled;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

struct DecodeConfigReport {
  DecodeConfig config = DecodeConfig::kResident;
  std::vector<double> ms_per_token;  // Measured tokens, in order.
  double ms_per_token_median = 0, ms_per_token_min = 0, ms_per_token_max = 0;
  // Offloaded configurations (0 otherwise), per measured token (medians).
  double stall_ms_per_token = 0;    // Waiting for blocks (OffloadStats::stall_us).
  double compute_ms_per_token = 0;  // The rest of the token's time.
  double ssd_read_bytes_per_token = 0, ssd_write_bytes_per_token = 0;
  double host_to_device_bytes_per_token = 0;
  double ssd_read_bytes_per_s = 0;  // Median of the probes around this configuration.
  // The bound per token, max(resident ms, SSD bytes / bandwidth probed around that token), and
  // the token's time over it: medians over the measured tokens.
  double roofline_ms_per_token = 0;
  double over_roofline = 0;
  uint32_t depth = 0;
  uint64_t blocks_prefetched = 0, blocks_demand = 0;
  // Share of the blocks acquired in the measured tokens that were on the device already.
  double prefetch_coverage = 0;
  double chunks_attended = 1;  // Fraction of chunks attended (selection).
  // Quantized attention (ladder): whether decode attended blocks straight from their int8/int4
  // codes, and the bytes of the blocks it attended per decoded token (mean over all decoded
  // tokens, warmup included): quantized blocks at their encoded size, FP16 ones at theirs.
  bool quantized_attention = false;
  double quantized_attention_bytes_per_token = 0;
  double fp16_attention_bytes_per_token = 0;
  // Against the reference configuration (itself: exact).
  bool logits_identical = true;
  double greedy_agreement = 1;  // Fraction of tokens whose argmax equals the reference's.
  double attention_cosine_min = 1, attention_cosine_mean = 1;
  uint64_t device_budget_bytes = 0, host_budget_bytes = 0;
  uint64_t peak_rss_bytes = 0;  // Process peak RSS during this configuration (0: unknown).
  uint64_t weights_bytes = 0;
};

struct DecodeBenchReport {
  std::string model;
  ModelConfig model_config;
  KvLayout layout;
  uint64_t kv_bytes = 0;  // FP16 KV of the context.
  uint32_t context_tokens = 0, tokens = 0, warmup_tokens = 0, top_k = 0;
  DecodeConfig reference = DecodeConfig::kResident;
  // Synthetic contexts: mean share of the reference's decode attention mass on the chunks
  // holding salient tokens (how concentrated attention is; selection needs it high).
  double salient_attention_mass = 0;
  std::vector<DecodeConfigReport> configs;
  const DecodeConfigReport* Find(DecodeConfig config) const;
};

Result<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& options);

}  // namespace kvtier::runtime
