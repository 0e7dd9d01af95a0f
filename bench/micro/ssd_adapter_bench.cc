// Goal: measure what reading the SSD tier through the Tier interface (SsdTierAdapter) costs
// against calling SsdTier directly, in the offloaded-sequence mode's pattern (batches of 8 records
// read into 4 KiB-aligned buffers, one completion each), beside memcpy of the same bytes as the
// machine's own limit for moving them.
//
// Method: one SsdTier in a temporary directory (buffered I/O, so records come from the page
// cache and the comparison is not lost in disk noise) holds 512 records of `range(0)` bytes of
// payload; each iteration reads the next 8 keys, round-robin, either with SsdTier::ReadBatchSync
// or with SsdTierAdapter::ReadBatchSync over the same tier; the memcpy benchmark copies 8 records'
// bytes between pre-faulted buffers. Run with --benchmark_repetitions=9
// --benchmark_enable_random_interleaving=true and read the medians (the machine is shared and
// noisy: the ratio of the two read medians is the result).
#include <benchmark/benchmark.h>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/kv_layout.h"
#include "env/env.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tier_adapter.h"

namespace kvtier {
namespace {

constexpr size_t kRecords = 512;
constexpr size_t kBatch = 8;

// The tier, its records and read buffers for one payload size; removes its directory at exit.
struct Rig {
  std::string dir;
  std::unique_ptr<Env> env;
  std::unique_ptr<SsdTierAdapter> adapter;  // Owns the SsdTier.
  std::vector<BlockKey> keys;
  std::vector<AlignedBuffer> buffers;
  Hash256 digest{};

  ~Rig() {
    adapter.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::unique_ptr<Rig> MakeRig(size_t payload_bytes, std::string* error) {
  auto rig = std::make_unique<Rig>();
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "kvtier_ssd_adapter_bench.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  rig->dir = tmpl;
  rig->env = NewPosixEnv();
  SsdTierOptions o;
  o.dirs = {rig->dir};
  o.capacity_bytes = 1ull << 30;
  o.segment_bytes = 64ull << 20;
  o.sync = SsdSyncMode::kNone;
  o.direct_io = DirectIo::kOff;
  Result<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(o, rig->env.get());
  if (!ssd.ok()) {
    *error = ssd.status().ToString();
    return nullptr;
  }
  rig->digest[0] = 0x42;
  rig->adapter = std::make_unique<SsdTierAdapter>(std::move(ssd).value(), rig->digest);
  std::vector<std::byte> payload(payload_bytes, std::byte{0x5a});
  std::vector<TierWrite> writes(kRecords);
  for (size_t i = 0; i < kRecords; ++i) {
    BlockKey key;
    std::memcpy(key.chunk_hash.data(), &i, sizeof(i));
    rig->keys.push_back(key);
    writes[i] = TierWrite{.key = key,
                          .codec_id = 0,
                          .raw_bytes = static_cast<uint32_t>(payload_bytes),
                          .payload = payload};
  }
  for (size_t i = 0; i < kRecords; i += kBatch) {
    const Status s = rig->adapter->WriteBatchSync(std::span(writes).subspan(i, kBatch));
    if (!s.ok()) {
      *error = s.ToString();
      return nullptr;
    }
  }
  const uint64_t buffer_bytes = rig->adapter->ReadBufferBytes(payload_bytes);
  for (size_t b = 0; b < kBatch; ++b) {
    Result<AlignedBuffer> buf = AlignedBuffer::Allocate(buffer_bytes);
    if (!buf.ok()) {
      *error = buf.status().ToString();
      return nullptr;
    }
    std::memset(buf->data(), 0, buffer_bytes);
    rig->buffers.push_back(std::move(buf).value());
  }
  return rig;
}

enum class Path { kSsdTier, kAdapter };

void RunReads(benchmark::State& state, Path path) {
  const auto payload_bytes = static_cast<size_t>(state.range(0));
  std::string error;
  std::unique_ptr<Rig> rig = MakeRig(payload_bytes, &error);
  if (rig == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  size_t next = 0;
  std::vector<SsdBlockRead> direct(kBatch);
  std::vector<TierRead> reads(kBatch);
  for (auto _ : state) {
    Status s;
    for (size_t b = 0; b < kBatch; ++b) {
      const BlockKey& key = rig->keys[(next + b) % kRecords];
      if (path == Path::kSsdTier) {
        direct[b] = SsdBlockRead{.key = key, .layout_digest = rig->digest,
                                 .buffer = rig->buffers[b].span()};
      } else {
        reads[b] = TierRead{.key = key, .buffer = rig->buffers[b].span()};
      }
    }
    s = path == Path::kSsdTier ? rig->adapter->ssd()->ReadBatchSync(direct)
                               : rig->adapter->ReadBatchSync(reads);
    for (size_t b = 0; b < kBatch && s.ok(); ++b) {
      s = path == Path::kSsdTier ? direct[b].status : reads[b].status;
    }
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    next = (next + kBatch) % kRecords;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kBatch * payload_bytes));
}

void BM_SsdTierRead(benchmark::State& state) { RunReads(state, Path::kSsdTier); }
void BM_AdapterRead(benchmark::State& state) { RunReads(state, Path::kAdapter); }

// The limit: copying the same bytes once, between pre-faulted buffers.
void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0)) * kBatch;
  Result<AlignedBuffer> src = AlignedBuffer::Allocate(bytes);
  Result<AlignedBuffer> dst = AlignedBuffer::Allocate(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  std::memset(src->data(), 0x5a, bytes);
  std::memset(dst->data(), 0, bytes);
  for (auto _ : state) {
    std::memcpy(dst->data(), src->data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

BENCHMARK(BM_SsdTierRead)->Arg(4 << 10)->Arg(64 << 10)->UseRealTime();
BENCHMARK(BM_AdapterRead)->Arg(4 << 10)->Arg(64 << 10)->UseRealTime();
BENCHMARK(BM_Memcpy)->Arg(4 << 10)->Arg(64 << 10)->UseRealTime();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
