// Goal: the entropy-coded codecs (ecq5, ecq6, ecq6v5) decode every element within half its head's
// step (or exactly, when escaped), compress Gaussian KV to the documented ratio at the documented
// error, write the same bytes and decode them to the same values with every kernel set (also at
// the format's extreme steps and centers), and refuse malformed payloads with Corruption.
// Method: seeded Gaussian blocks with outlier channels, constant channels and a few huge elements,
// in FP16, BF16 and FP32 and as a latent block, are encoded and decoded; each element's error is
// checked against a bound computed here from its head's channels' own means and standard deviations
// (in double). Crafted payloads (extra or missing escapes, a short stage, a NaN escape) are built
// by decompressing a real payload, editing it and sealing it again under a valid header, so that
// only the ecq checks can refuse them; a stage of extreme step bytes, centers and codes is built
// whole and sealed the same way.
#include "codecs/entropy_quant.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/codec.h"
#include "codecs/element_test_util.h"
#include "codecs/kernels.h"

namespace kvtier::codecs {
namespace {

struct Block {
  BlockGeometry g;
  std::vector<float> storage;  // Aligned for every dtype.
  std::byte* data() { return reinterpret_cast<std::byte*>(storage.data()); }
  std::span<const std::byte> span() { return {data(), g.raw_bytes()}; }
};

// Gaussian channels, each with its own mean and spread (some far from zero, as outlier key
// channels are), one constant channel, and `huge` elements a thousand spreads out.
Block MakeBlock(const BlockGeometry& g, uint32_t seed, size_t huge) {
  Block b{g, std::vector<float>(g.raw_bytes() / sizeof(float) + 1)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const size_t channels = g.channels();
  std::vector<float> mean(g.planes() * channels), sd(g.planes() * channels);
  for (size_t i = 0; i < mean.size(); ++i) {
    mean[i] = i % 7 == 3 ? 20.0f * n01(rng) : 0.1f * n01(rng);
    sd[i] = i % 5 == 1 ? 4.0f : 0.5f + 0.1f * static_cast<float>(i % 3);
    if (i % channels == channels - 1) sd[i] = 0.0f;  // A constant channel.
  }
  for (size_t p = 0; p < g.planes(); ++p) {
    for (size_t t = 0; t < g.tokens; ++t) {
      for (size_t c = 0; c < channels; ++c) {
        const size_t i = p * channels + c;
        StoreElement(g.dtype, mean[i] + sd[i] * n01(rng), b.data(),
                     (p * g.tokens + t) * channels + c);
      }
    }
  }
  for (size_t h = 0; h < huge; ++h) {
    StoreElement(g.dtype, h % 2 == 0 ? 3000.0f : -2500.0f, b.data(),
                 (h * 7919 + 13) % g.elements());
  }
  return b;
}

std::vector<std::byte> Encode(const CodecParams& params, Block& b, CodecContext* ctx) {
  std::vector<std::byte> out(MaxEncodedSize(params, b.g).value());
  const Result<size_t> n = EncodeBlock(params, b.g, b.span(), out, ctx);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

// Every element within half its head's step of the original, or bit-exact. The step is at most
// the eighth-octave above 2^(2 - bits) times the geometric mean of the head's channels' standard
// deviations (those that vary), or the floors (the largest |mean| / 30000, 2^-14).
void ExpectWithinHalfAStep(Block& in, const std::vector<std::byte>& out, EcqPrecision precision) {
  const BlockGeometry& g = in.g;
  const size_t channels = g.channels();
  const double rounding = g.dtype == DType::kBF16  ? 1.0 / 256
                          : g.dtype == DType::kF16 ? 1.0 / 2048
                                                   : 1e-7;
  const auto at = [&](const std::byte* base, size_t p, size_t t, size_t c) {
    return static_cast<double>(LoadElement(g.dtype, base, (p * g.tokens + t) * channels + c));
  };
  for (size_t p = 0; p < g.planes(); ++p) {
    for (size_t h = 0; h < g.kv_heads; ++h) {
      double log_sum = 0, floor = std::ldexp(1.0, -14);
      size_t varying = 0;
      for (size_t c = h * g.head_dim; c < (h + 1) * g.head_dim; ++c) {
        double sum = 0, sq = 0;
        for (size_t t = 0; t < g.tokens; ++t) sum += at(in.data(), p, t, c);
        const double mean = sum / g.tokens;
        for (size_t t = 0; t < g.tokens; ++t) {
          sq += (at(in.data(), p, t, c) - mean) * (at(in.data(), p, t, c) - mean);
        }
        const double sd = std::sqrt(sq / g.tokens);
        floor = std::max(floor, std::fabs(mean) / 30000 * 1.0906);
        if (sd > 0) {
          log_sum += std::log2(sd);
          ++varying;
        }
      }
      const double geo = varying == 0 ? 0 : std::exp2(log_sum / static_cast<double>(varying));
      const uint32_t quarters = p == 0 ? precision.key_quarter_bits : precision.value_quarter_bits;
      const double step = std::max(geo * std::exp2(2.0 - quarters / 4.0) * 1.0906, floor);
      for (size_t c = h * g.head_dim; c < (h + 1) * g.head_dim; ++c) {
        for (size_t t = 0; t < g.tokens; ++t) {
          const double x = at(in.data(), p, t, c);
          const double y = at(out.data(), p, t, c);
          ASSERT_LE(std::fabs(x - y), step / 2 * (1 + 1e-4) + std::fabs(y) * rounding + 1e-30)
              << "plane " << p << " token " << t << " channel " << c << " of " << g.ToString();
        }
      }
    }
  }
}

TEST(EcqTest, EveryElementDecodesWithinHalfItsHeadsStep) {
  CodecContext ctx = CodecContext::Create().value();
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const BlockGeometry& geo :
         {BlockGeometry{16, 2, 8, dtype}, BlockGeometry{64, 4, 24, dtype},
          BlockGeometry{48, 1, 40, dtype, LayoutKind::kLatent}}) {
      for (CodecId id : {CodecId::kEcq5, CodecId::kEcq6, CodecId::kEcq6V5}) {
        if (geo.kind == LayoutKind::kLatent && id == CodecId::kEcq6V5) {
          // Two precisions need a K and a V plane: a latent block is refused up front.
          EXPECT_EQ(MaxEncodedSize(CodecParams::Ecq(id), geo).status().code(),
                    StatusCode::kInvalidArgument);
          continue;
        }
        Block b = MakeBlock(geo, 7 + static_cast<uint32_t>(id), 5);
        const std::vector<std::byte> enc = Encode(CodecParams::Ecq(id), b, &ctx);
        std::vector<float> out(geo.raw_bytes() / sizeof(float) + 1);
        std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), geo.raw_bytes());
        ASSERT_TRUE(DecodeBlock(enc, geo, out_bytes, &ctx).ok()) << geo.ToString();
        std::vector<std::byte> decoded(out_bytes.begin(), out_bytes.end());
        ExpectWithinHalfAStep(b, decoded, EcqPrecisionOf(id));
      }
    }
  }
}

