// Goal: show what reading INT8/INT4 KV blocks in place (runtime/quant_attention.h) gains over
// FP16 attention at 32k context, on one core and on two, and how close each comes to the
// machine's memory read rate for the bytes it reads.
//
// Method: one 1 GiB arena of seeded random FP16 (Gaussian, a few key channels 8x larger) holds
// layers of 32,768 tokens in 256-token blocks ([k|v][token][kv_head][head_dim]); for the preset
// being measured, every block is also encoded with the int8 and int4 codecs (group 32, no zstd:
// header + payload, as a tier stores it). The arena and the encoded blocks are on transparent
// huge pages where the system allows them, as the memory tiers hold blocks. Each iteration
// attends one query token over one layer, cycling through the layers, so the bytes come from
// DRAM. Presets: llama2-7b (32 KV heads, MHA, 512 MiB a layer in FP16) and llama3-8b (8 KV
// heads under 32 query heads, 128 MiB). Variants, on one thread unless named otherwise:
//   BM_Read/<preset>/<fp16|int8|int4>      an AVX2 read of the layer's bytes: the limit;
//   BM_AttendF16/<preset>                  AttendF16 (AVX2) over the FP16 layer;
//   BM_AttendQuant/<preset>/<int8|int4>/<avx512vnni|avx512|avx2>  AttendQuant over the
//                                          encoded blocks (avx512vnni: integer scores);
//   .../2-threads (AttendF16, and AttendQuant avx512vnni/avx512)  the layer's runs split in
//                                          halves over two threads and merged
//                                          (MergeAttendParts), as Model splits a layer's
//                                          attention with attention_threads = 2;
//   BM_DequantAttend/<preset>/<int8|int4>  today's path: each block decoded to FP16
//                                          (codecs::DecodeBlock), then AttendF16 over it, the
//                                          blocks merged with MergeAttendParts;
//   BM_AttendHot/<preset>/fp16, .../<int8|int4>/<avx512vnni|avx512>  the kernel over runs that
//                                          alias 64 rows of one block, in cache: the compute
//                                          ceiling.
//   BM_SpeedUp/<preset>/<int8|int4>/avx512vnni  AttendF16 and AttendQuant over the same layer
//                                          in every iteration, one right after the other (in
//                                          alternating order), each timed: counters f16_ms and
//                                          quant_ms (medians over the iterations) and speedup
//                                          (the median of the iterations' f16_ms / quant_ms), a
//                                          ratio from which the machine's slower swings of load
//                                          cancel out (separate benchmarks meet them tens of
//                                          seconds apart).
// Counters: GB/s is bytes of the representation read per second (10^9 B/s); fp16_GB/s the same
// context counted as FP16 bytes. The machine is shared and noisy: run with
// --benchmark_repetitions=9 and compare medians of the same run.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "codecs/codec.h"
#include "runtime/kernels.h"
#include "runtime/quant_attention.h"
#include "runtime/synthetic.h"

namespace kvtier::runtime {
namespace {

constexpr size_t kArenaBytes = size_t{1} << 30;
constexpr uint32_t kContextTokens = 32768;
constexpr uint32_t kBlockTokens = 256;
constexpr uint32_t kBlocks = kContextTokens / kBlockTokens;
constexpr uint32_t kGroupSize = 32;

struct Geometry {
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;

