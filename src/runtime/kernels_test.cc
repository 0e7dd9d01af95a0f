// Goal: the AVX2/F16C attention kernels compute what the scalar references define, and the
// scalar FP16 conversion rounds exactly like the F16C instruction.
// Method: FP16 conversion is compared bit for bit over every half value (half -> float) and
// over millions of floats (random bit patterns, boundaries of the half range, subnormals,
// ties); the dot products and weighted sums over random FP16 rows with odd strides and head
// sizes (8, 13, 64, 128) are compared with a relative tolerance of 1e-5 of the sum of
// magnitudes, since only summation order and FMA rounding differ. Seeds are printed.
#include "runtime/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace kvtier::runtime {
namespace {

TEST(KernelsTest, HalfToFloatAllValuesMatchF16c) {
  if (!CpuHasAvx2F16c()) GTEST_SKIP() << "CPU lacks AVX2/F16C";
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> a(65536), b(65536);
  ref::HalfToFloatN(all.data(), all.size(), a.data());
  avx2::HalfToFloatN(all.data(), all.size(), b.data());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << "half " << i;
  }
}

TEST(KernelsTest, FloatToHalfMatchesF16c) {
  if (!CpuHasAvx2F16c()) GTEST_SKIP() << "CPU lacks AVX2/F16C";
  const uint64_t seed = 20240601;
  std::mt19937_64 rng(seed);
  std::vector<float> in;
  for (int i = 0; i < 1 << 21; ++i)
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Round-trip points, ties and neighbours around the half range and subnormals.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float f = ref::HalfToFloat(static_cast<uint16_t>(h));
    const float next = ref::HalfToFloat(static_cast<uint16_t>(h + 1));
    for (float v : {f, (f + next) / 2, std::nextafter((f + next) / 2, 0.0f),
                    std::nextafter((f + next) / 2, 1e9f)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  for (float v : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e9f, INFINITY, -INFINITY, NAN, 0.0f,
                  -0.0f, 1e-8f, 2.9802322e-8f, 5.9604645e-8f}) {
    in.push_back(v);
  }
  std::vector<uint16_t> a(in.size()), b(in.size());
  ref::FloatToHalfN(in.data(), in.size(), a.data());
  avx2::FloatToHalfN(in.data(), in.size(), b.data());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << "seed " << seed << " float bits " << std::hex
                          << std::bit_cast<uint32_t>(in[i]);
  }
}

TEST(KernelsTest, DotAndWeightedSumMatchScalar) {
  if (!CpuHasAvx2F16c()) GTEST_SKIP() << "CPU lacks AVX2/F16C";
  const uint64_t seed = 99;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t head_dim : {8u, 13u, 64u, 128u}) {
    const size_t stride = head_dim * 3 + 5, rows = 37;
    std::vector<uint16_t> kv(stride * rows);
    for (uint16_t& h : kv) h = ref::FloatToHalf(normal(rng));
    std::vector<float> q(head_dim), w(rows);
    for (float& v : q) v = normal(rng);
    for (float& v : w) v = std::fabs(normal(rng));
    std::vector<float> s_ref(rows), s_avx(rows);
    ref::DotRowsF16(q.data(), kv.data(), stride, rows, head_dim, s_ref.data());
    avx2::DotRowsF16(q.data(), kv.data(), stride, rows, head_dim, s_avx.data());
    for (size_t i = 0; i < rows; ++i) {
      EXPECT_NEAR(s_ref[i], s_avx[i], 1e-5 * static_cast<double>(head_dim) * 4)
          << "seed " << seed << " head_dim " << head_dim;
    }
    std::vector<float> o_ref(head_dim, 0.5f), o_avx(head_dim, 0.5f);
    ref::WeightedSumRowsF16(w.data(), kv.data(), stride, rows, head_dim, o_ref.data());
    avx2::WeightedSumRowsF16(w.data(), kv.data(), stride, rows, head_dim, o_avx.data());
    for (size_t d = 0; d < head_dim; ++d) {
      EXPECT_NEAR(o_ref[d], o_avx[d], 1e-5 * rows * 4) << "seed " << seed;
    }
  }
}

TEST(KernelsTest, RowOperations) {
  std::vector<float> x = {1.0f, -2.0f, 3.0f, -4.0f};
  const std::vector<float> g = {1.0f, 1.0f, 2.0f, 0.5f};
  std::vector<float> y(4);
  RmsNorm(x.data(), g.data(), 4, 0.0f, y.data());
  const float inv = 1.0f / std::sqrt(30.0f / 4.0f);
  EXPECT_FLOAT_EQ(y[2], 2.0f * 3.0f * inv);
  std::vector<float> s = {1000.0f, 1000.0f};
  Softmax(s.data(), 2);
  EXPECT_FLOAT_EQ(s[0], 0.5f);
  // RoPE at position 0 is the identity; at position 1 the first pair turns by 1 radian.
  std::vector<float> r = {1.0f, 0.0f, 1.0f, 0.0f};
  const std::vector<float> inv_freq = {1.0f, 0.01f};
  RopeInPlace(r.data(), 1, 4, 0, inv_freq.data());
  EXPECT_FLOAT_EQ(r[0], 1.0f);
  RopeInPlace(r.data(), 1, 4, 1, inv_freq.data());
  EXPECT_NEAR(r[0], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(r[1], std::sin(1.0f), 1e-6);
}

TEST(KernelsTest, DispatchHonoursScalarRequest) {
  EXPECT_EQ(GetAttentionKernels(KernelIsa::kScalar).isa, KernelIsa::kScalar);
  if (CpuHasAvx2F16c()) {
    EXPECT_EQ(GetAttentionKernels().isa, KernelIsa::kAvx2);
  }
}

}  // namespace
}  // namespace kvtier::runtime