// A block long enough that one huge element cannot raise its channel's spread to its own level
// (an element counts once in sd over 512 tokens): it lies beyond 127 steps and is escaped.
TEST(EcqTest, EscapesAreExact) {
  CodecContext ctx = CodecContext::Create().value();
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    const BlockGeometry g{512, 1, 8, dtype};
    Block b = MakeBlock(g, 5, 4);
    for (CodecId id : {CodecId::kEcq5, CodecId::kEcq6, CodecId::kEcq6V5}) {
      const std::vector<std::byte> enc = Encode(CodecParams::Ecq(id), b, &ctx);
      std::vector<float> out(g.raw_bytes() / sizeof(float));
      std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), g.raw_bytes());
      ASSERT_TRUE(DecodeBlock(enc, g, out_bytes, &ctx).ok());
      const std::vector<std::byte> decoded(out_bytes.begin(), out_bytes.end());
      for (size_t h = 0; h < 4; ++h) {
        const size_t i = (h * 7919 + 13) % g.elements();
        EXPECT_EQ(LoadElement(dtype, b.data(), i), LoadElement(dtype, decoded.data(), i))
            << CodecName(id) << " element " << i;
      }
      ExpectWithinHalfAStep(b, decoded, EcqPrecisionOf(id));
    }
  }
}

