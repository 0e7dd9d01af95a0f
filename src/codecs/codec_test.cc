// Goal: every codec round-trips every dtype (bit-exactly for the lossless ones, within the
// documented error bound for int8/int4), every kernel set (scalar, AVX2, AVX-512) writes the
// same bytes and refuses the same inputs with the same error, those bytes are the ones the
// format has always had, and no malformed input can crash DecodeBlock or be mistaken for a valid
// block. Method: Gaussian and edge-value blocks of several geometries (odd sizes and partial
// groups included) are encoded and decoded with each codec, and with each kernel set on
// deterministic blocks full of edge values (signed zeros, subnormals, FP16 extremes, outlier
// channels, equal runs) with group sizes that do and do not divide the block, against CRCs
// recorded from the earlier encoder; the quantization error of each element is checked against
// the bound computed independently from its group's min and max; encoded blocks are then
// truncated at
// every length, bit-flipped at every header bit, re-sealed with altered fields, and mismatched
// against other geometries, and each case must return Corruption or InvalidArgument. Latent
// blocks (one plane, multi-head latent attention) round-trip through the lossless codecs, keep
// their kind in the header and are refused by the quantizing codecs.
#include "codecs/codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/element_test_util.h"
#include "codecs/quantize.h"
#include "core/coding.h"
#include "core/crc32c.h"

