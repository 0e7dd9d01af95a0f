// Goal: the randomized Hadamard rotation is orthogonal and fixed, and the codecs built on it
// (int8-rot, int4-rot) and on mixed bit widths (k8v4, k8v4-rot) round-trip within their error
// bounds, leave the unrotated parts byte-identical to the plain codecs, write the same bytes with
// every kernel set and forever, and refuse bad geometry and corrupted metadata cleanly.
// Method: the rotation is checked against an independent dense matrix product (H[i][j] =
// (-1)^popcount(i & j) times the signs, over sqrt(head_dim)) and against a plain stage-by-stage
// loop, bit for bit; rotate-then-unrotate must give the input back within F32 rounding. Blocks
// of Gaussian data with outlier channels go through each new codec: keys are checked element by
// element against the per-channel bound of docs/codecs.md, values per head against the same
// bound taken in the rotated domain (an orthogonal map keeps the Euclidean norm of the error).
// Headers are edited field by field, re-sealed with a valid CRC, and must decode as Corruption.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/codec.h"
#include "codecs/element_test_util.h"
#include "codecs/quantize.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "core/limits.h"

namespace kvtier::codecs {
namespace {

constexpr uint32_t kSeed = 20261206;

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// The transform as docs/codecs.md writes it, stage by stage, with separate passes.
void PlainRotate(float* x, size_t n, uint32_t d, bool inverse) {
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (!inverse) {
    for (size_t i = 0; i < n; ++i) x[i] *= HadamardSign(i % d);
  }
  for (size_t h = 1; h < d; h <<= 1) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) x[i] *= s;
  if (inverse) {
    for (size_t i = 0; i < n; ++i) x[i] *= HadamardSign(i % d);
  }
}

const uint32_t kHeadDims[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};

TEST(HadamardTest, MatchesTheDenseMatrixAndIsOrthogonal) {
  for (const uint32_t d : kHeadDims) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    const size_t heads = d >= 1024 ? 1 : 3;
    const std::vector<float> x = Gaussian(heads * d, kSeed + d);
    std::vector<float> y = x;
    HadamardRotate(GetKernels(KernelIsa::kScalar), y.data(), y.size(), d);
    // Dense product (double) for the smaller sizes: y = s * H * D * x.
    if (d <= 256) {
      for (size_t h = 0; h < heads; ++h) {
        for (size_t i = 0; i < d; ++i) {
          double acc = 0;
          for (size_t j = 0; j < d; ++j) {
            const double hij = (std::popcount(i & j) % 2 == 0) ? 1.0 : -1.0;
            acc += hij * HadamardSign(j) * x[h * d + j];
          }
          acc /= std::sqrt(static_cast<double>(d));
          ASSERT_NEAR(y[h * d + i], acc, 1e-5 * (1 + std::abs(acc)) * std::log2(2.0 * d));
        }
      }
    }
    // The norm of each head is kept, and the inverse gives the input back.
    for (size_t h = 0; h < heads; ++h) {
      double nx = 0, ny = 0;
      for (size_t i = 0; i < d; ++i) {
        nx += double{x[h * d + i]} * x[h * d + i];
        ny += double{y[h * d + i]} * y[h * d + i];
      }
      EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), 1e-5 * std::sqrt(nx));
    }
    std::vector<float> back = y;
    HadamardUnrotate(GetKernels(KernelIsa::kScalar), back.data(), back.size(), d);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(back[i], x[i], 4e-7 * std::log2(2.0 * d) * 8) << i;
    }
  }
}

