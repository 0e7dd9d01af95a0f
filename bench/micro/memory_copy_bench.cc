// Goal: decide when the CPU device tier's copy threads should use non-temporal stores instead of
// glibc memcpy (measured here: memcpy ~5.4 GB/s on one thread, non-temporal 8-9.5 GB/s), and
// measure what a whole tier round trip costs.
//
// Method: one thread copies between two pre-faulted 4 KiB-aligned buffers of each size with each
// kernel (plain memcpy, non-temporal, and the size-based choice CopyBytes makes), reporting
// bytes/s; the buffers are larger than the caches from 64 MiB on, so those rows are DRAM-bound.
// Repetitions give the spread: run with --benchmark_repetitions=9 and read the median and
// min-max, interleaved runs only (the machine is shared and noisy). A last benchmark pushes
// 1 MiB regions through DeviceTier::Copy (queue, thread hand-off, event) for the end-to-end rate.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/aligned_buffer.h"
#include "tiers/copy_kernels.h"
#include "tiers/memory_tier.h"

namespace kvtier {
namespace {

using CopyFn = void (*)(std::byte*, const std::byte*, size_t);

void RunCopy(benchmark::State& state, CopyFn fn) {
  const auto bytes = static_cast<size_t>(state.range(0));
  auto src = AlignedBuffer::Allocate(bytes);
  auto dst = AlignedBuffer::Allocate(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  std::memset(src->data(), 0x5a, bytes);  // Pre-fault both.
  std::memset(dst->data(), 0, bytes);
  for (auto _ : state) {
    fn(dst->data(), src->data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state) { RunCopy(state, &tiers_internal::CopyBytesPlain); }
void BM_NonTemporal(benchmark::State& state) {
  RunCopy(state, &tiers_internal::CopyBytesNonTemporal);
}
void BM_CopyBytes(benchmark::State& state) { RunCopy(state, &tiers_internal::CopyBytes); }

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(64 << 10, 256 << 20)->UseRealTime();
BENCHMARK(BM_NonTemporal)->RangeMultiplier(4)->Range(64 << 10, 256 << 20)->UseRealTime();
BENCHMARK(BM_CopyBytes)->RangeMultiplier(4)->Range(64 << 10, 256 << 20)->UseRealTime();

// The tier's real pattern: many regions of one size, each copied once, walking through 512 MiB
// arenas so every region comes from and goes to DRAM (a hot-cache loop flatters memcpy).
void RunStreaming(benchmark::State& state, CopyFn fn) {
  constexpr size_t kArenaBytes = size_t{512} << 20;
  const auto region = static_cast<size_t>(state.range(0));
  auto src = AlignedBuffer::Allocate(kArenaBytes);
  auto dst = AlignedBuffer::Allocate(kArenaBytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  std::memset(src->data(), 0x5a, kArenaBytes);
  std::memset(dst->data(), 0, kArenaBytes);
  size_t offset = 0;
  for (auto _ : state) {
    fn(dst->data() + offset, src->data() + offset, region);
    benchmark::ClobberMemory();
    offset = offset + 2 * region > kArenaBytes ? 0 : offset + region;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(region));
}
void BM_StreamMemcpy(benchmark::State& state) {
  RunStreaming(state, &tiers_internal::CopyBytesPlain);
}
void BM_StreamNonTemporal(benchmark::State& state) {
  RunStreaming(state, &tiers_internal::CopyBytesNonTemporal);
}
BENCHMARK(BM_StreamMemcpy)->RangeMultiplier(4)->Range(64 << 10, 16 << 20)->UseRealTime();
BENCHMARK(BM_StreamNonTemporal)->RangeMultiplier(4)->Range(64 << 10, 16 << 20)->UseRealTime();

// 256 MiB host buffer -> 256 slots of 1 MiB on the H2D stream, one event per 64 regions.
void BM_DeviceTierH2D(benchmark::State& state) {
  constexpr uint32_t kSlotBytes = 1 << 20;
  constexpr uint32_t kSlots = 256;
  auto tier = DeviceTier::OpenCpu({.capacity_bytes = uint64_t{kSlots} * kSlotBytes,
                                   .slot_bytes = kSlotBytes,
                                   .copy_threads = static_cast<uint32_t>(state.range(0))});
  auto host = AlignedBuffer::Allocate(uint64_t{kSlots} * kSlotBytes);
  if (!tier.ok() || !host.ok()) {
    state.SkipWithError("open failed");
    return;
  }
  std::memset(host->data(), 1, host->size());
  std::vector<CopyRegion> regions;
  for (uint32_t s = 0; s < kSlots; ++s) {
    regions.push_back({(*tier)->SlotData(s), host->data() + uint64_t{s} * kSlotBytes, kSlotBytes});
  }
  for (auto _ : state) {
    std::vector<CopyEvent> events;
    for (uint32_t i = 0; i < kSlots; i += 64) {
      events.push_back((*tier)->Copy(CopyKind::kHostToDevice,
                                     std::span<const CopyRegion>(regions).subspan(i, 64)));
    }
    for (const CopyEvent& e : events) {
      if (!e.Wait().ok()) state.SkipWithError("copy failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * int64_t{kSlots} * kSlotBytes);
}
BENCHMARK(BM_DeviceTierH2D)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