namespace kvtier::codecs {
namespace {

constexpr uint32_t kSeed = 20240611;

// Byte buffer with 64-byte alignment, as blocks have in the tiers.
struct Buffer {
  explicit Buffer(size_t n) : storage((n + 64) / sizeof(float) + 16) {
    auto addr = reinterpret_cast<uintptr_t>(storage.data());
    offset = (64 - addr % 64) % 64;
    size = n;
  }
  std::byte* data() { return reinterpret_cast<std::byte*>(storage.data()) + offset; }
  std::span<std::byte> span() { return {data(), size}; }
  std::vector<float> storage;
  size_t offset = 0;
  size_t size = 0;
};

// Gaussian K and V; a few channels get a large offset and spread (outlier channels, as real keys
// have), so per-channel and per-token groups differ.
Buffer GaussianBlock(const BlockGeometry& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Buffer b(g.raw_bytes());
  const size_t channels = g.channels();
  for (size_t i = 0; i < g.elements(); ++i) {
    const size_t c = i % channels;
    const float spread = (c % 7 == 3) ? 8.0f : 1.0f;
    const float offset = (c % 11 == 5) ? 4.0f : 0.0f;
    StoreElement(g.dtype, dist(rng) * spread + offset, b.data(), i);
  }
  return b;
}

std::vector<std::byte> Encode(const CodecParams& p, const BlockGeometry& g, Buffer& raw,
                              CodecContext* ctx) {
  Result<size_t> max = MaxEncodedSize(p, g);
  EXPECT_TRUE(max.ok()) << max.status().ToString();
  std::vector<std::byte> out(*max);
  Result<size_t> n = EncodeBlock(p, g, raw.span(), out, ctx);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

CodecContext NewContext(KernelIsa isa = KernelIsa::kAuto) {
  Result<CodecContext> ctx = CodecContext::Create({.isa = isa});
  EXPECT_TRUE(ctx.ok());
  return std::move(ctx).value();
}

const BlockGeometry kGeometries[] = {
    {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
    {.tokens = 17, .kv_heads = 3, .head_dim = 5, .dtype = DType::kF16},  // Partial groups.
    {.tokens = 1, .kv_heads = 1, .head_dim = 1, .dtype = DType::kF16},
    {.tokens = 256, .kv_heads = 1, .head_dim = 128, .dtype = DType::kF16},
};
const DType kDTypes[] = {DType::kF16, DType::kBF16, DType::kF32};

TEST(CodecTest, LosslessCodecsRoundTripBitExactly) {
  CodecContext ctx = NewContext();
  for (CodecParams p :
       {CodecParams::Identity(), CodecParams::ShuffleZstd(1), CodecParams::ShuffleZstd(9)}) {
    for (BlockGeometry g : kGeometries) {
      for (DType dt : kDTypes) {
        g.dtype = dt;
        SCOPED_TRACE(p.ToString() + " " + g.ToString());
        Buffer raw = GaussianBlock(g, kSeed);
        // Edge values survive lossless codecs untouched.
        StoreElement(dt, std::numeric_limits<float>::quiet_NaN(), raw.data(), 0);
        StoreElement(dt, -std::numeric_limits<float>::infinity(), raw.data(), g.elements() - 1);
        const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
        Buffer out(g.raw_bytes());
        ASSERT_TRUE(DecodeBlock(enc, g, out.span(), &ctx).ok());
        ASSERT_EQ(std::memcmp(out.data(), raw.data(), g.raw_bytes()), 0);
      }
    }
  }
}

TEST(CodecTest, ShuffleZstdCompressesGaussianHalfs) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 256, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  const std::vector<std::byte> enc = Encode(CodecParams::ShuffleZstd(1), g, raw, &ctx);
  const double ratio = static_cast<double>(g.raw_bytes()) / static_cast<double>(enc.size());
  EXPECT_GT(ratio, 1.05);  // Exponent plane compresses; measured ~1.11 on Gaussian FP16.
}

// `enc` (an encoded block whose payload is a zstd frame) sealed again with its stage compressed
// as one frame with one literals table, as the encoder wrote every zstd payload before it gave
// each plane a segment of its own.
std::vector<std::byte> ResealedAsOneSegment(const std::vector<std::byte>& enc, const CodecParams& p,
                                            const BlockGeometry& g) {
  const std::span<const std::byte> payload(enc.data() + kBlockHeaderBytes,
                                           enc.size() - kBlockHeaderBytes);
  std::vector<std::byte> stage(ZSTD_getFrameContentSize(payload.data(), payload.size()));
  EXPECT_EQ(ZSTD_decompress(stage.data(), stage.size(), payload.data(), payload.size()),
            stage.size());
  std::vector<std::byte> sealed(kBlockHeaderBytes + ZSTD_compressBound(stage.size()));
  const size_t n =
      ZSTD_compress(sealed.data() + kBlockHeaderBytes, sealed.size() - kBlockHeaderBytes,
                    stage.data(), stage.size(), p.zstd_level);
  EXPECT_FALSE(ZSTD_isError(n));
  const BlockHeader h{.params = p, .geometry = g, .raw_bytes = g.raw_bytes(), .payload_bytes = n};
  EncodeBlockHeader(h, std::span<std::byte, kBlockHeaderBytes>(sealed.data(), kBlockHeaderBytes));
  sealed.resize(kBlockHeaderBytes + n);
  return sealed;
}

// A table per segment (byte plane and K/V half for shuffle-zstd; scales, key codes and value
// codes for a quantized stage) makes the payload smaller than one table over the whole stage,
// and a block written the one-table way still decodes to the same values. Shuffle-zstd on the
// model's block shape (64 tokens, 4 heads of 8) with values 1/64 the keys' scale, so the planes'
// high bytes (sign and exponent) differ between keys and values; int4+zstd on the Llama-2-70B
// shape, where its scales and zero points no longer share a table with its codes.
TEST(CodecTest, ZstdPayloadsGiveEachSegmentItsOwnTableAndOneTableBlocksStillDecode) {
  CodecContext ctx = NewContext();
  struct Case {
    CodecParams params;
    BlockGeometry geometry;
  };
  std::vector<Case> cases;
  for (const DType dt : {DType::kF16, DType::kBF16, DType::kF32}) {
    cases.push_back(
        {CodecParams::ShuffleZstd(1), {.tokens = 64, .kv_heads = 4, .head_dim = 8, .dtype = dt}});
  }
  cases.push_back({CodecParams::Int4(32, 1),
                   {.tokens = 256, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16}});
  for (const Case& c : cases) {
    const BlockGeometry& g = c.geometry;
    SCOPED_TRACE(c.params.ToString() + " " + g.ToString());
    Buffer raw = GaussianBlock(g, kSeed);
    for (size_t i = g.half_elements(); i < g.elements(); ++i) {
      StoreElement(g.dtype, LoadElement(g.dtype, raw.data(), i) / 64.0f, raw.data(), i);
    }
    const std::vector<std::byte> enc = Encode(c.params, g, raw, &ctx);
    const std::vector<std::byte> one_table = ResealedAsOneSegment(enc, c.params, g);
    EXPECT_LT(enc.size(), one_table.size());
    Buffer out(g.raw_bytes()), old_out(g.raw_bytes());
    ASSERT_TRUE(DecodeBlock(enc, g, out.span(), &ctx).ok());
    ASSERT_TRUE(DecodeBlock(one_table, g, old_out.span(), &ctx).ok());
    EXPECT_EQ(std::memcmp(out.data(), old_out.data(), g.raw_bytes()), 0);
    if (c.params.lossless()) {
      EXPECT_EQ(std::memcmp(out.data(), raw.data(), g.raw_bytes()), 0);
    }
  }
}

// Checks every element of a decoded quantized block against the bound of docs/codecs.md,
// recomputing each group's min and max from the original.
void ExpectWithinQuantBound(const BlockGeometry& g, const CodecParams& p, const std::byte* orig,
                            const std::byte* got) {
  const size_t channels = g.channels();
  const size_t group = p.group_size;
  const double qmax = (1 << p.bits()) - 1;
  const double out_rel = g.dtype == DType::kF16 ? 0x1p-11 : g.dtype == DType::kBF16 ? 0x1p-8 : 0;
  for (size_t i = 0; i < g.elements(); ++i) {
    const bool key = g.planes() == 2 && i < g.half_elements();  // A latent plane: values only.
    const size_t j = i % g.half_elements();
    const size_t t = j / channels;
    const size_t c = j % channels;
    double mn = INFINITY;
    double mx = -INFINITY;
    const size_t base = key || g.planes() == 1 ? 0 : g.half_elements();
    if (key) {
      for (size_t u = t / group * group; u < std::min<size_t>(g.tokens, (t / group + 1) * group);
           ++u) {
        const double v = LoadElement(g.dtype, orig, base + u * channels + c);
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
    } else {
      for (size_t d = c / group * group; d < std::min(channels, (c / group + 1) * group); ++d) {
        const double v = LoadElement(g.dtype, orig, base + t * channels + d);
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
    }
    const double s = (mx - mn) / qmax;
    const double s16 = F16ToF32(F32ToF16(static_cast<float>(s)));
    const double z16 = F16ToF32(F32ToF16(static_cast<float>(mn)));
    const double x = LoadElement(g.dtype, orig, i);
    const double y = LoadElement(g.dtype, got, i);
    const double bound = s16 / 2 + std::abs(z16 - mn) + qmax * std::abs(s16 - s) +
                         out_rel * (std::abs(x) + s16) + 0x1p-24 +
                         1e-6 * (std::abs(mn) + std::abs(mx));
    ASSERT_LE(std::abs(x - y), bound) << "element " << i << " x=" << x << " y=" << y;
  }
}

TEST(CodecTest, QuantizedCodecsRoundTripWithinBound) {
  CodecContext ctx = NewContext();
  for (CodecParams p : {CodecParams::Int8(32), CodecParams::Int8(64, 1), CodecParams::Int8(8),
                        CodecParams::Int4(32), CodecParams::Int4(64, 3), CodecParams::Int4(8)}) {
    for (BlockGeometry g : kGeometries) {
      for (DType dt : kDTypes) {
        g.dtype = dt;
        SCOPED_TRACE(p.ToString() + " " + g.ToString());
        Buffer raw = GaussianBlock(g, kSeed + 1);
        const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
        ASSERT_FALSE(enc.empty());
        Buffer out(g.raw_bytes());
        Status s = DecodeBlock(enc, g, out.span(), &ctx);
        ASSERT_TRUE(s.ok()) << s.ToString();
        ExpectWithinQuantBound(g, p, raw.data(), out.data());
      }
    }
  }
}

TEST(CodecTest, ConstantGroupsReconstructExactlyForF16) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 32, .kv_heads = 1, .head_dim = 32, .dtype = DType::kF16};
  Buffer raw(g.raw_bytes());
  for (size_t i = 0; i < g.elements(); ++i) StoreElement(g.dtype, 1.25f, raw.data(), i);
  for (CodecParams p : {CodecParams::Int8(32), CodecParams::Int4(32)}) {
    const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
    Buffer out(g.raw_bytes());
    ASSERT_TRUE(DecodeBlock(enc, g, out.span(), &ctx).ok());
    EXPECT_EQ(std::memcmp(out.data(), raw.data(), g.raw_bytes()), 0);
  }
}

// Every kernel set this CPU runs: scalar first, then AVX2 and AVX-512 where present.
std::vector<KernelIsa> AvailableIsas() {
  std::vector<KernelIsa> isas = {KernelIsa::kScalar};
  if (CpuHasAvx2()) isas.push_back(KernelIsa::kAvx2);
  if (CpuHasAvx512()) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

// Deterministic values from integer arithmetic alone (no std distributions, so the same on every
// standard library): spread over [-8, 8] with outlier channels, runs of equal values, signed
// zeros, subnormals of the dtype and of FP16, and the FP16 extremes.
Buffer NastyBlock(const BlockGeometry& g, uint32_t seed) {
  Buffer b(g.raw_bytes());
  uint32_t state = seed;
  const float top = g.dtype == DType::kBF16 ? 65280.0f : 65504.0f;  // Largest in range.
  const float specials[] = {0.0f, -0.0f, 0x1p-24f, -0x1p-20f, 1e-40f, top, -top, 1.0f};
  float last = 0.0f;
  for (size_t i = 0; i < g.elements(); ++i) {
    state = state * 1664525u + 1013904223u;
    const uint32_t r = state >> 8;
    float v = static_cast<float>(static_cast<int>(r % 16001) - 8000) / 1000.0f;
    if (i % g.channels() % 9 == 4) v = v * 300.0f + 1000.0f;  // Outlier channel.
    if (r % 23 == 0) v = specials[(r / 23) % std::size(specials)];
    if (r % 29 == 0) v = last;
    last = v;
    StoreElement(g.dtype, v, b.data(), i);
  }
  return b;
}

TEST(CodecTest, AllKernelSetsWriteIdenticalBytes) {
  std::vector<CodecContext> ctx;
  for (KernelIsa isa : AvailableIsas()) {
    ctx.push_back(NewContext(isa));
    ASSERT_EQ(ctx.back().kernels().isa, isa);
  }
  const BlockGeometry shapes[] = {
      {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
      {.tokens = 17, .kv_heads = 3, .head_dim = 5, .dtype = DType::kF16},
      {.tokens = 1, .kv_heads = 1, .head_dim = 1, .dtype = DType::kF16},
      {.tokens = 33, .kv_heads = 2, .head_dim = 24, .dtype = DType::kF16},
      {.tokens = 8, .kv_heads = 5, .head_dim = 7, .dtype = DType::kF16},
      {.tokens = 100, .kv_heads = 4, .head_dim = 128, .dtype = DType::kF16},
      {.tokens = 3, .kv_heads = 41, .head_dim = 100, .dtype = DType::kF16},
  };
  const CodecParams params[] = {CodecParams::ShuffleZstd(1), CodecParams::Int8(8),
                                CodecParams::Int8(13),       CodecParams::Int8(32),
                                CodecParams::Int8(33, 1),    CodecParams::Int8(1024),
                                CodecParams::Int4(8),        CodecParams::Int4(17),
                                CodecParams::Int4(64, 3),    CodecParams::Int4(1024)};
  for (const CodecParams& p : params) {
    for (BlockGeometry g : shapes) {
      for (DType dt : kDTypes) {
        g.dtype = dt;
        for (int data = 0; data < 2; ++data) {
          SCOPED_TRACE(p.ToString() + " " + g.ToString() + (data == 0 ? " gaussian" : " nasty"));
          Buffer raw = data == 0 ? GaussianBlock(g, kSeed + 2) : NastyBlock(g, kSeed + 3);
          const std::vector<std::byte> want = Encode(p, g, raw, &ctx[0]);
          ASSERT_FALSE(want.empty());
          Buffer want_out(g.raw_bytes());
          ASSERT_TRUE(DecodeBlock(want, g, want_out.span(), &ctx[0]).ok());
          for (size_t i = 1; i < ctx.size(); ++i) {
            SCOPED_TRACE(i == 1 ? "avx2" : "avx512");
            ASSERT_EQ(Encode(p, g, raw, &ctx[i]), want);
            Buffer out(g.raw_bytes());
            ASSERT_TRUE(DecodeBlock(want, g, out.span(), &ctx[i]).ok());
            ASSERT_EQ(std::memcmp(out.data(), want_out.data(), g.raw_bytes()), 0);
          }
        }
      }
    }
  }
}

// CRC32C of encoded blocks as this format writes them (recorded from the encoder before the
// AVX-512 kernels and the chunked quantizer; the zstd-staged case again when each segment of the
// stage got its own literals table; the BF16 shuffle-zstd case with its literals-first zstd
// parameters; the ecq cases before each head's step came from one log2 of its spreads' product):
// a change of any byte fails here.
TEST(CodecTest, EncodedBytesStayTheSame) {
  struct Case {
    CodecParams params;
    BlockGeometry geometry;
    uint32_t crc;
  };
  const Case cases[] = {
      {CodecParams::Int8(32),
       {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
       0xa3656c4bu},
      {CodecParams::Int4(32),
       {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
       0xf3babb92u},
      {CodecParams::Int8(13),
       {.tokens = 33, .kv_heads = 2, .head_dim = 24, .dtype = DType::kBF16},
       0x6975a733u},
      {CodecParams::Int4(8),
       {.tokens = 17, .kv_heads = 3, .head_dim = 5, .dtype = DType::kF32},
       0x31a545e4u},
      {CodecParams::Int8(64, 1),
       {.tokens = 100, .kv_heads = 4, .head_dim = 128, .dtype = DType::kF16},
       0xaa4f2803u},
      {CodecParams::Int4(1024),
       {.tokens = 3, .kv_heads = 41, .head_dim = 100, .dtype = DType::kF16},
       0x0f852837u},
      // BF16 byte planes go through zstd with kvtier's own level-1 parameters (codec.cc,
      // SetLiteralsFirst): zstd's level 1 writes other bytes.
      {CodecParams::ShuffleZstd(1),
       {.tokens = 32, .kv_heads = 4, .head_dim = 64, .dtype = DType::kBF16},
       0xefc25be3u},
      // The entropy-coded quantizers: each head's step byte, centers, codes and escapes.
      {CodecParams::Ecq(CodecId::kEcq5),
       {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
       0xaecbde5au},
      {CodecParams::Ecq(CodecId::kEcq6),
       {.tokens = 32, .kv_heads = 4, .head_dim = 64, .dtype = DType::kBF16},
       0x862ebe1eu},
      {CodecParams::Ecq(CodecId::kEcq6V5),
       {.tokens = 17, .kv_heads = 3, .head_dim = 200, .dtype = DType::kF32},
       0x44421393u},
      {CodecParams::Ecq(CodecId::kEcq5),
       {.tokens = 48,
        .kv_heads = 1,
        .head_dim = 40,
        .dtype = DType::kF16,
        .kind = LayoutKind::kLatent},
       0xe5712751u},
  };
  for (KernelIsa isa : AvailableIsas()) {
    CodecContext ctx = NewContext(isa);
    for (const Case& c : cases) {
      Buffer raw = NastyBlock(c.geometry, 7);
      const std::vector<std::byte> enc = Encode(c.params, c.geometry, raw, &ctx);
      EXPECT_EQ(crc32c::Value(enc), c.crc)
          << c.params.ToString() << " " << c.geometry.ToString() << " isa " << static_cast<int>(isa)
          << ": 0x" << std::hex << crc32c::Value(enc);
    }
  }
}

TEST(CodecTest, QuantizationRefusesNonFiniteAndOutOfRangeInput) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF32};
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    70000.0f, -1e6f}) {
    for (size_t at : {size_t{3}, g.half_elements() + 5}) {  // In K, then in V.
      Buffer raw = GaussianBlock(g, kSeed);
      StoreElement(g.dtype, bad, raw.data(), at);
      std::vector<std::byte> out(*MaxEncodedSize(CodecParams::Int8(), g));
      Result<size_t> r = EncodeBlock(CodecParams::Int8(), g, raw.span(), out, &ctx);
      EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
    }
  }
}

TEST(CodecTest, AllKernelSetsRefuseTheSameInputsWithTheSameError) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const BlockGeometry shape{.tokens = 40, .kv_heads = 3, .head_dim = 12, .dtype = DType::kF16};
  for (DType dt : kDTypes) {
    BlockGeometry g = shape;
    g.dtype = dt;
    // (position, value) pairs; out-of-range values only where the dtype can hold them.
    std::vector<std::vector<std::pair<size_t, float>>> bad = {{{0, nan}},
                                                              {{g.half_elements() - 1, -inf}},
                                                              {{g.half_elements() + 37, inf}},
                                                              {{g.elements() - 1, nan}}};
    if (dt != DType::kF16) {
      bad.push_back({{5, 70000.0f}});
      bad.push_back({{g.half_elements() + 400, -1e6f}});
      bad.push_back({{5, 70000.0f}, {g.half_elements() - 2, nan}});  // Both: NaN is named.
      bad.push_back({{g.half_elements() + 1, -1e6f}, {g.elements() - 3, nan}});
    }
    for (const auto& values : bad) {
      for (CodecParams p : {CodecParams::Int8(8), CodecParams::Int4(32, 1)}) {
        SCOPED_TRACE(p.ToString() + " " + g.ToString() + " at " +
                     std::to_string(values.back().first));
        Buffer raw = NastyBlock(g, kSeed);
        for (const auto& [at, v] : values) StoreElement(dt, v, raw.data(), at);
        const bool has_nan = std::any_of(values.begin(), values.end(),
                                         [](const auto& pv) { return !std::isfinite(pv.second); });
        std::vector<std::byte> out(*MaxEncodedSize(p, g));
        for (KernelIsa isa : AvailableIsas()) {
          CodecContext ctx = NewContext(isa);
          Result<size_t> r = EncodeBlock(p, g, raw.span(), out, &ctx);
          ASSERT_TRUE(r.status().IsInvalidArgument()) << static_cast<int>(isa);
          EXPECT_NE(r.status().message().find(has_nan ? "NaN or Inf" : "FP16 range"),
                    std::string::npos)
              << static_cast<int>(isa) << " " << r.status().ToString();
        }
      }
    }
  }
}

TEST(CodecTest, ParamsAreValidated) {
  EXPECT_TRUE(CodecParams::ShuffleZstd(1).Validate().ok());
  EXPECT_TRUE(CodecParams::ShuffleZstd(22).Validate().ok());
  for (int level : {0, -1, -5, 23, 100}) {
    EXPECT_TRUE(CodecParams::ShuffleZstd(level).Validate().IsInvalidArgument()) << level;
    EXPECT_FALSE(MakeCodec(CodecParams::ShuffleZstd(level)).ok()) << level;
  }
  EXPECT_TRUE(CodecParams::Int8(32, 0).Validate().ok());
  EXPECT_TRUE(CodecParams::Int8(32, 23).Validate().IsInvalidArgument());
  EXPECT_TRUE(CodecParams::Int4(32, -1).Validate().IsInvalidArgument());
  EXPECT_TRUE(CodecParams::Int8(7).Validate().IsInvalidArgument());
  EXPECT_TRUE(CodecParams::Int4(1025).Validate().IsInvalidArgument());
  EXPECT_TRUE(CodecParams::Int4(0).Validate().IsInvalidArgument());
  EXPECT_TRUE(
      (CodecParams{.codec = CodecId::kIdentity, .zstd_level = 1}.Validate()).IsInvalidArgument());
  EXPECT_TRUE((CodecParams{.codec = static_cast<CodecId>(9)}.Validate()).IsInvalidArgument());
  const BlockGeometry g{.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16};
  EXPECT_TRUE(MaxEncodedSize(CodecParams::ShuffleZstd(0), g).status().IsInvalidArgument());
}

// A buffer sized by MaxEncodedSizeAnyCodec holds a block written by any codec with any valid
// parameters (engines size read buffers with it, whatever codec they were opened with).
TEST(CodecTest, MaxEncodedSizeAnyCodecBoundsEveryCodec) {
  const BlockGeometry geometries[] = {
      {.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16},
      {.tokens = 7, .kv_heads = 3, .head_dim = 5, .dtype = DType::kBF16},
      {.tokens = 64, .kv_heads = 2, .head_dim = 128, .dtype = DType::kF32},
  };
  for (const BlockGeometry& g : geometries) {
    Result<size_t> any = MaxEncodedSizeAnyCodec(g);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    for (const uint32_t group : {kQuantGroupSizeMin, 32u, kQuantGroupSizeMax}) {
      for (const int level : {0, kZstdLevelMin, kZstdLevelMax}) {
        const CodecParams all[] = {CodecParams::Int8(group, level),
                                   CodecParams::Int4(group, level)};
        for (const CodecParams& p : all) EXPECT_GE(*any, *MaxEncodedSize(p, g)) << p.ToString();
      }
    }
    EXPECT_GE(*any, *MaxEncodedSize(CodecParams::Identity(), g));
    EXPECT_GE(*any, *MaxEncodedSize(CodecParams::ShuffleZstd(kZstdLevelMax), g));
  }
  EXPECT_TRUE(MaxEncodedSizeAnyCodec(BlockGeometry{}).status().IsInvalidArgument());
}

TEST(CodecTest, BuffersAndGeometryAreValidated) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  const CodecParams p = CodecParams::ShuffleZstd(1);
  std::vector<std::byte> out(*MaxEncodedSize(p, g));
  EXPECT_TRUE(EncodeBlock(p, g, raw.span().first(10), out, &ctx).status().IsInvalidArgument());
  EXPECT_TRUE(EncodeBlock(p, g, raw.span(), std::span(out).first(out.size() - 1), &ctx)
                  .status()
                  .IsInvalidArgument());
  BlockGeometry bad = g;
  bad.tokens = 0;
  EXPECT_TRUE(EncodeBlock(p, bad, raw.span(), out, &ctx).status().IsInvalidArgument());
  bad = g;
  bad.dtype = static_cast<DType>(0);
  EXPECT_TRUE(bad.Validate().IsInvalidArgument());
  bad = g;
  bad.head_dim = 5000;
  EXPECT_TRUE(bad.Validate().IsInvalidArgument());
  const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
  Buffer small(g.raw_bytes() - 2);
  EXPECT_TRUE(DecodeBlock(enc, g, small.span(), &ctx).IsInvalidArgument());
}

// Recomputes the header CRC after a test altered header fields, so that the field checks (not
// the checksum) must catch the change.
void Reseal(std::vector<std::byte>* enc) {
  EncodeFixed32(enc->data() + kBlockHeaderCrcOffset,
                crc32c::Mask(crc32c::Value(enc->data(), kBlockHeaderCrcOffset)));
}

const CodecParams kAllCodecs[] = {CodecParams::Identity(),
                                  CodecParams::ShuffleZstd(3),
                                  CodecParams::Int8(16),
                                  CodecParams::Int4(16, 1),
                                  CodecParams::Quantized(CodecId::kInt8Rot, 16),
                                  CodecParams::Quantized(CodecId::kInt4Rot, 16, 1),
                                  CodecParams::Quantized(CodecId::kK8V4, 16),
                                  CodecParams::Quantized(CodecId::kK8V4Rot, 8, 2)};

TEST(CodecCorruptionTest, EveryTruncationIsAnError) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  Buffer out(g.raw_bytes());
  for (const CodecParams& p : kAllCodecs) {
    const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
    for (size_t len = 0; len < enc.size(); ++len) {
      Status s = DecodeBlock(std::span(enc).first(len), g, out.span(), &ctx);
      ASSERT_TRUE(s.IsCorruption()) << p.ToString() << " len " << len << ": " << s.ToString();
    }
    std::vector<std::byte> longer = enc;
    longer.push_back(std::byte{0});
    EXPECT_TRUE(DecodeBlock(longer, g, out.span(), &ctx).IsCorruption());
  }
}

TEST(CodecCorruptionTest, EveryHeaderBitFlipIsAnError) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kBF16};
  Buffer raw = GaussianBlock(g, kSeed);
  Buffer out(g.raw_bytes());
  for (const CodecParams& p : kAllCodecs) {
    const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
    for (size_t bit = 0; bit < kBlockHeaderBytes * 8; ++bit) {
      std::vector<std::byte> bad = enc;
      bad[bit / 8] ^= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
      Status s = DecodeBlock(bad, g, out.span(), &ctx);
      ASSERT_TRUE(s.IsCorruption()) << p.ToString() << " bit " << bit << ": " << s.ToString();
    }
  }
}