// The fused passes (scalar, and AVX2 where the CPU has it) do the same F32 operations in the same
// order as the plain loops: encoded bytes cannot depend on how the transform is scheduled.
TEST(HadamardTest, FusedPassesAreBitExactWithThePlainLoops) {
  std::vector<KernelIsa> isas = {KernelIsa::kScalar};
  if (CpuHasAvx2()) isas.push_back(KernelIsa::kAvx2);
  if (CpuHasAvx512()) isas.push_back(KernelIsa::kAvx512);
  for (const KernelIsa isa : isas) {
    for (const uint32_t d : kHeadDims) {
      const size_t n = (d >= 1024 ? 2 : 5) * d;
      for (const bool inverse : {false, true}) {
        std::vector<float> x = Gaussian(n, kSeed + 7 * d);
        x[0] = 65504.0f;  // Extremes, subnormals and signed zeros too.
        if (n > 2) x[1] = -0.0f;
        if (n > 3) x[2] = 1e-40f;
        std::vector<float> want = x;
        PlainRotate(want.data(), n, d, inverse);
        if (inverse) {
          HadamardUnrotate(GetKernels(isa), x.data(), n, d);
        } else {
          HadamardRotate(GetKernels(isa), x.data(), n, d);
        }
        ASSERT_EQ(std::memcmp(x.data(), want.data(), n * sizeof(float)), 0)
            << "isa " << static_cast<int>(isa) << " head_dim " << d
            << (inverse ? " inverse" : " forward");
      }
    }
  }
}

// The signs are part of the format: stored blocks depend on them.
TEST(HadamardTest, SignsAreFixed) {
  uint32_t bits = 0;
  for (size_t i = 0; i < 32; ++i) {
    const float s = HadamardSign(i);
    ASSERT_TRUE(s == 1.0f || s == -1.0f);
    if (s < 0) bits |= 1u << i;
  }
  EXPECT_EQ(bits, 0xffe559a3u) << std::hex << bits;
  size_t negative = 0;
  for (size_t i = 0; i < kHeadDimMax; ++i) negative += HadamardSign(i) < 0 ? 1u : 0u;
  EXPECT_GT(negative, kHeadDimMax / 2 - 200);
  EXPECT_LT(negative, kHeadDimMax / 2 + 200);
}

// ---------------------------------------------------------------------------------------------
// The codecs

struct Block {
  BlockGeometry g;
  std::vector<float> storage;  // Aligned for every dtype.
  std::byte* data() { return reinterpret_cast<std::byte*>(storage.data()); }
  std::span<std::byte> span() { return {data(), g.raw_bytes()}; }
};

// Gaussian K and V with outlier channels (a large spread every 7th, an offset every 11th).
Block MakeBlock(const BlockGeometry& g, uint32_t seed) {
  Block b{g, std::vector<float>((g.raw_bytes() + 3) / 4 + 1)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t i = 0; i < g.elements(); ++i) {
    const size_t c = i % g.channels();
    const float spread = (c % 7 == 3) ? 8.0f : 1.0f;
    const float offset = (c % 11 == 5) ? 4.0f : 0.0f;
    StoreElement(g.dtype, dist(rng) * spread + offset, b.data(), i);
  }
  return b;
}

CodecContext NewContext(KernelIsa isa = KernelIsa::kAuto) {
  Result<CodecContext> ctx = CodecContext::Create({.isa = isa});
  EXPECT_TRUE(ctx.ok());
  return std::move(ctx).value();
}