TEST(EcqTest, GaussianFp16CompressesAtTheDocumentedRatioAndError) {
  const BlockGeometry g{256, 8, 128, DType::kF16};
  Block b{g, std::vector<float>(g.raw_bytes() / sizeof(float))};
  std::mt19937 rng(42);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (size_t i = 0; i < g.elements(); ++i) StoreElement(g.dtype, n01(rng), b.data(), i);
  CodecContext ctx = CodecContext::Create().value();
  struct Want {
    CodecId id;
    double ratio_lo, ratio_hi, rmse_lo, rmse_hi;
  };
  // About log2(sd / step) + 2.05 bits per element (a Gaussian's entropy at that step) and a
  // relative error of step / sqrt(12): ecq5 step sd / 8, ecq6 sd / 16.
  for (const Want& w : {Want{CodecId::kEcq5, 2.9, 3.3, 0.033, 0.039},
                        Want{CodecId::kEcq6, 2.45, 2.75, 0.0165, 0.0195}}) {
    const std::vector<std::byte> enc = Encode(CodecParams::Ecq(w.id), b, &ctx);
    const double ratio = static_cast<double>(g.raw_bytes()) / static_cast<double>(enc.size());
    EXPECT_GT(ratio, w.ratio_lo) << CodecName(w.id);
    EXPECT_LT(ratio, w.ratio_hi) << CodecName(w.id);
    std::vector<uint16_t> out(g.elements());
    std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()), g.raw_bytes());
    ASSERT_TRUE(DecodeBlock(enc, g, out_bytes, &ctx).ok());
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.elements(); ++i) {
      const double x = LoadElement(g.dtype, b.data(), i);
      const double y = F16ToF32(out[i]);
      err += (x - y) * (x - y);
      norm += x * x;
    }
    const double rmse = std::sqrt(err / norm);
    EXPECT_GT(rmse, w.rmse_lo) << CodecName(w.id);
    EXPECT_LT(rmse, w.rmse_hi) << CodecName(w.id);
  }
}

