// Goal: measure what the engine's per-block metadata work (the block table's transitions, the
// CLOCK sweep) costs on the data path, where it weighs most: small blocks through a host-only
// engine, against memcpy of the same bytes in the same run (the machine's own limit).
//
// Method: a host-only engine (Engine::Open(options, nullptr): no SSD, no remote) with 1 KiB
// blocks (8 layers, 16 tokens per chunk) and a host tier of 1,024 blocks. Each iteration stores
// a fresh 64-chunk sequence (512 blocks: Claim, Reserve, Publish, Unpin per block, and from the
// third iteration on one CLOCK eviction (Drop) per block), then looks it up and loads it back
// (Pin, Touch, Unpin per block). BM_MemcpyBlocks copies the same 2 x 512 blocks one by one
// between pre-faulted buffers. Read blocks/s; run with --benchmark_repetitions=9 and compare
// medians of binaries built before and after a change, interleaved (the machine is shared).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 8;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kChunks = 64;
constexpr uint32_t kBlocks = kLayers * kChunks;
constexpr uint32_t kHostBlocks = 1024;

KvLayout Layout() {
  return {.layers = kLayers,
          .kv_heads = 1,
          .head_dim = 16,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}

EngineOptions Options() {
  EngineOptions o;
  o.layout = Layout();
  o.model.name = "engine-table-bench";
  o.host.capacity_bytes = uint64_t{kHostBlocks} * Layout().BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.device_backend = DeviceBackend::kCpu;
  return o;
}

void BM_StoreLoadSmallBlocks(benchmark::State& state) {
  Result<std::unique_ptr<Engine>> opened = Engine::Open(Options(), nullptr);
  if (!opened.ok()) {
    state.SkipWithError(opened.status().ToString().c_str());
    return;
  }
  Engine& engine = **opened;
  Result<Namespace> ns = engine.MakeNamespace("bench");
  if (!ns.ok()) {
    state.SkipWithError(ns.status().ToString().c_str());
    return;
  }
  const size_t block_bytes = Layout().BlockBytes();
  std::vector<std::byte> src_bytes(size_t{kBlocks} * block_bytes, std::byte{0x11});
  std::vector<std::byte> dst_bytes(size_t{kBlocks} * block_bytes, std::byte{0});
  std::vector<std::span<const std::byte>> src;
  std::vector<std::span<std::byte>> dst;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    src.emplace_back(src_bytes.data() + b * block_bytes, block_bytes);
    dst.emplace_back(dst_bytes.data() + b * block_bytes, block_bytes);
  }
  std::vector<uint32_t> tokens(size_t{kChunks} * kBlockTokens);
  uint32_t next_token = 1;
  for (auto _ : state) {
    for (uint32_t& t : tokens) t = next_token++;  // A fresh sequence: new keys every time.
    Result<std::unique_ptr<StoreHandle>> stored = engine.Store(*ns, tokens, src);
    if (!stored.ok() || !(*stored)->Wait().ok()) {
      state.SkipWithError("store failed");
      return;
    }
    Result<LookupResult> found = engine.Lookup(*ns, tokens);
    if (!found.ok() || found->matched_tokens != tokens.size()) {
      state.SkipWithError("lookup missed");
      return;
    }
    Result<std::unique_ptr<LoadHandle>> loaded = engine.Load(*ns, tokens, dst);
    if (!loaded.ok() || !(*loaded)->Wait().ok()) {
      state.SkipWithError("load failed");
      return;
    }
    benchmark::DoNotOptimize(dst_bytes.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBlocks);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kBlocks *
                          static_cast<int64_t>(block_bytes));
}

// The same bytes with memcpy: in and out, block by block.
void BM_MemcpyBlocks(benchmark::State& state) {
  const size_t block_bytes = Layout().BlockBytes();
  std::vector<std::byte> a(size_t{kBlocks} * block_bytes, std::byte{0x11});
  std::vector<std::byte> slots(size_t{kHostBlocks} * block_bytes, std::byte{0});
  std::vector<std::byte> b(size_t{kBlocks} * block_bytes, std::byte{0});
  size_t base = 0;
  for (auto _ : state) {
    for (uint32_t i = 0; i < kBlocks; ++i) {
      std::memcpy(slots.data() + ((base + i) % kHostBlocks) * block_bytes,
                  a.data() + i * block_bytes, block_bytes);
    }
    for (uint32_t i = 0; i < kBlocks; ++i) {
      std::memcpy(b.data() + i * block_bytes,
                  slots.data() + ((base + i) % kHostBlocks) * block_bytes, block_bytes);
    }
    base += kBlocks;
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBlocks);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kBlocks *
                          static_cast<int64_t>(block_bytes));
}

BENCHMARK(BM_StoreLoadSmallBlocks)->UseRealTime();
BENCHMARK(BM_MemcpyBlocks)->UseRealTime();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