TEST(CodecCorruptionTest, ResealedBadFieldsAreCaught) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  Buffer out(g.raw_bytes());
  const std::vector<std::byte> enc = Encode(CodecParams::Int8(16), g, raw, &ctx);
  struct Edit {
    size_t offset;
    uint8_t value;
    const char* what;
  };
  for (const Edit& e :
       {Edit{4, 2, "version"}, Edit{5, 0, "codec 0"}, Edit{5, 99, "codec 99"}, Edit{6, 7, "dtype"},
        Edit{7, 4, "bits"}, Edit{8, 30, "zstd level"}, Edit{9, 1, "flags"},
        Edit{10, 3, "group size"}, Edit{12, 17, "tokens"}, Edit{24, 1, "raw size"},
        Edit{32, 0, "payload size"}, Edit{40, 1, "reserved"}}) {
    std::vector<std::byte> bad = enc;
    bad[e.offset] = std::byte{e.value};
    Reseal(&bad);
    Status s = DecodeBlock(bad, g, out.span(), &ctx);
    EXPECT_TRUE(s.IsCorruption()) << e.what << ": " << s.ToString();
  }
  std::vector<std::byte> bad = enc;
  EncodeFixed64(bad.data() + 32, uint64_t{1} << 62);  // Absurd payload size.
  Reseal(&bad);
  EXPECT_TRUE(DecodeBlock(bad, g, out.span(), &ctx).IsCorruption());
  bad = enc;
  bad[0] = std::byte{'X'};
  EXPECT_TRUE(DecodeBlock(bad, g, out.span(), &ctx).IsCorruption());
}

