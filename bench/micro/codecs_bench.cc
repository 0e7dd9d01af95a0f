// Codec throughput on Gaussian FP16 blocks (256 tokens x 8 KV heads x 128 dims = 1 MiB raw, the
// Llama-2-70B block shape), in raw bytes per second: shuffle-zstd encode/decode, int8/int4
// quantize/dequantize and the ecq codecs (the full EncodeBlock/DecodeBlock path, header and FP16
// conversion included), each with the dispatched (the widest the CPU runs: AVX-512, else AVX2),
// the AVX2 and the scalar kernels; and the encode and decode of small BF16 blocks as vLLM's pages
// give them.
// The compression ratio is reported as a counter.
#include <benchmark/benchmark.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "core/assert.h"

namespace kvtier::codecs {
namespace {

const BlockGeometry kGeometry{.tokens = 256, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16};

std::vector<uint16_t> GaussianHalfs() {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(kGeometry.elements());
  for (auto& h : v) h = F32ToF16(dist(rng));
  return v;
}

CodecParams ParamsFor(int64_t which) {
  switch (which) {
    case 0:
      return CodecParams::ShuffleZstd(1);
    case 1:
      return CodecParams::Int8(32);
    case 2:
      return CodecParams::Int4(32);
    case 4:
      return CodecParams::Ecq(CodecId::kEcq5);
    case 5:
      return CodecParams::Ecq(CodecId::kEcq6);
    case 6:
      return CodecParams::Ecq(CodecId::kEcq6V5);
    default:
      return CodecParams::Int8(32, 1);
  }
}

KernelIsa IsaFor(int64_t which) {
  return which == 0 ? KernelIsa::kAuto : which == 1 ? KernelIsa::kScalar : KernelIsa::kAvx2;
}

const char* IsaLabel(int64_t which) {
  return which == 0 ? " auto" : which == 1 ? " scalar" : " avx2";
}

struct Fixture {
  explicit Fixture(const benchmark::State& state)
      : params(ParamsFor(state.range(0))),
        ctx(std::move(CodecContext::Create({.isa = IsaFor(state.range(1))})).value()),
        raw(GaussianHalfs()),
        encoded(MaxEncodedSize(params, kGeometry).value()),
        decoded(raw.size()) {
    KV_CHECK_OK(ctx.Reserve(kGeometry));
    encoded_bytes = EncodeBlock(params, kGeometry, RawSpan(), encoded, &ctx).value();
  }
  std::span<const std::byte> RawSpan() const {
    return {reinterpret_cast<const std::byte*>(raw.data()), raw.size() * 2};
  }
  std::span<std::byte> DecodedSpan() {
    return {reinterpret_cast<std::byte*>(decoded.data()), decoded.size() * 2};
  }

  CodecParams params;
  CodecContext ctx;
  std::vector<uint16_t> raw;
  std::vector<std::byte> encoded;
  std::vector<uint16_t> decoded;
  size_t encoded_bytes = 0;
};

void Finish(benchmark::State& state, const Fixture& f) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kGeometry.raw_bytes()));
  state.counters["ratio"] =
      static_cast<double>(kGeometry.raw_bytes()) / static_cast<double>(f.encoded_bytes);
  state.SetLabel(f.params.ToString() + IsaLabel(state.range(1)));
}

void BM_Encode(benchmark::State& state) {
  Fixture f(state);
  for (auto _ : state) {
    Result<size_t> n = EncodeBlock(f.params, kGeometry, f.RawSpan(), f.encoded, &f.ctx);
    benchmark::DoNotOptimize(n);
  }
  Finish(state, f);
}

void BM_Decode(benchmark::State& state) {
  Fixture f(state);
  const std::span<const std::byte> enc(f.encoded.data(), f.encoded_bytes);
  for (auto _ : state) {
    Status s = DecodeBlock(enc, kGeometry, f.DecodedSpan(), &f.ctx);
    benchmark::DoNotOptimize(s);
  }
  Finish(state, f);
}

// The floor every codec is compared with: copying the same 1 MiB block with glibc memcpy (what
// storing it uncompressed costs in CPU), source and destination allocated as the codecs' are.
void BM_Memcpy(benchmark::State& state) {
  const std::vector<uint16_t> raw = GaussianHalfs();
  std::vector<uint16_t> copy(raw.size());
  for (auto _ : state) {
    std::memcpy(copy.data(), raw.data(), raw.size() * sizeof(uint16_t));
    benchmark::DoNotOptimize(copy.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(raw.size() * sizeof(uint16_t)));
  state.SetLabel("memcpy baseline");
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMicrosecond);

// Args: {codec (0 shuffle-zstd-1, 1 int8/32, 2 int4/32, 3 int8/32+zstd-1, 4 ecq5, 5 ecq6,
//        6 ecq6v5),
//        isa (0 auto, 1 scalar, 2 AVX2)}.
BENCHMARK(BM_Encode)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Decode)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond);

