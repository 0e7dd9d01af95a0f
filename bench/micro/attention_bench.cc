// Goal: show how close decode attention over a long FP16 KV cache comes to the machine's memory
// bandwidth, before and after attention streamed each KV block once for all query heads
// (runtime/kernels.h AttendF16), on real models' KV geometry.
//
// Method: one 1 GiB arena of seeded random FP16 holds layers of 32,768 tokens of context in
// blocks of 256 tokens ([k|v][token][kv_head][head_dim]): two layers of llama2-7b (32 KV heads,
// MHA, 512 MiB a layer) or eight of llama3-8b (8 KV heads under 32 query heads, GQA groups of 4,
// 128 MiB a layer). Each iteration attends one query token over one layer, cycling through the
// layers, so the bytes come from DRAM (the arena is larger than any cache; some CPUs' L3 reach
// hundreds of MiB). Variants:
//   BM_AttendPerHead  the per-query-head loop the model ran before (DotRowsF16, Softmax,
//                     WeightedSumRowsF16 per head, as Model::AttendOneHead did);
//   BM_AttendF16/1|2  AttendF16 with run masses on one thread, or split by blocks over two as
//                     Model does with attention_threads = 2;
//   BM_AttendF16Hot   AttendF16 over runs that all alias 64 rows of one block, so the data
//                     stays in cache: the compute ceiling;
//   BM_ReadMemory/1|2 a plain AVX2 read of the whole arena by one or two threads: the limit;
//   BM_ModelPrefill   a whole model's prefill of 2048 tokens (attention cost grows with the
//                     square of the chunk), on one or two attention threads.
// The counter GB/s is KV bytes streamed per second (10^9 B/s). The machine is shared and noisy:
// run with --benchmark_repetitions=9 and compare medians of the same run.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/aligned_buffer.h"
#include "runtime/kernels.h"
#include "runtime/model.h"
#include "runtime/synthetic.h"

namespace kvtier::runtime {
namespace {

constexpr size_t kArenaBytes = size_t{1} << 30;
constexpr uint32_t kContextTokens = 32768;
constexpr uint32_t kBlockTokens = 256;
constexpr uint32_t kHotRows = 64;

struct Geometry {
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;

  size_t KvDim() const { return size_t{n_kv_heads} * head_dim; }
  size_t BlockElems() const { return 2 * size_t{kBlockTokens} * KvDim(); }
  size_t LayerBytes() const { return BlockElems() * 2 * (kContextTokens / kBlockTokens); }
};

Geometry GeometryOf(const char* preset) {
  Result<ModelConfig> c = SyntheticPreset(preset);
  if (!c.ok()) return {};
  return {.n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim};
}

// The arena, filled once: FP16 of uniform values in [-2, 2) from a xorshift generator.
const uint16_t* Arena() {
  static const AlignedBuffer arena = [] {
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(kArenaBytes);
    if (!b.ok()) std::abort();
    auto* h = reinterpret_cast<uint16_t*>(b->data());
    std::vector<float> values(1 << 16);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t done = 0; done < kArenaBytes / 2; done += values.size()) {
      for (float& v : values) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v = static_cast<float>(x >> 40) * 0x1p-22f - 2.0f;
      }
      GetAttentionKernels().float_to_half(values.data(), values.size(), h + done);
    }
    return std::move(b).value();
  }();
  return reinterpret_cast<const uint16_t*>(arena.data());
}

std::vector<KvRun> LayerRuns(const Geometry& g, uint32_t layer) {
  const uint16_t* base = Arena() + layer * (g.LayerBytes() / 2);
  std::vector<KvRun> runs;
  for (uint32_t b = 0; b < kContextTokens / kBlockTokens; ++b) {
    const uint16_t* block = base + b * g.BlockElems();
    runs.push_back(
        {.k = block, .v = block + size_t{kBlockTokens} * g.KvDim(), .rows = kBlockTokens});
  }
  return runs;
}