std::vector<std::byte> Encode(const CodecParams& p, Block& raw, CodecContext* ctx) {
  Result<size_t> max = MaxEncodedSize(p, raw.g);
  EXPECT_TRUE(max.ok()) << max.status().ToString();
  if (!max.ok()) return {};
  std::vector<std::byte> out(*max);
  Result<size_t> n = EncodeBlock(p, raw.g, raw.span(), out, ctx);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

// The per-element bound of docs/codecs.md for a group with minimum mn and maximum mx.
double GroupBound(double mn, double mx, double qmax) {
  const double s = (mx - mn) / qmax;
  const double s16 = F16ToF32(F32ToF16(static_cast<float>(s)));
  const double z16 = F16ToF32(F32ToF16(static_cast<float>(mn)));
  return s16 / 2 + std::abs(z16 - mn) + qmax * std::abs(s16 - s) + 0x1p-24 +
         1e-6 * (std::abs(mn) + std::abs(mx));
}

// Keys element by element (per channel, groups of G tokens, never rotated); values per token and
// head: the Euclidean norm of the head's error is at most that of the per-element bounds of its
// rotated values (the rotation is orthogonal), plus the F32 rounding of the transforms and the
// rounding of the output to the block dtype.
void ExpectWithinBound(const CodecParams& p, const Block& orig, const std::byte* got) {
  const BlockGeometry& g = orig.g;
  const size_t channels = g.channels(), group = p.group_size, n = g.half_elements();
  const double out_rel = g.dtype == DType::kF16 ? 0x1p-11 : g.dtype == DType::kBF16 ? 0x1p-8 : 0;
  const double kq = (1 << p.key_bits()) - 1, vq = (1 << p.value_bits()) - 1;
  const auto* x = reinterpret_cast<const std::byte*>(orig.storage.data());
  for (size_t c = 0; c < channels; ++c) {
    for (size_t t0 = 0; t0 < g.tokens; t0 += group) {
      const size_t t1 = std::min<size_t>(g.tokens, t0 + group);
      double mn = INFINITY, mx = -INFINITY;
      for (size_t t = t0; t < t1; ++t) {
        mn = std::min<double>(mn, LoadElement(g.dtype, x, t * channels + c));
        mx = std::max<double>(mx, LoadElement(g.dtype, x, t * channels + c));
      }
      for (size_t t = t0; t < t1; ++t) {
        const double a = LoadElement(g.dtype, x, t * channels + c);
        const double b = LoadElement(g.dtype, got, t * channels + c);
        ASSERT_LE(std::abs(a - b), GroupBound(mn, mx, kq) + out_rel * (std::abs(a) + mx - mn))
            << "key token " << t << " channel " << c;
      }
    }
  }
  std::vector<float> row(channels);
  for (size_t t = 0; t < g.tokens; ++t) {
    for (size_t c = 0; c < channels; ++c) row[c] = LoadElement(g.dtype, x, n + t * channels + c);
    if (p.rotated()) {
      HadamardRotate(GetKernels(KernelIsa::kScalar), row.data(), channels, g.head_dim);
    }
    std::vector<double> bound(channels);
    for (size_t c0 = 0; c0 < channels; c0 += group) {
      const size_t c1 = std::min(channels, c0 + group);
      double lo = INFINITY, hi = -INFINITY;
      for (size_t c = c0; c < c1; ++c) {
        lo = std::min<double>(lo, row[c]);
        hi = std::max<double>(hi, row[c]);
      }
      for (size_t c = c0; c < c1; ++c) bound[c] = GroupBound(lo, hi, vq);
    }
    for (size_t h = 0; h < g.kv_heads; ++h) {
      double err2 = 0, bound2 = 0, norm2 = 0;
      for (size_t d = 0; d < g.head_dim; ++d) {
        const size_t c = h * g.head_dim + d;
        const double a = LoadElement(g.dtype, x, n + t * channels + c);
        const double b = LoadElement(g.dtype, got, n + t * channels + c);
        err2 += (a - b) * (a - b);
        bound2 += bound[c] * bound[c];
        norm2 += a * a + bound[c] * bound[c];
      }
      const double slack = (out_rel + 1e-5 * std::log2(2.0 * g.head_dim)) * std::sqrt(norm2);
      ASSERT_LE(std::sqrt(err2), std::sqrt(bound2) * (1 + 1e-6) + slack)
          << "value token " << t << " head " << h;
    }
  }
}

const CodecId kNewCodecs[] = {CodecId::kInt8Rot, CodecId::kInt4Rot, CodecId::kK8V4,
                              CodecId::kK8V4Rot};

const BlockGeometry kShapes[] = {
    {.tokens = 64, .kv_heads = 4, .head_dim = 8, .dtype = DType::kF16},  // stories260K's.
    {.tokens = 33, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16},
    {.tokens = 16, .kv_heads = 1, .head_dim = 128, .dtype = DType::kF16},
    {.tokens = 5, .kv_heads = 3, .head_dim = 2, .dtype = DType::kF16},
    {.tokens = 3, .kv_heads = 5, .head_dim = 1, .dtype = DType::kF16},
};

TEST(RotatedCodecTest, NewCodecsRoundTripWithinBound) {
  CodecContext ctx = NewContext();
  for (const CodecId id : kNewCodecs) {
    for (const uint32_t group : {8u, 32u, 13u}) {
      for (const int level : {0, 3}) {
        const CodecParams p = CodecParams::Quantized(id, group, level);
        for (BlockGeometry g : kShapes) {
          for (const DType dt : {DType::kF16, DType::kBF16, DType::kF32}) {
            g.dtype = dt;
            SCOPED_TRACE(p.ToString() + " " + g.ToString());
            Block raw = MakeBlock(g, kSeed + group);
            const std::vector<std::byte> enc = Encode(p, raw, &ctx);
            ASSERT_FALSE(enc.empty());
            Result<BlockHeader> h = DecodeBlockHeader(enc);
            ASSERT_TRUE(h.ok()) << h.status().ToString();
            EXPECT_EQ(h->params, p);
            Block out{g, std::vector<float>(raw.storage.size())};
            const Status s = DecodeBlock(enc, g, out.span(), &ctx);
            ASSERT_TRUE(s.ok()) << s.ToString();
            ExpectWithinBound(p, raw, out.data());
          }
        }
      }
    }
  }
}

// The parts a new codec does not change are byte for byte the plain codec's: int4-rot's keys are
// int4's (keys are never rotated), k8v4's keys are int8's and its values int4's.
TEST(RotatedCodecTest, UnrotatedPartsAreBytesOfThePlainCodecs) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 64, .kv_heads = 4, .head_dim = 16, .dtype = DType::kF16};
  Block raw = MakeBlock(g, kSeed);
  const auto stage = [&](CodecId id) {
    std::vector<std::byte> enc = Encode(CodecParams::Quantized(id), raw, &ctx);
    return std::vector<std::byte>(enc.begin() + kBlockHeaderBytes, enc.end());
  };
  const QuantLayout l4 = ComputeQuantLayout(g, 4, 32);
  const QuantLayout l8 = ComputeQuantLayout(g, 8, 32);
  const QuantLayout mixed = ComputeQuantLayout(g, 8, 4, 32);
  const std::vector<std::byte> int4 = stage(CodecId::kInt4), int4_rot = stage(CodecId::kInt4Rot);
  const std::vector<std::byte> int8 = stage(CodecId::kInt8), k8v4 = stage(CodecId::kK8V4);
  const std::vector<std::byte> k8v4_rot = stage(CodecId::kK8V4Rot);
  const auto range = [](const std::vector<std::byte>& v, size_t from, size_t n) {
    return std::vector<std::byte>(v.begin() + static_cast<std::ptrdiff_t>(from),
                                  v.begin() + static_cast<std::ptrdiff_t>(from + n));
  };
  const size_t key_params = l4.v_scale_offset;  // k_scale and k_zero.
  EXPECT_EQ(range(int4_rot, 0, key_params), range(int4, 0, key_params));
  EXPECT_EQ(range(int4_rot, l4.k_codes_offset, l4.code_bytes),
            range(int4, l4.k_codes_offset, l4.code_bytes));
  EXPECT_NE(range(int4_rot, l4.v_codes_offset, l4.code_bytes),
            range(int4, l4.v_codes_offset, l4.code_bytes));
  // k8v4: keys as int8 writes them, values as int4 writes them.
  EXPECT_EQ(range(k8v4, 0, key_params), range(int8, 0, key_params));
  EXPECT_EQ(range(k8v4, mixed.k_codes_offset, mixed.code_bytes),
            range(int8, l8.k_codes_offset, l8.code_bytes));
  const size_t value_params = l4.k_codes_offset - l4.v_scale_offset;
  EXPECT_EQ(range(k8v4, mixed.v_scale_offset, value_params),
            range(int4, l4.v_scale_offset, value_params));
  EXPECT_EQ(range(k8v4, mixed.v_codes_offset, mixed.v_code_bytes),
            range(int4, l4.v_codes_offset, l4.code_bytes));
  EXPECT_EQ(k8v4.size(), mixed.total_bytes);
  EXPECT_EQ(range(k8v4_rot, 0, mixed.v_scale_offset), range(k8v4, 0, mixed.v_scale_offset));
}