  size_t KvDim() const { return size_t{n_kv_heads} * head_dim; }
  size_t BlockElems() const { return 2 * size_t{kBlockTokens} * KvDim(); }
  size_t LayerBytes() const { return BlockElems() * 2 * kBlocks; }
  uint32_t Layers() const { return static_cast<uint32_t>(kArenaBytes / LayerBytes()); }
};

Geometry GeometryOf(const std::string& preset) {
  Result<ModelConfig> c = SyntheticPreset(preset);
  if (!c.ok()) std::abort();
  return {.n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim};
}

// `bytes` of zeroed anonymous memory on transparent huge pages where the system allows them
// (MADV_HUGEPAGE before the first touch), as the memory tiers hold blocks (tiers/slot_pool.h):
// with 4 KiB pages a 256-token INT8 row of llama2-7b is one page, and every row a new TLB entry.
struct Unmap {
  size_t bytes = 0;
  void operator()(std::byte* p) const { ::munmap(p, bytes); }
};
using HugePages = std::unique_ptr<std::byte, Unmap>;

HugePages HugePageBuffer(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return HugePages(static_cast<std::byte*>(p), Unmap{bytes});
}

// The FP16 arena, filled once: a Gaussian from a xorshift generator (sum of four uniforms), every
// 64th element of a row 8x larger, so that some channels are outliers as in real keys.
const uint16_t* Fp16Arena() {
  static const HugePages arena = [] {
    HugePages b = HugePageBuffer(kArenaBytes);
    auto* h = reinterpret_cast<uint16_t*>(b.get());
    std::vector<float> chunk(1 << 16);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    auto uniform = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;
    };
    for (size_t done = 0; done < kArenaBytes / 2; done += chunk.size()) {
      for (size_t i = 0; i < chunk.size(); ++i) {
        const float g = 1.7f * (uniform() + uniform() + uniform() + uniform());
        chunk[i] = i % 64 == 5 ? 8.0f * g : g;
      }
      GetAttentionKernels().float_to_half(chunk.data(), chunk.size(), h + done);
    }
    return b;
  }();
  return reinterpret_cast<const uint16_t*>(arena.get());
}

// Every block of every layer of the FP16 arena, encoded with one codec for one geometry, back
// to back (each block at a 64-byte boundary).
struct EncodedLayers {
  HugePages buffer;
  std::span<std::byte> bytes;
  std::vector<size_t> block_offset;  // [layer * kBlocks + block]
  std::vector<size_t> block_bytes;
  size_t layer_bytes = 0;  // Of the first layer (all are the same size without zstd).
};

EncodedLayers Encode(const Geometry& g, uint32_t bits) {
  const codecs::BlockGeometry bg = {
      .tokens = kBlockTokens, .kv_heads = g.n_kv_heads, .head_dim = g.head_dim};
  const codecs::CodecParams params =
      bits == 8 ? codecs::CodecParams::Int8(kGroupSize) : codecs::CodecParams::Int4(kGroupSize);
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  const Result<size_t> max = codecs::MaxEncodedSize(params, bg);
  if (!ctx.ok() || !max.ok()) std::abort();
  const size_t slot = (*max + 63) / 64 * 64;
  EncodedLayers e;
  const size_t blocks = size_t{g.Layers()} * kBlocks;
  e.buffer = HugePageBuffer(blocks * slot);
  e.bytes = std::span(e.buffer.get(), blocks * slot);
  for (size_t i = 0; i < blocks; ++i) {
    const uint16_t* raw = Fp16Arena() + i * g.BlockElems();
    Result<size_t> size = codecs::EncodeBlock(
        params, bg, std::as_bytes(std::span(raw, g.BlockElems())),
        std::span(e.bytes).subspan(i * slot, slot), &*ctx);
    if (!size.ok()) std::abort();
    e.block_offset.push_back(i * slot);
    e.block_bytes.push_back(*size);
  }
  for (size_t b = 0; b < kBlocks; ++b) e.layer_bytes += e.block_bytes[b];
  return e;
}

// The encoded layers of the preset being measured (benchmarks run one at a time, in order).
struct QuantArenas {
  std::string preset;
  EncodedLayers int8;
  EncodedLayers int4;
};

const EncodedLayers& Encoded(const std::string& preset, uint32_t bits) {
  static std::unique_ptr<QuantArenas> arenas;
  if (arenas == nullptr || arenas->preset != preset) {
    arenas.reset();  // Free the previous preset's before encoding the next.
    const Geometry g = GeometryOf(preset);
    arenas = std::make_unique<QuantArenas>(
        QuantArenas{.preset = preset, .int8 = Encode(g, 8), .int4 = Encode(g, 4)});
  }
  return bits == 8 ? arenas->int8 : arenas->int4;
}

std::vector<KvRun> Fp16Runs(const Geometry& g, uint32_t layer) {
  std::vector<KvRun> runs;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    const uint16_t* block = Fp16Arena() + (size_t{layer} * kBlocks + b) * g.BlockElems();
    runs.push_back(
        {.k = block, .v = block + size_t{kBlockTokens} * g.KvDim(), .rows = kBlockTokens});
  }
  return runs;
}

