// long_context_bench: decode tokens/s of a synthetic model whose KV cache exceeds the device
// budget (ARCHITECTURE.md §1 offloaded-sequence mode, §6 pipeline and selection, §11 bound).
//
// Geometry: llama3-8b (32 query heads, 8 KV heads, head_dim 128) cut to --layers layers and
// dim 256, blocks of 256 tokens. The context's K/V are filled with seeded random FP16 (a prefill
// of 32k tokens on 2 cores would take hours and does not change what decode reads), identically
// in every source, then --tokens tokens are decoded in each configuration:
//   memory    all KV in an InMemoryKvBlocks (baseline);
//   pipeline  OffloadedKvBlocks, device budget --budget-pct of the KV, host --host-pct, the rest
//             on the SSD tier under --dir, prefetch depth adaptive in [1, 4];
//   depth0    the same without prefetch (every miss loaded when its layer asks);
//   quest     the pipeline with Quest selection of --top-k chunks (+ sink + 2 recent).
// Reported: median and min-max seconds per token, tokens/s, stall per token, bytes moved per
// token (host->device, SSD reads), the final depth, and the §11 bound: SSD bytes per token /
// SSD read bandwidth (--ssd-gbps, default the 1.23 GB/s measured in docs/benchmarks.md).
// Writes nothing but the SSD tier's files under --dir (removed at exit).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/assert.h"
#include "engine/offload_sequence.h"
#include "env/env.h"
#include "runtime/kernels.h"
#include "runtime/model.h"
#include "runtime/offloaded_kv.h"
#include "runtime/synthetic.h"

namespace kvtier::runtime {
namespace {

struct Flags {
  uint32_t layers = 4;
  uint32_t context = 32768;
  uint32_t tokens = 5;
  uint32_t budget_pct = 25;
  uint32_t host_pct = 25;
  uint32_t top_k = 16;
  double ssd_gbps = 1.23;
  std::string dir = "/var/tmp/kvtier-long-context";
};

constexpr uint32_t kBlockTokens = 256;

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const char* v = argv[i + 1];
    if (name == "--layers")
      f.layers = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--context")
      f.context = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--tokens")
      f.tokens = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--budget-pct")
      f.budget_pct = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--host-pct")
      f.host_pct = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--top-k")
      f.top_k = static_cast<uint32_t>(std::atoi(v));
    else if (name == "--ssd-gbps")
      f.ssd_gbps = std::atof(v);
    else if (name == "--dir")
      f.dir = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", name.c_str());
      std::exit(2);
    }
  }
  return f;
}

// Same random K/V into every source, chunk by chunk as the model writes them.
void FillContext(KvBlockSource& kv, uint32_t layers, uint32_t context) {
  std::normal_distribution<float> normal(0.0f, 1.0f);  // Seeded per block below.
  const uint32_t chunks = context / kBlockTokens;
  std::vector<float> values;
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint32_t layer = 0; layer < layers; ++layer) {
      Result<std::span<uint16_t>> block = kv.MutableBlock(layer, c);
      KV_CHECK_OK(block.status());
      values.resize(block->size());
      std::mt19937 block_rng(c * 1000 + layer);
      for (float& v : values) v = normal(block_rng);
      normal.reset();
      GetAttentionKernels().float_to_half(values.data(), values.size(), block->data());
    }
  }
}

struct Result1 {
  std::string name;
  std::vector<double> seconds;
  OffloadStats stats;
  bool offloaded = false;
};

void Report(const Result1& r, uint32_t tokens, double ssd_gbps) {
  std::vector<double> s = r.seconds;
  std::sort(s.begin(), s.end());
  const double median = s[s.size() / 2];
  std::printf("%-9s median %.3f s/token (%.3f-%.3f)  %.2f tokens/s", r.name.c_str(), median,
              s.front(), s.back(), 1.0 / median);
  if (r.offloaded) {
    const double per = 1.0 / tokens;
    const double ssd_mib = static_cast<double>(r.stats.bytes_ssd_read) * per / (1 << 20);
    const double bound_s = static_cast<double>(r.stats.bytes_ssd_read) * per / (ssd_gbps * 1e9);
    std::printf(
        "  stall %.3f s/token  h2d %.0f MiB/token  ssd %.0f MiB/token  depth %u"
        "  bound %.3f s/token",
        static_cast<double>(r.stats.stall_us) * per / 1e6,
        static_cast<double>(r.stats.bytes_host_to_device) * per / (1 << 20), ssd_mib, r.stats.depth,
        bound_s);
  }
  std::printf("\n");
}