// Every kernel set writes the same bytes for the new codecs, and those bytes are fixed: CRC32C
// recorded when the codecs were introduced.
TEST(RotatedCodecTest, EncodedBytesAreTheSameOnEveryKernelSetAndStayTheSame) {
  struct Case {
    CodecParams params;
    BlockGeometry geometry;
    uint32_t crc;
  };
  const Case cases[] = {
      {CodecParams::Quantized(CodecId::kInt8Rot),
       {.tokens = 64, .kv_heads = 2, .head_dim = 64, .dtype = DType::kF16}, 0x3a14e51du},
      {CodecParams::Quantized(CodecId::kInt4Rot),
       {.tokens = 64, .kv_heads = 4, .head_dim = 8, .dtype = DType::kF16}, 0x6f4dfbefu},
      {CodecParams::Quantized(CodecId::kK8V4, 16),
       {.tokens = 33, .kv_heads = 3, .head_dim = 24, .dtype = DType::kBF16}, 0x69eccf95u},
      {CodecParams::Quantized(CodecId::kK8V4Rot, 32, 1),
       {.tokens = 100, .kv_heads = 2, .head_dim = 128, .dtype = DType::kF32}, 0x6361e397u},
  };
  std::vector<KernelIsa> isas = {KernelIsa::kScalar};
  if (CpuHasAvx2()) isas.push_back(KernelIsa::kAvx2);
  if (CpuHasAvx512()) isas.push_back(KernelIsa::kAvx512);
  for (const Case& c : cases) {
    Block raw = MakeBlock(c.geometry, 7);
    CodecContext ref_ctx = NewContext(KernelIsa::kScalar);
    const std::vector<std::byte> want = Encode(c.params, raw, &ref_ctx);
    EXPECT_EQ(crc32c::Value(want), c.crc) << c.params.ToString() << ": 0x" << std::hex
                                          << crc32c::Value(want);
    Block want_out{c.geometry, std::vector<float>(raw.storage.size())};
    ASSERT_TRUE(DecodeBlock(want, c.geometry, want_out.span(), &ref_ctx).ok());
    for (const KernelIsa isa : isas) {
      CodecContext ctx = NewContext(isa);
      EXPECT_EQ(Encode(c.params, raw, &ctx), want) << static_cast<int>(isa);
      Block out{c.geometry, std::vector<float>(raw.storage.size())};
      ASSERT_TRUE(DecodeBlock(want, c.geometry, out.span(), &ctx).ok());
      EXPECT_EQ(std::memcmp(out.data(), want_out.data(), c.geometry.raw_bytes()), 0);
    }
  }
}