std::vector<QuantKvRun> QuantRuns(const Geometry& g, const EncodedLayers& e, uint32_t bits,
                                  uint32_t layer) {
  std::vector<QuantKvRun> runs;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    const size_t i = size_t{layer} * kBlocks + b;
    Result<QuantKvRun> run =
        QuantRunFromEncodedBlock(std::span(e.bytes).subspan(e.block_offset[i], e.block_bytes[i]),
                                 g.n_kv_heads, g.head_dim, bits, kGroupSize, kBlockTokens);
    if (!run.ok()) std::abort();
    runs.push_back(*run);
  }
  return runs;
}

std::vector<float> Query(const Geometry& g) {
  std::vector<float> q(size_t{g.n_heads} * g.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  for (size_t i = 0; i < q.size(); ++i) q[i] = scale * std::sin(static_cast<float>(i) * 0.37f);
  return q;
}

void Finish(benchmark::State& state, const Geometry& g, size_t bytes_per_iteration) {
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(bytes_per_iteration) * iterations / 1e9, benchmark::Counter::kIsRate);
  state.counters["fp16_GB/s"] = benchmark::Counter(
      static_cast<double>(g.LayerBytes()) * iterations / 1e9, benchmark::Counter::kIsRate);
}

__attribute__((target("avx2"))) uint64_t SumBytes(const std::byte* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(a0, a1));
  uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += static_cast<uint64_t>(p[i]);
  return sum;
}

// The limit: the same bytes the attention of a layer reads (bits 16: the FP16 layer; 8 or 4:
// the encoded blocks, headers included), read once per iteration.
void BM_Read(benchmark::State& state, std::string preset, uint32_t bits) {
  const Geometry g = GeometryOf(preset);
  const std::byte* base = reinterpret_cast<const std::byte*>(Fp16Arena());
  size_t layer_span = g.LayerBytes();
  size_t bytes = g.LayerBytes();
  if (bits != 16) {
    const EncodedLayers& e = Encoded(preset, bits);
    base = e.bytes.data();
    layer_span = e.block_offset[kBlocks];  // Blocks padded to 64 bytes: < 0.01 % more.
    bytes = layer_span;
  }
  uint32_t layer = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(SumBytes(base + layer * layer_span, layer_span));
    layer = (layer + 1) % g.Layers();
  }
  Finish(state, g, bytes);
}

// Attention split over `threads` threads as Model does it with attention_threads = 2: a second
// thread takes the second half of the runs and the halves merge (MergeAttendParts). The thread is
// started per iteration (tens of microseconds, under 1 % of an iteration). `attend(runs, out,
// lse, run_lse, scratch index)` attends a part.
template <class Attend>
void AttendSplit(const Geometry& g, uint32_t threads, size_t n_runs, std::vector<float>& out,
                 std::vector<float>& lse, std::vector<float>& run_lse, const Attend& attend) {
  if (threads == 1) {
    attend(size_t{0}, n_runs, out.data(), lse.data(), run_lse.data(), size_t{0});
    return;
  }
  const size_t half = n_runs / 2;
  std::vector<float> out_b(out.size()), lse_b(lse.size());
  std::thread other([&] {
    attend(half, n_runs - half, out_b.data(), lse_b.data(), run_lse.data() + half * g.n_heads,
           size_t{1});
  });
  attend(size_t{0}, half, out.data(), lse.data(), run_lse.data(), size_t{0});
  other.join();
  MergeAttendParts(g.n_heads, g.head_dim, out_b.data(), lse_b.data(), out.data(), lse.data());
}