// The vector kernel sets this CPU runs (AVX2, AVX-512), each compared with the scalar one.
std::vector<KernelIsa> WideIsas() {
  std::vector<KernelIsa> isas;
  if (CpuHasAvx2()) isas.push_back(KernelIsa::kAvx2);
  if (CpuHasAvx512()) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

// Each kernel set the CPU has (the ecq loops have a scalar, an AVX2 and an AVX-512 build) writes
// the scalar set's bytes and decodes them to the scalar set's values, for every dtype.
TEST(EcqTest, EveryKernelSetWritesTheSameBytes) {
  const std::vector<KernelIsa> isas = WideIsas();
  CodecContext scalar = CodecContext::Create({.isa = KernelIsa::kScalar}).value();
  for (const DType dt : {DType::kF16, DType::kBF16, DType::kF32}) {
    const BlockGeometry g{128, 4, 64, dt};
    Block b = MakeBlock(g, 99, 3);
    for (const KernelIsa isa : isas) {
      CodecContext wide = CodecContext::Create({.isa = isa}).value();
      ASSERT_EQ(wide.kernels().isa, isa);
      for (CodecId id : {CodecId::kEcq5, CodecId::kEcq6, CodecId::kEcq6V5}) {
        const std::vector<std::byte> want = Encode(CodecParams::Ecq(id), b, &scalar);
        EXPECT_EQ(Encode(CodecParams::Ecq(id), b, &wide), want)
            << CodecName(id) << " isa " << static_cast<int>(isa);
        std::vector<std::byte> a(g.raw_bytes()), c(g.raw_bytes());
        ASSERT_TRUE(DecodeBlock(want, g, a, &scalar).ok());
        ASSERT_TRUE(DecodeBlock(want, g, c, &wide).ok());
        EXPECT_EQ(a, c) << CodecName(id) << " isa " << static_cast<int>(isa);
      }
    }
  }
}

// A BF16 block decodes to its stage's values computed in F32 and rounded as F32ToBF16 rounds
// (the decoder does both in one loop), its escaped elements exact, with every kernel set; the
// geometries leave vector tails (40 and 120 channels).
TEST(EcqTest, Bf16BlocksDecodeToTheirStageRoundedAsF32ToBf16Does) {
  std::vector<KernelIsa> isas = WideIsas();
  isas.insert(isas.begin(), KernelIsa::kScalar);
  for (const BlockGeometry& g :
       {BlockGeometry{32, 4, 64, DType::kBF16}, BlockGeometry{37, 1, 40, DType::kBF16},
        BlockGeometry{600, 3, 40, DType::kBF16}}) {
    Block b = MakeBlock(g, 23, 3);
    for (CodecId id : {CodecId::kEcq5, CodecId::kEcq6V5}) {
      for (KernelIsa isa : isas) {
        CodecContext ctx = CodecContext::Create({.isa = isa}).value();
        const std::vector<std::byte> enc = Encode(CodecParams::Ecq(id), b, &ctx);
        const std::span<const std::byte> payload(enc.data() + kBlockHeaderBytes,
                                                 enc.size() - kBlockHeaderBytes);
        std::vector<uint8_t> stage(ZSTD_getFrameContentSize(payload.data(), payload.size()));
        ASSERT_EQ(ZSTD_decompress(stage.data(), stage.size(), payload.data(), payload.size()),
                  stage.size());
        std::vector<uint16_t> out(g.elements());
        ASSERT_TRUE(
            DecodeBlock(enc, g, {reinterpret_cast<std::byte*>(out.data()), g.raw_bytes()}, &ctx)
                .ok());
        const EcqLayout l = ComputeEcqLayout(g);
        const size_t channels = g.channels();
        for (size_t i = 0; i < g.elements(); ++i) {
          const size_t plane = i / g.half_elements(), c = i % channels;
          const uint8_t z = stage[l.codes_offset + i];
          uint16_t want = 0;
          if (z == kEcqEscape) {
            std::memcpy(&want, b.data() + 2 * i, 2);
          } else {
            const size_t p = plane * channels + c;
            const int32_t cz = stage[l.centers_offset + p] | stage[l.centers_offset + l.params + p]
                                                                 << 8;
            const float center = static_cast<float>((cz >> 1) ^ -(cz & 1));
            const float step = EcqStep(stage[l.steps_offset + plane * g.kv_heads + c / g.head_dim]);
            const float q = static_cast<float>((z >> 1) ^ -(z & 1));
            want = F32ToBF16((q + center) * step);
          }
          ASSERT_EQ(out[i], want) << CodecName(id) << " " << g.ToString() << " isa "
                                  << static_cast<int>(isa) << " element " << i;
        }
      }
    }
  }
}

TEST(EcqTest, ParamsTakeALevelAndNoGroup) {
  const CodecParams p = ParseCodecParams("ecq5").value();
  EXPECT_EQ(p.codec, CodecId::kEcq5);
  EXPECT_EQ(p.zstd_level, 1);
  EXPECT_EQ(p.group_size, 0u);
  EXPECT_TRUE(p.entropy_coded());
  EXPECT_FALSE(p.lossless());
  EXPECT_FALSE(p.grouped());
  EXPECT_EQ(ParseCodecParams("ecq6", 3).value().zstd_level, 3);
  EXPECT_EQ(ParseCodecParams("ecq6", 0, 32).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodecParams{.codec = CodecId::kEcq5}.Validate().code(), StatusCode::kInvalidArgument);
  // Blocks of any codec must fit the any-codec bound, ecq's worst case (every element escaped)
  // included.
  const BlockGeometry g{16, 1, 8, DType::kF32};
  EXPECT_GE(MaxEncodedSizeAnyCodec(g).value(), MaxEncodedSize(p, g).value());
  EXPECT_EQ(StagePayloadBytes(p, g), ComputeEcqLayout(g).max_bytes);
}

TEST(EcqTest, NonFiniteInputIsRefused) {
  const BlockGeometry g{16, 2, 8, DType::kF32};
  Block b = MakeBlock(g, 3, 0);
  StoreElement(g.dtype, NAN, b.data(), 17);
  CodecContext ctx = CodecContext::Create().value();
  std::vector<std::byte> out(MaxEncodedSize(CodecParams::Ecq(CodecId::kEcq5), g).value());
  EXPECT_EQ(EncodeBlock(CodecParams::Ecq(CodecId::kEcq5), g, b.span(), out, &ctx).status().code(),
            StatusCode::kInvalidArgument);
  StoreElement(g.dtype, 1e6f, b.data(), 17);
  EXPECT_EQ(EncodeBlock(CodecParams::Ecq(CodecId::kEcq5), g, b.span(), out, &ctx).status().code(),
            StatusCode::kInvalidArgument);
}

// `stage` sealed as a valid block of `params` and `g`: a zstd frame under a valid header.
std::vector<std::byte> SealStage(const CodecParams& params, const BlockGeometry& g,
                                 std::span<const std::byte> stage) {
  std::vector<std::byte> sealed(kBlockHeaderBytes + ZSTD_compressBound(stage.size()));
  const size_t n = ZSTD_compress(sealed.data() + kBlockHeaderBytes,
                                 sealed.size() - kBlockHeaderBytes, stage.data(), stage.size(), 1);
  EXPECT_FALSE(ZSTD_isError(n));
  const BlockHeader h{
      .params = params, .geometry = g, .raw_bytes = g.raw_bytes(), .payload_bytes = n};
  EncodeBlockHeader(h, std::span<std::byte, kBlockHeaderBytes>(sealed.data(), kBlockHeaderBytes));
  sealed.resize(kBlockHeaderBytes + n);
  return sealed;
}

// A real block's stage, edited by `edit` and sealed again as a valid block: only the ecq checks
// stand between it and the decoder's output.
Status DecodeEditedStage(void (*edit)(std::vector<std::byte>*, const EcqLayout&)) {
  const BlockGeometry g{512, 1, 8, DType::kF16};
  Block b = MakeBlock(g, 11, 2);  // Two escaped elements (EscapesAreExact).
  CodecContext ctx = CodecContext::Create().value();
  const CodecParams params = CodecParams::Ecq(CodecId::kEcq5);
  const std::vector<std::byte> enc = Encode(params, b, &ctx);
  const std::span<const std::byte> payload(enc.data() + kBlockHeaderBytes,
                                           enc.size() - kBlockHeaderBytes);
  std::vector<std::byte> stage(ZSTD_getFrameContentSize(payload.data(), payload.size()));
  EXPECT_EQ(ZSTD_decompress(stage.data(), stage.size(), payload.data(), payload.size()),
            stage.size());
  edit(&stage, ComputeEcqLayout(g));
  const std::vector<std::byte> sealed = SealStage(params, g, stage);
  std::vector<uint16_t> out(g.elements());
  return DecodeBlock(sealed, g, {reinterpret_cast<std::byte*>(out.data()), g.raw_bytes()}, &ctx);
}

// The stage's extremes decode alike with every kernel set, in each dtype, with and without a
// vector tail: the smallest and the largest step byte (0 and 255), centers at +-32767 and 0, and
// every code but the escape. The AVX-512 BF16 decoder (VCVTNE2PS2BF16, where the CPU has it)
// flushes subnormals to zero, so this checks that no decoded value is subnormal, nor too large,
// at either end of the format's range; in FP16 the largest overflow to infinity, as F32ToF16
// rounds them, and the F16C rows (VCVTPS2PH) must give the same.
TEST(EcqTest, ExtremeStepsAndCentersDecodeAlikeWithEveryKernelSet) {
  const std::vector<KernelIsa> isas = WideIsas();
  CodecContext scalar = CodecContext::Create({.isa = KernelIsa::kScalar}).value();
  for (const DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const BlockGeometry& g : {BlockGeometry{254, 2, 48, dt},     // 96 channels: no tail.
                                   BlockGeometry{254, 3, 12, dt}}) {  // 36: a tail of 4.
      const EcqLayout l = ComputeEcqLayout(g);
      std::vector<std::byte> stage(l.escapes_offset);
      const int16_t centers[] = {32767, -32767, 0};
      for (size_t p = 0; p < l.params; ++p) {
        const int16_t c = centers[p % 3];
        const auto z = static_cast<uint16_t>((static_cast<uint16_t>(c) << 1) ^ (c >> 15));
        stage[l.centers_offset + p] = static_cast<std::byte>(z & 0xff);
        stage[l.centers_offset + l.params + p] = static_cast<std::byte>(z >> 8);
      }
      for (size_t h = 0; h < g.planes() * g.kv_heads; ++h) {
        stage[l.steps_offset + h] = std::byte{h % 2 == 0 ? uint8_t{0} : uint8_t{255}};
      }
      for (size_t i = 0; i < g.elements(); ++i) {  // Each token a code; every code in each channel.
        stage[l.codes_offset + i] = static_cast<std::byte>((i / g.channels() + i) % kEcqEscape);
      }
      const std::vector<std::byte> sealed = SealStage(CodecParams::Ecq(CodecId::kEcq6), g, stage);
      std::vector<std::byte> want(g.raw_bytes());
      ASSERT_TRUE(DecodeBlock(sealed, g, want, &scalar).ok());
      for (const KernelIsa isa : isas) {
        CodecContext wide = CodecContext::Create({.isa = isa}).value();
        std::vector<std::byte> got(g.raw_bytes());
        ASSERT_TRUE(DecodeBlock(sealed, g, got, &wide).ok());
        EXPECT_EQ(got, want) << "isa " << static_cast<int>(isa) << " " << g.ToString();
      }
    }
  }
}