TEST(RotatedCodecTest, RotationNeedsPowerOfTwoHeadDim) {
  CodecContext ctx = NewContext();
  for (const CodecId id : {CodecId::kInt8Rot, CodecId::kInt4Rot, CodecId::kK8V4Rot}) {
    const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 12, .dtype = DType::kF16};
    const CodecParams p = CodecParams::Quantized(id);
    const Result<size_t> max = MaxEncodedSize(p, g);
    ASSERT_TRUE(max.status().IsInvalidArgument()) << max.status().ToString();
    EXPECT_NE(max.status().message().find("power-of-two head_dim, not 12"), std::string::npos);
    Block raw = MakeBlock(g, kSeed);
    std::vector<std::byte> out(4 * g.raw_bytes());
    EXPECT_TRUE(EncodeBlock(p, g, raw.span(), out, &ctx).status().IsInvalidArgument());
  }
  // The unrotated k8v4 takes any head_dim.
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 12, .dtype = DType::kF16};
  EXPECT_TRUE(MaxEncodedSize(CodecParams::Quantized(CodecId::kK8V4), g).ok());
}

// A value head that the rotation lifts beyond the FP16 range (its zero point could not be stored)
// is refused as InvalidArgument even for FP16 input, whose own values are all in range: the
// plain codec takes the same block.
TEST(RotatedCodecTest, RotatedValuesBeyondF16RangeAreRefused) {
  CodecContext ctx = NewContext();
  for (const DType dt : {DType::kF16, DType::kF32}) {
    const BlockGeometry g{.tokens = 8, .kv_heads = 2, .head_dim = 16, .dtype = dt};
    Block raw = MakeBlock(g, kSeed);
    // Token 3, head 1 of V: 60000 * sign, which the rotation turns into 60000 * 4 at its first
    // element.
    for (size_t d = 0; d < g.head_dim; ++d) {
      StoreElement(dt, 60000.0f * HadamardSign(d), raw.data(),
                   g.half_elements() + 3 * g.channels() + g.head_dim + d);
    }
    std::vector<std::byte> out(4 * g.raw_bytes() + 1024);
    const Result<size_t> rotated =
        EncodeBlock(CodecParams::Quantized(CodecId::kInt4Rot), g, raw.span(), out, &ctx);
    EXPECT_TRUE(rotated.status().IsInvalidArgument()) << rotated.status().ToString();
    EXPECT_TRUE(EncodeBlock(CodecParams::Int4(), g, raw.span(), out, &ctx).ok());
  }
}