std::vector<float> Query(const Geometry& g) {
  std::vector<float> q(size_t{g.n_heads} * g.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  for (size_t i = 0; i < q.size(); ++i) q[i] = scale * std::sin(static_cast<float>(i) * 0.37f);
  return q;
}

void Finish(benchmark::State& state, size_t bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(bytes_per_iteration) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// What Model::AttendOneHead did per query head before AttendF16.
void AttendPerHead(const Geometry& g, const float* q, const std::vector<KvRun>& runs, float* scores,
                   float* mass, float* out) {
  const AttentionKernels& k = GetAttentionKernels(KernelIsa::kAvx2);
  const uint32_t group = g.n_heads / g.n_kv_heads;
  for (uint32_t h = 0; h < g.n_heads; ++h) {
    const size_t head_offset = size_t{h / group} * g.head_dim;
    size_t n = 0;
    for (const KvRun& r : runs) {
      k.dot_rows_f16(q + h * g.head_dim, r.k + head_offset, g.KvDim(), r.rows, g.head_dim,
                     scores + n);
      n += r.rows;
    }
    Softmax(scores, n);
    n = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      for (uint32_t j = 0; j < runs[i].rows; ++j) mass[i] += scores[n + j];
      n += runs[i].rows;
    }
    float* o = out + h * g.head_dim;
    std::fill_n(o, g.head_dim, 0.0f);
    n = 0;
    for (const KvRun& r : runs) {
      k.weighted_sum_rows_f16(scores + n, r.v + head_offset, g.KvDim(), r.rows, g.head_dim, o);
      n += r.rows;
    }
  }
}

void BM_AttendPerHead(benchmark::State& state, const char* preset) {
  const Geometry g = GeometryOf(preset);
  const auto layers = static_cast<uint32_t>(kArenaBytes / g.LayerBytes());
  const std::vector<float> q = Query(g);
  std::vector<float> scores(kContextTokens), mass(kContextTokens / kBlockTokens);
  std::vector<float> out(q.size());
  uint32_t layer = 0;
  for (auto _ : state) {
    AttendPerHead(g, q.data(), LayerRuns(g, layer), scores.data(), mass.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
  Finish(state, g.LayerBytes());
}

// AttendF16 over `runs`, with the log-sum-exps the two-thread split merges.
void AttendRuns(const Geometry& g, const float* q, std::span<const KvRun> runs, float* out,
                float* head_lse, float* run_lse, float* scratch) {
  GetAttentionKernels(KernelIsa::kAvx2)
      .attend_f16({.n_heads = g.n_heads,
                   .n_kv_heads = g.n_kv_heads,
                   .head_dim = g.head_dim,
                   .q = q,
                   .runs = runs.data(),
                   .n_runs = runs.size(),
                   .out = out,
                   .head_lse = head_lse,
                   .run_lse = run_lse,
                   .scratch = scratch});
}

// AttendF16 with the run masses, on state.range(0) threads: with 2, as Model does it with
// attention_threads = 2, a second thread takes the second half of the blocks and the halves are
// merged (MergeAttendParts, RunMassFromLse). The thread is started per iteration (tens of
// microseconds, under 1 % of an iteration).
void BM_AttendF16(benchmark::State& state, const char* preset) {
  const Geometry g = GeometryOf(preset);
  const auto layers = static_cast<uint32_t>(kArenaBytes / g.LayerBytes());
  const auto threads = static_cast<uint32_t>(state.range(0));
  const std::vector<float> q = Query(g);
  const size_t n_runs = kContextTokens / kBlockTokens;
  const size_t half = n_runs / 2;
  std::vector<float> out(q.size()), out_b(q.size()), mass(n_runs);
  std::vector<float> lse(g.n_heads), lse_b(g.n_heads), run_lse(n_runs * g.n_heads);
  std::vector<std::vector<float>> scratch(
      threads, std::vector<float>(AttendScratchFloats(g.n_heads, n_runs)));
  uint32_t layer = 0;
  for (auto _ : state) {
    const std::vector<KvRun> runs = LayerRuns(g, layer);
    if (threads == 1) {
      AttendRuns(g, q.data(), runs, out.data(), lse.data(), run_lse.data(), scratch[0].data());
    } else {
      const std::span<const KvRun> all(runs);
      std::thread other([&] {
        AttendRuns(g, q.data(), all.subspan(half), out_b.data(), lse_b.data(),
                   run_lse.data() + half * g.n_heads, scratch[1].data());
      });
      AttendRuns(g, q.data(), all.first(half), out.data(), lse.data(), run_lse.data(),
                 scratch[0].data());
      other.join();
      MergeAttendParts(g.n_heads, g.head_dim, out_b.data(), lse_b.data(), out.data(), lse.data());
    }
    RunMassFromLse(g.n_heads, n_runs, run_lse.data(), lse.data(), mass.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(mass.data());
    layer = (layer + 1) % layers;
  }
  Finish(state, g.LayerBytes());
}

// AttendF16 over runs that all alias the first 64 rows of the arena's first block (256 KiB of
// K and V for llama3-8b), so the data stays in L2: the kernel's compute ceiling.
void BM_AttendF16Hot(benchmark::State& state, const char* preset) {
  const Geometry g = GeometryOf(preset);
  const std::vector<float> q = Query(g);
  std::vector<KvRun> runs = LayerRuns(g, 0);
  for (KvRun& r : runs) r = {.k = runs[0].k, .v = runs[0].v, .rows = kHotRows};
  std::vector<float> out(q.size()), lse(g.n_heads), run_lse(runs.size() * g.n_heads);
  std::vector<float> scratch(AttendScratchFloats(g.n_heads, runs.size()));
  for (auto _ : state) {
    AttendRuns(g, q.data(), runs, out.data(), lse.data(), run_lse.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  Finish(state, runs.size() * kHotRows * g.KvDim() * 2 * 2);
}

// Prefill of state.range(0) tokens in one chunk through a whole model (llama3-8b's attention
// geometry cut to 4 layers and dim 256, as bench/long_context.cc uses), attention_threads =
// state.range(1): attention is most of the time; a token attends to ~half the chunk on average.
std::unique_ptr<Model> PrefillModel() {
  Result<ModelConfig> preset = SyntheticPreset("llama3-8b");
  if (!preset.ok()) return nullptr;
  Result<ModelConfig> config =
      ShrinkConfig(*preset, {.layers = 4, .dim = 256, .hidden_dim = 512, .vocab_size = 1024});
  if (!config.ok()) return nullptr;
  Result<ModelWeights> weights = MakeSyntheticWeights(*config, 3);
  if (!weights.ok()) return nullptr;
  Result<std::unique_ptr<Model>> model = Model::Create(std::move(weights).value());
  return model.ok() ? std::move(model).value() : nullptr;
}

void BM_ModelPrefill(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  const std::unique_ptr<Model> model = PrefillModel();
  if (model == nullptr) {
    state.SkipWithError("model");
    return;
  }
  std::vector<uint32_t> tokens(n);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = (i * 7919 + 13) % 1024;
  std::vector<float> logits;
  for (auto _ : state) {
    Result<std::unique_ptr<InMemoryKvBlocks>> kv =
        InMemoryKvBlocks::Create(model->config().KvLayoutFor(kBlockTokens), n + kBlockTokens);
    if (!kv.ok() || !model
                         ->Forward(tokens, 0, **kv,
                                   {.chunk_tokens = n,
                                    .attention_threads = static_cast<uint32_t>(state.range(1))},
                                   &logits)
                         .ok()) {
      state.SkipWithError("forward");
      return;
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

__attribute__((target("avx2"))) uint64_t SumBytes(const std::byte* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// The limit: every byte of the arena read once, by state.range(0) threads (halves).
void BM_ReadMemory(benchmark::State& state) {
  const auto* p = reinterpret_cast<const std::byte*>(Arena());
  const auto threads = static_cast<uint32_t>(state.range(0));
  for (auto _ : state) {
    if (threads == 1) {
      benchmark::DoNotOptimize(SumBytes(p, kArenaBytes));
    } else {
      uint64_t other_sum = 0;
      std::thread other([&] { other_sum = SumBytes(p + kArenaBytes / 2, kArenaBytes / 2); });
      benchmark::DoNotOptimize(SumBytes(p, kArenaBytes / 2) + other_sum);
      other.join();
    }
  }
  Finish(state, kArenaBytes);
}

void Register() {
  benchmark::RegisterBenchmark("BM_ReadMemory", BM_ReadMemory)->Arg(1)->Arg(2)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ModelPrefill", BM_ModelPrefill)
      ->Args({2048, 1})
      ->Args({2048, 2})
      ->Iterations(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (const char* preset : {"llama2-7b", "llama3-8b"}) {
    benchmark::RegisterBenchmark((std::string("BM_AttendPerHead/") + preset).c_str(),
                                 BM_AttendPerHead, preset)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_AttendF16/") + preset).c_str(), BM_AttendF16,
                                 preset)
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_AttendF16Hot/") + preset).c_str(),
                                 BM_AttendF16Hot, preset)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace kvtier::runtime

int main(int argc, char** argv) {
  if (!kvtier::runtime::CpuHasAvx2F16c()) {
    std::fprintf(stderr, "attention_bench needs AVX2/F16C/FMA\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvtier::runtime::Arena();  // Fill before the first measurement.
  kvtier::runtime::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
