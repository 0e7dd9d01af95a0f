// Goal: the AES-256-GCM rate of each implementation behind AesGcm (tiers/aes_gcm.h) on this CPU,
// beside memcpy of the same bytes: what sealing and opening a remote value or SSD record costs
// per byte, and how far libipsec-mb's VAES code is ahead of OpenSSL's.
//
// Method: one thread seals, or opens in place, a value of 64 KiB, 1 MiB and 4 MiB with a 48-byte
// associated data (the sealed header plus a key name), through one reused AesGcm (the key
// schedule kept, as RemoteCipher keeps it); memcpy copies the same bytes between two buffers.
// Reports bytes/s. Run with --benchmark_repetitions=9 and read medians; interleave runs.
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <vector>

#include "tiers/aes_gcm.h"

namespace kvtier {
namespace {

void RunGcm(benchmark::State& state, GcmImpl impl, bool encrypt) {
  if (!GcmImplAvailable(impl)) {
    state.SkipWithError("this build or CPU lacks the implementation");
    return;
  }
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> buf(bytes, std::byte{0x5a});
  std::array<uint8_t, kAesGcmKeyBytes> key{};
  key.fill(7);
  std::array<std::byte, kAesGcmNonceBytes> nonce{};
  std::array<std::byte, 48> aad{};
  std::array<std::byte, kAesGcmTagBytes> tag{};
  AesGcm gcm(impl);
  const std::span<const std::byte> aads[] = {aad};
  const GcmPart parts[] = {{buf.data(), buf.data(), bytes}};
  // Opening needs a valid tag: seal once, then open and re-seal alternately so the tag stays
  // right (only the timed direction's passes are counted).
  if (!gcm.Run(true, key, nonce.data(), aads, parts, tag.data())) {
    state.SkipWithError("seal failed");
    return;
  }
  for (auto _ : state) {
    if (encrypt) {
      benchmark::DoNotOptimize(gcm.Run(true, key, nonce.data(), aads, parts, tag.data()));
    } else {
      if (!gcm.Run(false, key, nonce.data(), aads, parts, tag.data())) {
        state.SkipWithError("open failed");
        return;
      }
      state.PauseTiming();
      gcm.Run(true, key, nonce.data(), aads, parts, tag.data());
      state.ResumeTiming();
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_SealIpsecMb(benchmark::State& s) { RunGcm(s, GcmImpl::kIpsecMb, true); }
void BM_OpenIpsecMb(benchmark::State& s) { RunGcm(s, GcmImpl::kIpsecMb, false); }
void BM_SealOpenSsl(benchmark::State& s) { RunGcm(s, GcmImpl::kOpenSsl, true); }
void BM_OpenOpenSsl(benchmark::State& s) { RunGcm(s, GcmImpl::kOpenSsl, false); }

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> src(bytes, std::byte{0x5a}), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

#define KVTIER_GCM_SIZES ->Arg(64 << 10)->Arg(1 << 20)->Arg(4 << 20)
BENCHMARK(BM_SealIpsecMb) KVTIER_GCM_SIZES;
BENCHMARK(BM_OpenIpsecMb) KVTIER_GCM_SIZES;
BENCHMARK(BM_SealOpenSsl) KVTIER_GCM_SIZES;
BENCHMARK(BM_OpenOpenSsl) KVTIER_GCM_SIZES;
BENCHMARK(BM_Memcpy) KVTIER_GCM_SIZES;

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