void Reseal(std::vector<std::byte>* enc) {
  EncodeFixed32(enc->data() + kBlockHeaderCrcOffset,
                crc32c::Mask(crc32c::Value(enc->data(), kBlockHeaderCrcOffset)));
}

// A header whose rotation flag, bits or codec disagree, or that claims a rotation of a head_dim
// the transform cannot have, is refused as Corruption even with a valid checksum: a block is never
// decoded with the wrong inverse.
TEST(RotatedCodecTest, CorruptedRotationMetadataIsRefused) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Block raw = MakeBlock(g, kSeed);
  Block out{g, std::vector<float>(raw.storage.size())};
  const std::vector<std::byte> rot = Encode(CodecParams::Quantized(CodecId::kInt4Rot), raw, &ctx);
  const std::vector<std::byte> plain = Encode(CodecParams::Int4(), raw, &ctx);
  const std::vector<std::byte> mixed = Encode(CodecParams::Quantized(CodecId::kK8V4), raw, &ctx);
  EXPECT_EQ(static_cast<uint8_t>(rot[9]), kBlockFlagHadamard);
  EXPECT_EQ(static_cast<uint8_t>(plain[9]), 0);
  EXPECT_EQ(static_cast<uint8_t>(mixed[7]), 0x48);
  struct Edit {
    const std::vector<std::byte>* block;
    size_t offset;
    uint8_t value;
    const char* what;
  };
  for (const Edit& e : {Edit{&rot, 9, 0, "rotation flag cleared"},
                        Edit{&plain, 9, kBlockFlagHadamard, "rotation flag on int4"},
                        Edit{&rot, 9, kBlockFlagHadamard | 0x04, "unknown flag bit"},
                        Edit{&rot, 9, 0x80, "unknown flag only"},
                        Edit{&rot, 5, static_cast<uint8_t>(CodecId::kInt4), "codec int4, flag"},
                        Edit{&plain, 5, static_cast<uint8_t>(CodecId::kInt4Rot), "no flag"},
                        Edit{&rot, 5, 9, "unknown codec 9"},
                        Edit{&mixed, 7, 8, "k8v4 with bits 8"},
                        Edit{&mixed, 7, 0x84, "k8v4 with bits swapped"},
                        Edit{&plain, 7, 0x44, "int4 with bits 0x44"}}) {
    std::vector<std::byte> bad = *e.block;
    bad[e.offset] = std::byte{e.value};
    Reseal(&bad);
    const Status s = DecodeBlock(bad, g, out.span(), &ctx);
    EXPECT_TRUE(s.IsCorruption()) << e.what << ": " << s.ToString();
  }
  // A rotated block whose head_dim is not a power of two: an int4 block of such a geometry,
  // relabelled int4-rot with the flag set.
  const BlockGeometry odd{.tokens = 16, .kv_heads = 2, .head_dim = 12, .dtype = DType::kF16};
  Block odd_raw = MakeBlock(odd, kSeed);
  Block odd_out{odd, std::vector<float>(odd_raw.storage.size())};
  std::vector<std::byte> bad = Encode(CodecParams::Int4(), odd_raw, &ctx);
  bad[5] = std::byte{static_cast<uint8_t>(CodecId::kInt4Rot)};
  bad[9] = std::byte{kBlockFlagHadamard};
  Reseal(&bad);
  const Status s = DecodeBlock(bad, odd, odd_out.span(), &ctx);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("power-of-two"), std::string::npos) << s.message();
}

