// Goal: the arithmetic of the GPU quantization kernels reproduces the CPU codec byte for byte.
// Method: run the kernels' per-thread bodies (quant_math.h) on the host over every index
// (QuantizeHost/DequantizeHost) and compare the stage payload and the reconstruction with
// codecs::QuantizeBlock/DequantizeBlock, for every dtype, int8 and int4, shapes with partial
// groups and an odd element count, and inputs with -0.0, rounding ties, constant groups, tiny and
// near-FP16-max values. Random inputs use a fixed seed printed on failure. Runs without a GPU; on
// a GPU, cuda_kernels_test checks the kernels themselves the same way.
#include "cuda/quant_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/codec.h"
#include "codecs/quantize.h"
#include "cuda/cuda_kernels.h"

namespace kvtier::cuda {
namespace {

constexpr uint32_t kSeed = 77031;

std::vector<float> Values(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    f[i] = normal(*rng);
    switch (i % 53) {
      case 0:
        f[i] = -0.0f;
        break;
      case 1:
        f[i] = 0.25f * static_cast<float>(i % 9);
        break;  // Ties after scaling.
      case 2:
        f[i] = 6.0e-8f;
        break;  // FP16 subnormal range.
      case 3:
        f[i] = 60000.0f;
        break;
      case 4:
        f[i] = -61000.0f;
        break;
      default:
        break;
    }
  }
  // A constant run: some key groups get max == min (scale 0).
  for (size_t i = 0; i < n / 8; ++i) f[i] = 1.5f;
  return f;
}

struct Case {
  codecs::BlockGeometry geometry;
  uint32_t bits;
  uint32_t group;
};

void CheckCase(const Case& c, std::mt19937* rng) {
  const codecs::BlockGeometry& g = c.geometry;
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed << " " << g.ToString() << " bits=" << c.bits
                                    << " group=" << c.group);
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  ASSERT_TRUE(ctx.ok());
  std::vector<float> f = Values(g.elements(), rng);
  // Exact rounding ties: a group with min 0 and max qmax / 2 has scale 0.5 (inv 2), so x = 0.25,
  // 0.75, ... land on k + 0.5 and must round to even. Key group 0 of channel 0, value group 0 of
  // token 0.
  const float qmax = static_cast<float>((1u << c.bits) - 1);
  const size_t channels = g.channels();
  const size_t key_n = std::min<size_t>(c.group, g.tokens);
  const size_t value_n = std::min<size_t>(c.group, channels);
  for (size_t k = 0; k < key_n; ++k) {
    f[k * channels] = k == 0 ? 0.0f : k == 1 ? qmax / 2 : 0.25f + 0.5f * static_cast<float>(k % 8);
  }
  for (size_t k = 0; k < value_n; ++k) {
    f[g.half_elements() + k] = k == 0   ? 0.0f
                               : k == 1 ? qmax / 2
                                        : 0.25f + 0.5f * static_cast<float>(k % 8);
  }
  std::vector<std::byte> raw(g.raw_bytes());
  codecs::FromF32(ctx->kernels(), g.dtype, f.data(), f.size(), raw.data());
  const size_t stage_bytes = codecs::ComputeQuantLayout(g, c.bits, c.group).total_bytes;
  std::vector<std::byte> cpu_stage(stage_bytes), cpu_back(g.raw_bytes());
  ASSERT_TRUE(codecs::QuantizeBlock(g, c.bits, c.group, raw, cpu_stage, &*ctx).ok());
  ASSERT_TRUE(codecs::DequantizeBlock(g, c.bits, c.group, cpu_stage, cpu_back, &*ctx).ok());

  std::vector<std::byte> stage(stage_bytes, std::byte{0xee});
  std::vector<std::byte> back(g.raw_bytes());
  std::byte* raw_ptr = raw.data();
  std::byte* stage_ptr = stage.data();
  uint32_t flags = 9;
  Result<internal::QuantArgs> args = internal::MakeQuantArgs({.geometry = g,
                                                              .bits = c.bits,
                                                              .group_size = c.group,
                                                              .raw = &raw_ptr,
                                                              .stage = &stage_ptr,
                                                              .count = 1,
                                                              .flags = &flags});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  internal::QuantizeHost(*args);
  EXPECT_EQ(flags, 0u);
  ASSERT_EQ(stage, cpu_stage);
  std::byte* back_ptr = back.data();
  args->raw = &back_ptr;
  internal::DequantizeHost(*args);
  EXPECT_EQ(flags, 0u);
  ASSERT_EQ(back, cpu_back);
}

TEST(QuantMathTest, HostRunOfTheKernelsMatchesTheCpuCodec) {
  std::mt19937 rng(kSeed);
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (uint32_t bits : {8u, 4u}) {
      CheckCase({{.tokens = 48, .kv_heads = 2, .head_dim = 24, .dtype = dtype}, bits, 32}, &rng);
      CheckCase({{.tokens = 17, .kv_heads = 1, .head_dim = 5, .dtype = dtype}, bits, 8}, &rng);
      CheckCase({{.tokens = 64, .kv_heads = 4, .head_dim = 64, .dtype = dtype}, bits, 64}, &rng);
    }
  }
}

TEST(QuantMathTest, FlagsMatchTheCpuErrors) {
  const codecs::BlockGeometry g{.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF32};
  std::vector<float> f(g.elements(), 1.0f);
  f[3] = std::numeric_limits<float>::infinity();
  std::vector<std::byte> raw(g.raw_bytes());
  std::memcpy(raw.data(), f.data(), raw.size());
  std::vector<std::byte> stage(codecs::ComputeQuantLayout(g, 8, 8).total_bytes);
  std::byte* raw_ptr = raw.data();
  std::byte* stage_ptr = stage.data();
  uint32_t flags = 0;
  Result<internal::QuantArgs> args = internal::MakeQuantArgs({.geometry = g,
                                                              .bits = 8,
                                                              .group_size = 8,
                                                              .raw = &raw_ptr,
                                                              .stage = &stage_ptr,
                                                              .count = 1,
                                                              .flags = &flags});
  ASSERT_TRUE(args.ok());
  internal::QuantizeHost(*args);
  EXPECT_EQ(QuantFlagsStatus(flags).code(), StatusCode::kInvalidArgument);
  // A negative stored scale reads back as Corruption (as codecs' ReadParams).
  const uint16_t minus_one = 0xbc00;
  std::memcpy(stage.data() + args->v_scale_offset, &minus_one, 2);
  internal::DequantizeHost(*args);
  EXPECT_EQ(QuantFlagsStatus(flags).code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kvtier::cuda