TEST(EcqTest, MalformedStagesAreCorruption) {
  EXPECT_TRUE(DecodeEditedStage([](std::vector<std::byte>*, const EcqLayout&) {}).ok());
  const auto corrupt = [](void (*edit)(std::vector<std::byte>*, const EcqLayout&)) {
    const Status s = DecodeEditedStage(edit);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  };
  // One escaped element too many.
  corrupt([](std::vector<std::byte>* s, const EcqLayout&) { s->resize(s->size() + 2); });
  // Half an escaped element.
  corrupt([](std::vector<std::byte>* s, const EcqLayout&) { s->resize(s->size() + 1); });
  // A code turned into an escape with no element stored for it.
  corrupt([](std::vector<std::byte>* s, const EcqLayout& l) {
    for (size_t i = l.codes_offset; i < l.escapes_offset; ++i) {
      if ((*s)[i] != std::byte{kEcqEscape}) {
        (*s)[i] = std::byte{kEcqEscape};
        return;
      }
    }
  });
  // Shorter than the codes.
  corrupt([](std::vector<std::byte>* s, const EcqLayout& l) { s->resize(l.escapes_offset - 1); });
  // An escaped element that is NaN.
  corrupt([](std::vector<std::byte>* s, const EcqLayout& l) {
    ASSERT_GT(s->size(), l.escapes_offset + 1);
    (*s)[l.escapes_offset] = std::byte{0x00};
    (*s)[l.escapes_offset + 1] = std::byte{0x7e};  // FP16 0x7e00: NaN.
  });
}

}  // namespace
}  // namespace kvtier::codecs