// Every truncation of a new codec's block is Corruption; payload mutations never crash.
TEST(RotatedCodecTest, TruncationsAndMutationsAreSafe) {
  CodecContext ctx = NewContext();
  const BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 8, .dtype = DType::kF16};
  Block raw = MakeBlock(g, kSeed);
  Block out{g, std::vector<float>(raw.storage.size())};
  std::mt19937 rng(kSeed);
  for (const CodecId id : kNewCodecs) {
    for (const int level : {0, 1}) {
      const std::vector<std::byte> enc = Encode(CodecParams::Quantized(id, 16, level), raw, &ctx);
      for (size_t len = 0; len < enc.size(); ++len) {
        ASSERT_TRUE(DecodeBlock(std::span(enc).first(len), g, out.span(), &ctx).IsCorruption())
            << CodecName(id) << " len " << len;
      }
      for (int trial = 0; trial < 500; ++trial) {
        std::vector<std::byte> bad = enc;
        const size_t at = kBlockHeaderBytes + rng() % (enc.size() - kBlockHeaderBytes);
        bad[at] ^= std::byte{static_cast<uint8_t>(1 + rng() % 255)};
        const Status s = DecodeBlock(bad, g, out.span(), &ctx);
        ASSERT_TRUE(s.ok() || s.IsCorruption()) << s.ToString();
      }
    }
  }
}

TEST(RotatedCodecTest, NamesParseAndMaxEncodedSizeAnyCodecCoversThem) {
  for (const CodecId id : kNewCodecs) {
    Result<CodecParams> p = ParseCodecParams(CodecName(id));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, CodecParams::Quantized(id, kQuantGroupSizeDefault, 0));
    Result<CodecParams> z = ParseCodecParams(CodecName(id), 3, 64);
    ASSERT_TRUE(z.ok());
    EXPECT_EQ(*z, CodecParams::Quantized(id, 64, 3));
    const BlockGeometry g{.tokens = 64, .kv_heads = 4, .head_dim = 8, .dtype = DType::kF32};
    for (const int level : {0, 1}) {
      EXPECT_GE(*MaxEncodedSizeAnyCodec(g),
                *MaxEncodedSize(CodecParams::Quantized(id, kQuantGroupSizeMin, level), g));
    }
  }
  const Result<CodecParams> bad = ParseCodecParams("int3-rot");
  EXPECT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("k8v4-rot"), std::string::npos);
  EXPECT_EQ(CodecParams::Quantized(CodecId::kK8V4).bits(), 4u);
  EXPECT_EQ(CodecParams::Quantized(CodecId::kK8V4).key_bits(), 8u);
  EXPECT_TRUE(CodecParams::Quantized(CodecId::kInt8Rot).rotated());
  EXPECT_FALSE(CodecParams::Int8().rotated());
}

}  // namespace
}  // namespace kvtier::codecs