void BM_AttendF16(benchmark::State& state, std::string preset, uint32_t threads) {
  const Geometry g = GeometryOf(preset);
  const std::vector<float> q = Query(g);
  std::vector<float> out(q.size()), lse(g.n_heads), run_lse(size_t{kBlocks} * g.n_heads);
  std::vector<std::vector<float>> scratch(
      threads, std::vector<float>(AttendScratchFloats(g.n_heads, kBlocks)));
  uint32_t layer = 0;
  for (auto _ : state) {
    const std::vector<KvRun> runs = Fp16Runs(g, layer);
    AttendSplit(g, threads, runs.size(), out, lse, run_lse,
                [&](size_t first, size_t count, float* o, float* l, float* rl, size_t t) {
                  avx2::AttendF16({.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                                   .head_dim = g.head_dim, .q = q.data(),
                                   .runs = runs.data() + first, .n_runs = count, .out = o,
                                   .head_lse = l, .run_lse = rl, .scratch = scratch[t].data()});
                });
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % g.Layers();
  }
  Finish(state, g, g.LayerBytes());
}

void BM_AttendQuant(benchmark::State& state, std::string preset, uint32_t bits,
                    QuantKernelIsa isa, uint32_t threads) {
  const QuantAttentionKernels& kernels = GetQuantAttentionKernels(isa);
  if (kernels.isa != isa) {
    state.SkipWithError("CPU lacks the ISA");
    return;
  }
  const Geometry g = GeometryOf(preset);
  const EncodedLayers& e = Encoded(preset, bits);
  const std::vector<float> q = Query(g);
  std::vector<float> out(q.size()), lse(g.n_heads), run_lse(size_t{kBlocks} * g.n_heads);
  const QuantAttendArgs shape = {.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                                 .head_dim = g.head_dim, .bits = bits, .group_size = kGroupSize,
                                 .q = q.data(), .n_runs = kBlocks};
  std::vector<std::vector<float>> scratch(
      threads, std::vector<float>(QuantAttendScratchFloats(shape)));
  uint32_t layer = 0;
  for (auto _ : state) {
    const std::vector<QuantKvRun> runs = QuantRuns(g, e, bits, layer);
    AttendSplit(g, threads, runs.size(), out, lse, run_lse,
                [&](size_t first, size_t count, float* o, float* l, float* rl, size_t t) {
                  QuantAttendArgs args = shape;
                  args.runs = runs.data() + first;
                  args.n_runs = count;
                  args.out = o;
                  args.head_lse = l;
                  args.run_lse = rl;
                  args.scratch = scratch[t].data();
                  kernels.attend_quant(args);
                });
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % g.Layers();
  }
  Finish(state, g, e.layer_bytes);
}