std::vector<double> Decode(Model& model, KvBlockSource& kv, const Flags& f) {
  std::vector<double> seconds;
  std::vector<float> logits;
  uint32_t token = 1;
  for (uint32_t t = 0; t < f.tokens; ++t) {
    const auto start = std::chrono::steady_clock::now();
    KV_CHECK_OK(model.Forward(std::span(&token, 1), f.context + t, kv, {}, &logits));
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    token = static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return seconds;
}

Result1 RunOffloaded(Model& model, const Flags& f, const std::string& name, uint32_t depth_max,
                     uint32_t top_k) {
  const KvLayout layout = model.config().KvLayoutFor(kBlockTokens);
  const auto block_bytes = static_cast<uint32_t>(layout.BlockBytes());
  const uint32_t chunks_max = f.context / kBlockTokens + 1 + f.tokens / kBlockTokens + 1;
  const uint64_t total_blocks = uint64_t{f.layers} * (f.context / kBlockTokens);
  // The budget covers its share of the KV plus the tail chunks being written.
  const auto budget = static_cast<uint32_t>(total_blocks * f.budget_pct / 100 + f.layers + 1);
  const auto host_slots = static_cast<uint32_t>(total_blocks * f.host_pct / 100 + 8);
  std::filesystem::remove_all(f.dir);
  std::unique_ptr<Env> env = NewPosixEnv();
  SsdTierOptions so;
  so.dirs = {f.dir};
  so.capacity_bytes = (total_blocks + 64) * (block_bytes + 8192) * 2;
  so.sync = SsdSyncMode::kNone;
  auto ssd = SsdTier::Open(so, env.get());
  KV_CHECK_OK(ssd.status());
  auto device = DeviceTier::OpenCpu(
      {.capacity_bytes = uint64_t{block_bytes} * budget, .slot_bytes = block_bytes});
  KV_CHECK_OK(device.status());
  const uint32_t host_slot_bytes = OffloadedSequence::HostSlotBytes(layout, true);
  auto host = HostTier::Open(
      {.capacity_bytes = uint64_t{host_slot_bytes} * host_slots, .slot_bytes = host_slot_bytes});
  KV_CHECK_OK(host.status());
  OffloadSequenceOptions o;
  o.layout = layout;
  o.chunks_max = chunks_max;
  o.device_blocks_max = budget;
  const uint32_t depth_min = depth_max == 0 ? 0u : 1u;
  o.depth = {.depth_min = depth_min, .depth_max = depth_max, .depth_initial = depth_min};
  auto seq = OffloadedSequence::Create(
      o, {.device = device->get(), .host = host->get(), .ssd = ssd->get()});
  KV_CHECK_OK(seq.status());
  auto kv = OffloadedKvBlocks::Create(seq->get(), {.top_k = top_k});
  KV_CHECK_OK(kv.status());
  FillContext(**kv, f.layers, f.context);
  Result1 r{.name = name, .offloaded = true};
  const OffloadStats before = (*seq)->Stats();
  r.seconds = Decode(model, **kv, f);
  const OffloadStats after = (*seq)->Stats();
  r.stats = after;
  r.stats.stall_us = after.stall_us - before.stall_us;
  r.stats.bytes_host_to_device = after.bytes_host_to_device - before.bytes_host_to_device;
  r.stats.bytes_ssd_read = after.bytes_ssd_read - before.bytes_ssd_read;
  if (top_k > 0) {
    const QuestStats& q = (*kv)->quest_stats();
    std::printf("quest: %.1f%% of chunks attended\n",
                100.0 * static_cast<double>(q.chunks_selected) /
                    static_cast<double>(std::max<uint64_t>(1, q.chunks_considered)));
  }
  kv->reset();
  seq->reset();
  KV_CHECK_OK((*ssd)->Close());
  std::filesystem::remove_all(f.dir);
  return r;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  Result<ModelConfig> preset = SyntheticPreset("llama3-8b");
  KV_CHECK_OK(preset.status());
  Result<ModelConfig> config = ShrinkConfig(
      *preset, {.layers = f.layers, .dim = 256, .hidden_dim = 512, .vocab_size = 1024});
  KV_CHECK_OK(config.status());
  Result<ModelWeights> weights = MakeSyntheticWeights(*config, 3);
  KV_CHECK_OK(weights.status());
  Result<std::unique_ptr<Model>> model = Model::Create(std::move(weights).value());
  KV_CHECK_OK(model.status());
  const KvLayout layout = (*model)->config().KvLayoutFor(kBlockTokens);
  const double kv_mib =
      static_cast<double>(layout.BlockBytes()) * f.layers * (f.context / kBlockTokens) / (1 << 20);
  std::printf(
      "layers %u, context %u, KV %.0f MiB, device budget %u%% + tail, host %u%%, "
      "top-k %u, %u tokens per configuration\n",
      f.layers, f.context, kv_mib, f.budget_pct, f.host_pct, f.top_k, f.tokens);
  {
    auto kv = InMemoryKvBlocks::Create(layout, f.context + f.tokens + kBlockTokens);
    KV_CHECK_OK(kv.status());
    FillContext(**kv, f.layers, f.context);
    Result1 r{.name = "memory"};
    r.seconds = Decode(**model, **kv, f);
    Report(r, f.tokens, f.ssd_gbps);
  }
  Report(RunOffloaded(**model, f, "pipeline", 4, 0), f.tokens, f.ssd_gbps);
  Report(RunOffloaded(**model, f, "depth0", 0, 0), f.tokens, f.ssd_gbps);
  Report(RunOffloaded(**model, f, "quest", 4, f.top_k), f.tokens, f.ssd_gbps);
  return 0;
}

}  // namespace
}  // namespace kvtier::runtime

int main(int argc, char** argv) { return kvtier::runtime::Main(argc, argv); }