TEST(CodecCorruptionTest, GeometryMismatchIsCorruption) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  const std::vector<std::byte> enc = Encode(CodecParams::Identity(), g, raw, &ctx);
  Buffer out(g.raw_bytes() * 4);
  for (BlockGeometry other :
       {BlockGeometry{16, 2, 16, DType::kF16}, BlockGeometry{16, 4, 4, DType::kF16},
        BlockGeometry{16, 2, 8, DType::kBF16}}) {
    Status s = DecodeBlock(enc, other, out.span(), &ctx);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("geometry"), std::string::npos);
  }
}

TEST(CodecCorruptionTest, PayloadMutationsNeverCrash) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Buffer raw = GaussianBlock(g, kSeed);
  Buffer out(g.raw_bytes());
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  for (const CodecParams& p : kAllCodecs) {
    const std::vector<std::byte> enc = Encode(p, g, raw, &ctx);
    int errors = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<std::byte> bad = enc;
      const size_t at = kBlockHeaderBytes + rng() % (enc.size() - kBlockHeaderBytes);
      bad[at] ^= std::byte{static_cast<uint8_t>(1 + rng() % 255)};
      Status s = DecodeBlock(bad, g, out.span(), &ctx);
      if (!s.ok()) {
        ASSERT_TRUE(s.IsCorruption()) << s.ToString();
        ++errors;
      }
    }
    // zstd frames detect most mutations; raw payloads cannot (the tier's record CRC does).
    if (p.uses_zstd()) {
      EXPECT_GT(errors, 0) << p.ToString();
    }
  }
}