// AttendQuant (state.range(0) = 1) or AttendF16 (0) over runs that all alias the first 64 rows
// of one block, so the data stays in cache: the kernels' compute ceilings.
void BM_AttendHot(benchmark::State& state, std::string preset, uint32_t bits,
                  QuantKernelIsa isa) {
  const QuantAttentionKernels& kernels = GetQuantAttentionKernels(isa);
  if (bits != 16 && kernels.isa != isa) {
    state.SkipWithError("CPU lacks the ISA");
    return;
  }
  constexpr uint32_t kHotRows = 64;
  const Geometry g = GeometryOf(preset);
  const std::vector<float> q = Query(g);
  std::vector<float> out(q.size()), lse(g.n_heads), run_lse(size_t{kBlocks} * g.n_heads);
  std::vector<KvRun> runs = Fp16Runs(g, 0);
  for (KvRun& r : runs) r = {.k = runs[0].k, .v = runs[0].v, .rows = kHotRows};
  std::vector<QuantKvRun> quant_runs;
  QuantAttendArgs args = {.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                          .head_dim = g.head_dim, .bits = bits, .group_size = kGroupSize,
                          .q = q.data(), .n_runs = kBlocks, .out = out.data(),
                          .head_lse = lse.data(), .run_lse = run_lse.data()};
  if (bits != 16) {
    quant_runs = QuantRuns(g, Encoded(preset, bits), bits, 0);
    for (QuantKvRun& r : quant_runs) r = {.payload = quant_runs[0].payload,
                                          .block_tokens = kBlockTokens, .rows = kHotRows};
    args.runs = quant_runs.data();
  }
  std::vector<float> scratch(std::max(QuantAttendScratchFloats(args),
                                      AttendScratchFloats(g.n_heads, kBlocks)));
  args.scratch = scratch.data();
  for (auto _ : state) {
    if (bits == 16) {
      avx2::AttendF16({.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads, .head_dim = g.head_dim,
                       .q = q.data(), .runs = runs.data(), .n_runs = runs.size(),
                       .out = out.data(), .head_lse = lse.data(), .run_lse = run_lse.data(),
                       .scratch = scratch.data()});
    } else {
      kernels.attend_quant(args);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["fp16_GB/s"] = benchmark::Counter(
      static_cast<double>(size_t{kBlocks} * kHotRows * g.KvDim() * 4) *
          static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

// Milliseconds `fn` takes.
template <class Fn>
double TimeMs(const Fn& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// BM_AttendF16 and BM_AttendQuant (one thread) on the same layer in each iteration, paired.
void BM_SpeedUp(benchmark::State& state, std::string preset, uint32_t bits, QuantKernelIsa isa) {
  const QuantAttentionKernels& kernels = GetQuantAttentionKernels(isa);
  if (kernels.isa != isa) {
    state.SkipWithError("CPU lacks the ISA");
    return;
  }
  const Geometry g = GeometryOf(preset);
  const EncodedLayers& e = Encoded(preset, bits);
  const std::vector<float> q = Query(g);
  std::vector<float> out(q.size()), lse(g.n_heads), run_lse(size_t{kBlocks} * g.n_heads);
  QuantAttendArgs args = {.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                          .head_dim = g.head_dim, .bits = bits, .group_size = kGroupSize,
                          .q = q.data(), .n_runs = kBlocks, .out = out.data(),
                          .head_lse = lse.data(), .run_lse = run_lse.data()};
  std::vector<float> scratch(std::max(QuantAttendScratchFloats(args),
                                      AttendScratchFloats(g.n_heads, kBlocks)));
  args.scratch = scratch.data();
  std::vector<double> f16_ms, quant_ms, ratio;
  uint32_t layer = 0;
  bool f16_first = true;
  for (auto _ : state) {
    const std::vector<KvRun> runs = Fp16Runs(g, layer);
    const std::vector<QuantKvRun> quant_runs = QuantRuns(g, e, bits, layer);
    args.runs = quant_runs.data();
    const auto f16 = [&] {
      return TimeMs([&] {
        avx2::AttendF16({.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                         .head_dim = g.head_dim, .q = q.data(), .runs = runs.data(),
                         .n_runs = runs.size(), .out = out.data(), .head_lse = lse.data(),
                         .run_lse = run_lse.data(), .scratch = scratch.data()});
        benchmark::DoNotOptimize(out.data());
      });
    };
    const auto quant = [&] {
      return TimeMs([&] {
        kernels.attend_quant(args);
        benchmark::DoNotOptimize(out.data());
      });
    };
    double f = 0.0;
    double qt = 0.0;
    if (f16_first) {
      f = f16();
      qt = quant();
    } else {
      qt = quant();
      f = f16();
    }
    f16_first = !f16_first;
    f16_ms.push_back(f);
    quant_ms.push_back(qt);
    ratio.push_back(f / qt);
    layer = (layer + 1) % g.Layers();
  }
  state.counters["f16_ms"] = Median(f16_ms);
  state.counters["quant_ms"] = Median(quant_ms);
  state.counters["speedup"] = Median(ratio);
}

// Today's path, at its best: one block decoded into a buffer that stays in cache, attended, and
// merged into the running result.
void BM_DequantAttend(benchmark::State& state, std::string preset, uint32_t bits) {
  const Geometry g = GeometryOf(preset);
  const EncodedLayers& e = Encoded(preset, bits);
  const codecs::BlockGeometry bg = {
      .tokens = kBlockTokens, .kv_heads = g.n_kv_heads, .head_dim = g.head_dim};
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  if (!ctx.ok()) std::abort();
  const std::vector<float> q = Query(g);
  std::vector<uint16_t> block(g.BlockElems());
  std::vector<float> out(q.size()), lse(g.n_heads), out_b(q.size()), lse_b(g.n_heads);
  std::vector<float> scratch(AttendScratchFloats(g.n_heads, 1));
  uint32_t layer = 0;
  for (auto _ : state) {
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const size_t i = size_t{layer} * kBlocks + b;
      if (!codecs::DecodeBlock(std::span(e.bytes).subspan(e.block_offset[i], e.block_bytes[i]),
                               bg, std::as_writable_bytes(std::span(block)), &*ctx)
               .ok()) {
        std::abort();
      }
      const KvRun run = {.k = block.data(),
                         .v = block.data() + size_t{kBlockTokens} * g.KvDim(),
                         .rows = kBlockTokens};
      const bool first = b == 0;
      avx2::AttendF16({.n_heads = g.n_heads, .n_kv_heads = g.n_kv_heads,
                       .head_dim = g.head_dim, .q = q.data(), .runs = &run, .n_runs = 1,
                       .out = first ? out.data() : out_b.data(),
                       .head_lse = first ? lse.data() : lse_b.data(),
                       .scratch = scratch.data()});
      if (!first) {
        MergeAttendParts(g.n_heads, g.head_dim, out_b.data(), lse_b.data(), out.data(),
                         lse.data());
      }
    }
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % g.Layers();
  }
  Finish(state, g, e.layer_bytes);
}

void Register() {
  for (const std::string preset : {"llama2-7b", "llama3-8b"}) {
    auto add = [&](const std::string& name, auto&& fn, auto... args) {
      benchmark::RegisterBenchmark(name.c_str(), fn, preset, args...)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    };
    add("BM_Read/" + preset + "/fp16", BM_Read, 16u);
    add("BM_Read/" + preset + "/int8", BM_Read, 8u);
    add("BM_Read/" + preset + "/int4", BM_Read, 4u);
    add("BM_AttendF16/" + preset, BM_AttendF16, 1u);
    add("BM_AttendF16/" + preset + "/2-threads", BM_AttendF16, 2u);
    struct Isa {
      const char* name;
      QuantKernelIsa isa;
      bool hot;  // Also measured in cache.
    };
    const Isa isas[] = {{"avx512vnni", QuantKernelIsa::kAvx512Vnni, true},
                        {"avx512", QuantKernelIsa::kAvx512, true},
                        {"avx2", QuantKernelIsa::kAvx2, false}};
    for (uint32_t bits : {8u, 4u}) {
      const std::string codec = bits == 8 ? "int8" : "int4";
      for (const Isa& isa : isas) {
        add("BM_AttendQuant/" + preset + "/" + codec + "/" + isa.name, BM_AttendQuant, bits,
            isa.isa, 1u);
        if (isa.hot) {
          add("BM_AttendQuant/" + preset + "/" + codec + "/" + isa.name + "/2-threads",
              BM_AttendQuant, bits, isa.isa, 2u);
        }
      }
      add("BM_DequantAttend/" + preset + "/" + codec, BM_DequantAttend, bits);
    }
    for (uint32_t bits : {8u, 4u}) {
      add(std::string("BM_SpeedUp/") + preset + (bits == 8 ? "/int8" : "/int4") + "/avx512vnni",
          BM_SpeedUp, bits, QuantKernelIsa::kAvx512Vnni);
    }
    add("BM_AttendHot/" + preset + "/fp16", BM_AttendHot, 16u, QuantKernelIsa::kAuto);
    for (uint32_t bits : {8u, 4u}) {
      for (const Isa& isa : isas) {
        if (!isa.hot) continue;
        add("BM_AttendHot/" + preset + "/" + (bits == 8 ? "int8/" : "int4/") + isa.name,
            BM_AttendHot, bits, isa.isa);
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::runtime

int main(int argc, char** argv) {
  if (!kvtier::runtime::CpuHasAvx2F16c()) {
    std::fprintf(stderr, "quant_attention_bench needs AVX2/F16C/FMA\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvtier::runtime::Fp16Arena();  // Fill before the first measurement.
  kvtier::runtime::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