// Small blocks, encoded and decoded one by one as the tiers store and load them; a 1 MiB FP16
// block hides the per-block costs (zstd's frame and tables) and the conversion that these pay.
//   SmallBf16: a vLLM page's worth of BF16 KV, 64 blocks of 32 tokens x 4 KV heads x 64 dims
//              (32 KiB each, TinyLlama's shape), as the connector stores and loads them;
//   SmallF16:  the same in FP16;
//   ModelF16:  the shared stories260K model's FP16 blocks as `kvtier bench codec` cuts them,
//              256 blocks of 64 tokens x 4 KV heads x 8 dims (8 KiB each).
struct SmallBlocks {
  SmallBlocks(int64_t codec, const BlockGeometry& geometry, size_t count, const char* what)
      : g(geometry),
        blocks(count),
        label(what),
        params(ParamsFor(codec)),
        ctx(std::move(CodecContext::Create()).value()) {
    KV_CHECK_OK(ctx.Reserve(g));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    raw.resize(g.elements() * blocks);
    for (auto& h : raw) h = g.dtype == DType::kBF16 ? F32ToBF16(dist(rng)) : F32ToF16(dist(rng));
  }
  std::span<const std::byte> Block(size_t b) const {
    return {reinterpret_cast<const std::byte*>(raw.data()) + b * g.raw_bytes(), g.raw_bytes()};
  }
  // Bytes processed, the ratio of `encoded_total` bytes and the label.
  void Report(benchmark::State& state, size_t encoded_total) const {
    const size_t bytes = blocks * g.raw_bytes();
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
    state.counters["ratio"] = static_cast<double>(bytes) / static_cast<double>(encoded_total);
    state.SetLabel(params.ToString() + " " + label);
  }

  BlockGeometry g;
  size_t blocks;
  std::string label;
  CodecParams params;
  CodecContext ctx;
  std::vector<uint16_t> raw;
};

SmallBlocks SmallBf16(int64_t codec) {
  return SmallBlocks(codec, {.tokens = 32, .kv_heads = 4, .head_dim = 64, .dtype = DType::kBF16},
                     64, "bf16 32-token blocks");
}
SmallBlocks SmallF16(int64_t codec) {
  return SmallBlocks(codec, {.tokens = 32, .kv_heads = 4, .head_dim = 64, .dtype = DType::kF16}, 64,
                     "f16 32-token blocks");
}
SmallBlocks ModelF16(int64_t codec) {
  return SmallBlocks(codec, {.tokens = 64, .kv_heads = 4, .head_dim = 8, .dtype = DType::kF16}, 256,
                     "f16 8 KiB model-shaped blocks");
}

void DecodeSmall(benchmark::State& state, SmallBlocks s) {
  const size_t max = MaxEncodedSize(s.params, s.g).value();
  std::vector<std::byte> encoded(max * s.blocks);
  std::vector<size_t> sizes(s.blocks);
  size_t total = 0;
  for (size_t b = 0; b < s.blocks; ++b) {
    sizes[b] =
        EncodeBlock(s.params, s.g, s.Block(b), {encoded.data() + b * max, max}, &s.ctx).value();
    total += sizes[b];
  }
  std::vector<uint16_t> out(s.g.elements());
  const std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), s.g.raw_bytes());
  for (auto _ : state) {
    for (size_t b = 0; b < s.blocks; ++b) {
      Status st = DecodeBlock({encoded.data() + b * max, sizes[b]}, s.g, out_bytes, &s.ctx);
      benchmark::DoNotOptimize(st);
    }
  }
  s.Report(state, total);
}

void EncodeSmall(benchmark::State& state, SmallBlocks s) {
  std::vector<std::byte> encoded(MaxEncodedSize(s.params, s.g).value());
  size_t total = 0;
  for (auto _ : state) {
    total = 0;
    for (size_t b = 0; b < s.blocks; ++b) {
      total += EncodeBlock(s.params, s.g, s.Block(b), encoded, &s.ctx).value();
    }
  }
  s.Report(state, total);
}

// Args: {codec as above}.
void BM_DecodeSmallBf16(benchmark::State& state) { DecodeSmall(state, SmallBf16(state.range(0))); }
void BM_EncodeSmallBf16(benchmark::State& state) { EncodeSmall(state, SmallBf16(state.range(0))); }
void BM_DecodeSmallF16(benchmark::State& state) { DecodeSmall(state, SmallF16(state.range(0))); }
void BM_EncodeSmallF16(benchmark::State& state) { EncodeSmall(state, SmallF16(state.range(0))); }
void BM_DecodeModelF16(benchmark::State& state) { DecodeSmall(state, ModelF16(state.range(0))); }
void BM_EncodeModelF16(benchmark::State& state) { EncodeSmall(state, ModelF16(state.range(0))); }
BENCHMARK(BM_DecodeSmallBf16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EncodeSmallBf16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeSmallF16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EncodeSmallF16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeModelF16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EncodeModelF16)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);

// zstd level 1 alone on the codes ecq5 hands it for the 1 MiB block above: 512 Ki zigzag bytes
// of a Gaussian at step sd / 8. Bytes per second here are codes (two raw FP16 bytes each): the
// ceiling of ecq's encode, whatever its quantization costs.
void BM_ZstdEcqCodes(benchmark::State& state) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  std::vector<uint8_t> codes(kGeometry.elements());
  for (auto& c : codes) {
    const auto q = static_cast<int32_t>(std::nearbyint(dist(rng)));
    c = static_cast<uint8_t>(q >= 0 ? 2 * q : -2 * q - 1);
  }
  std::vector<uint8_t> out(ZSTD_compressBound(codes.size()));
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  KV_CHECK(cctx != nullptr);
  size_t n = 0;
  for (auto _ : state) {
    n = ZSTD_compressCCtx(cctx, out.data(), out.size(), codes.data(), codes.size(), 1);
    benchmark::DoNotOptimize(n);
  }
  KV_CHECK(!ZSTD_isError(n));
  ZSTD_freeCCtx(cctx);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(codes.size()));
  state.counters["bits_per_code"] =
      8.0 * static_cast<double>(n) / static_cast<double>(codes.size());
  state.SetLabel("zstd -1 on ecq5's codes");
}
BENCHMARK(BM_ZstdEcqCodes)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvtier::codecs

BENCHMARK_MAIN();