TEST(CodecBatchTest, BatchReportsPerJobStatus) {
  CodecContext ctx = NewContext();
  Result<std::unique_ptr<Codec>> codec = MakeCodec(CodecParams::Int4(32));
  ASSERT_TRUE(codec.ok());
  const BlockGeometry g{.tokens = 32, .kv_heads = 2, .head_dim = 16, .dtype = DType::kF16};
  Buffer a = GaussianBlock(g, 1);
  Buffer b = GaussianBlock(g, 2);
  const size_t max = *(*codec)->MaxEncodedSize(g);
  std::vector<std::byte> ea(max), eb(max), ec(max);
  std::vector<EncodeJob> jobs = {{.geometry = g, .raw = a.span(), .out = ea},
                                 {.geometry = g, .raw = b.span().first(8), .out = eb},
                                 {.geometry = g, .raw = b.span(), .out = ec}};
  Status s = (*codec)->EncodeBatch(jobs, &ctx);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_TRUE(jobs[0].status.ok());
  EXPECT_TRUE(jobs[1].status.IsInvalidArgument());
  EXPECT_TRUE(jobs[2].status.ok());
  Buffer oa(g.raw_bytes());
  Buffer oc(g.raw_bytes());
  std::vector<DecodeJob> dec = {
      {.expected = g, .encoded = std::span(ea).first(jobs[0].encoded_bytes), .out = oa.span()},
      {.expected = g, .encoded = std::span(ec).first(jobs[2].encoded_bytes), .out = oc.span()}};
  EXPECT_TRUE((*codec)->DecodeBatch(dec, &ctx).ok());
  Result<BlockHeader> h = DecodeBlockHeader(ea);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->params, CodecParams::Int4(32));
  EXPECT_EQ(h->geometry, g);
}

TEST(CodecTest, EncodedSizeStaysWithinBoundOnIncompressibleData) {
  CodecContext ctx = NewContext();
  ASSERT_TRUE(
      ctx.Reserve({.tokens = 64, .kv_heads = 4, .head_dim = 32, .dtype = DType::kF32}).ok());
  const BlockGeometry g{.tokens = 64, .kv_heads = 4, .head_dim = 32, .dtype = DType::kF16};
  Buffer raw(g.raw_bytes());
  std::mt19937 rng(kSeed);
  for (size_t i = 0; i < g.raw_bytes(); ++i) raw.data()[i] = std::byte{static_cast<uint8_t>(rng())};
  const std::vector<std::byte> enc = Encode(CodecParams::ShuffleZstd(1), g, raw, &ctx);
  EXPECT_LE(enc.size(), *MaxEncodedSize(CodecParams::ShuffleZstd(1), g));
  Buffer out(g.raw_bytes());
  ASSERT_TRUE(DecodeBlock(enc, g, out.span(), &ctx).ok());
  EXPECT_EQ(std::memcmp(out.data(), raw.data(), g.raw_bytes()), 0);
}

// A latent block (multi-head latent attention: one plane [token][head_dim], no K/V split)
// round-trips bit-exactly through the lossless codecs, carries its kind in the header (flags bit
// 2), never decodes as a K/V block of the same numbers nor the reverse; int8 and int4 quantize
// it per token along the latent row within the documented bound, and k8v4 and the rotated codecs
// refuse it up front.
TEST(LatentCodecTest, LosslessRoundTripAndKindIsChecked) {
  CodecContext ctx = NewContext();
  const BlockGeometry latent{.tokens = 16,
                             .kv_heads = 1,
                             .head_dim = 576,
                             .dtype = DType::kBF16,
                             .kind = LayoutKind::kLatent};
  BlockGeometry kv = latent;
  kv.kind = LayoutKind::kKv;
  ASSERT_TRUE(latent.Validate().ok());
  EXPECT_EQ(latent.raw_bytes(), 16u * 576 * 2);
  EXPECT_EQ(kv.raw_bytes(), 2 * latent.raw_bytes());
  Buffer out(kv.raw_bytes());
  for (CodecParams p : {CodecParams::Identity(), CodecParams::ShuffleZstd(3)}) {
    SCOPED_TRACE(p.ToString());
    Buffer raw = GaussianBlock(latent, kSeed);
    const std::vector<std::byte> enc = Encode(p, latent, raw, &ctx);
    ASSERT_GE(enc.size(), kBlockHeaderBytes);
    EXPECT_EQ(static_cast<uint8_t>(enc[9]) & kBlockFlagLatent, kBlockFlagLatent);
    ASSERT_TRUE(DecodeBlock(enc, latent, out.span(), &ctx).ok());
    EXPECT_EQ(std::memcmp(out.data(), raw.data(), latent.raw_bytes()), 0);
    EXPECT_TRUE(DecodeBlock(enc, kv, out.span(), &ctx).IsCorruption());
    Buffer kv_raw = GaussianBlock(kv, kSeed);
    const std::vector<std::byte> kv_enc = Encode(p, kv, kv_raw, &ctx);
    EXPECT_TRUE(DecodeBlock(kv_enc, latent, out.span(), &ctx).IsCorruption());
    // The latent flag set on a K/V block (resealed) no longer matches its raw size.
    std::vector<std::byte> flipped = kv_enc;
    flipped[9] |= std::byte{kBlockFlagLatent};
    Reseal(&flipped);
    EXPECT_TRUE(DecodeBlock(flipped, kv, out.span(), &ctx).IsCorruption());
  }
  for (CodecParams p : {CodecParams::Int8(32), CodecParams::Int4(32, 1), CodecParams::Int8(64)}) {
    SCOPED_TRACE(p.ToString());
    Buffer raw = GaussianBlock(latent, kSeed + 2);
    const std::vector<std::byte> enc = Encode(p, latent, raw, &ctx);
    ASSERT_FALSE(enc.empty());
    // No key section: per-token parameters and codes of the one plane only.
    const size_t params_bytes = 2 * 2 * latent.tokens * ((576 + p.group_size - 1) / p.group_size);
    const size_t codes = latent.half_elements() * p.bits() / 8;
    if (!p.uses_zstd()) {
      EXPECT_EQ(enc.size(), kBlockHeaderBytes + params_bytes + codes);
    }
    ASSERT_TRUE(DecodeBlock(enc, latent, out.span(), &ctx).ok());
    ExpectWithinQuantBound(latent, p, raw.data(), out.data());
  }
  for (const CodecParams& p : kAllCodecs) {
    if (LatentCodecOk(p)) continue;
    Result<size_t> max = MaxEncodedSize(p, latent);
    ASSERT_FALSE(max.ok()) << p.ToString();
    EXPECT_TRUE(max.status().IsInvalidArgument());
    EXPECT_NE(max.status().message().find("latent"), std::string::npos) << max.status().message();
  }
  Result<size_t> any = MaxEncodedSizeAnyCodec(latent);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_GE(*any, kBlockHeaderBytes + latent.raw_bytes());
}

}  // namespace
}  // namespace kvtier::codecs
