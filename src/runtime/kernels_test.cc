// Goal: the AVX2/F16C attention kernels compute what the scalar references define, and the
// scalar FP16 conversion rounds exactly like the F16C instruction.
// Method: FP16 conversion is compared bit for bit over every half value (half -> float) and
// over millions of floats (random bit patterns, boundaries of the half range, subnormals,
// ties); the dot products and weighted sums over random FP16 rows with odd strides and head
// sizes (8, 13, 64, 128) are compared with a relative tolerance of 1e-5 of the sum of
// magnitudes, since only summation order and FMA rounding differ. AttendF16 (all heads of one
// token over runs of blocks) is compared over head sizes 2-128 including ones that are not
// multiples of 8, GQA groups of 1-8 (odd ones too), and runs of 1-200 rows,
// with mild and very peaked scores (maxima that grow from run to run, so the online softmax
// rescales, and weights that underflow): outputs (V ~ N(0, 1)) within 8e-5 absolute (measured
// 1.1e-5 with peaked scores, where score rounding is amplified by e^x, and <= 3.5e-6
// otherwise), run masses within 1e-5 (measured 8e-7), masses over all heads summing to 1
// within 1e-5, log-sum-exps within 1e-5 relative; every split of the runs into two parts,
// attended apart and merged (MergeAttendParts, RunMassFromLse), must give the whole within the
// same bounds. Seeds are printed.
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

// Random K/V blocks and queries for one AttendF16 call; `peak` scales the queries (large values
// make a few rows dominate) and `growth` raises the K magnitude run after run.
struct AttendCase {
  uint32_t n_heads, n_kv_heads, head_dim;
  std::vector<uint32_t> rows;  // Per run.
  float peak = 1.0f;
  float growth = 0.0f;
};

struct AttendData {
  std::vector<std::vector<uint16_t>> blocks;  // [k rows | v rows] per run.
  std::vector<KvRun> runs;
  std::vector<float> q;
};

AttendData MakeAttendData(const AttendCase& c, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AttendData d;
  const size_t kv_dim = size_t{c.n_kv_heads} * c.head_dim;
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const float k_scale = 1.0f + c.growth * static_cast<float>(i);
    std::vector<uint16_t> block(2 * c.rows[i] * kv_dim);
    for (size_t j = 0; j < block.size(); ++j) {
      const float scale = j < c.rows[i] * kv_dim ? k_scale : 1.0f;
      block[j] = ref::FloatToHalf(scale * normal(rng));
    }
    d.blocks.push_back(std::move(block));
  }
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const uint16_t* b = d.blocks[i].data();
    d.runs.push_back({.k = b, .v = b + c.rows[i] * kv_dim, .rows = c.rows[i]});
  }
  d.q.resize(size_t{c.n_heads} * c.head_dim);
  const float scale = c.peak / std::sqrt(static_cast<float>(c.head_dim));
  for (float& v : d.q) v = scale * normal(rng);
  return d;
}

struct AttendResult {
  std::vector<float> out, mass, head_lse, run_lse;
};

// Runs `fn` over runs [first, last) of `d`.
AttendResult Attend(void (*fn)(const AttendArgs&), const AttendCase& c, const AttendData& d,
                    size_t first, size_t last) {
  const size_t n_runs = last - first;
  std::vector<float> scratch(AttendScratchFloats(c.n_heads, n_runs), NAN);
  AttendResult r{.out = std::vector<float>(d.q.size(), NAN),
                 .mass = std::vector<float>(n_runs, NAN),
                 .head_lse = std::vector<float>(c.n_heads, NAN),
                 .run_lse = std::vector<float>(n_runs * c.n_heads, NAN)};
  fn({.n_heads = c.n_heads,
      .n_kv_heads = c.n_kv_heads,
      .head_dim = c.head_dim,
      .q = d.q.data(),
      .runs = d.runs.data() + first,
      .n_runs = n_runs,
      .out = r.out.data(),
      .run_mass = r.mass.data(),
      .head_lse = r.head_lse.data(),
      .run_lse = r.run_lse.data(),
      .scratch = scratch.data()});
  return r;
}

TEST(KernelsTest, AttendMatchesScalar) {
  if (!CpuHasAvx2F16c()) GTEST_SKIP() << "CPU lacks AVX2/F16C";
  const uint64_t seed = 4242;
  std::mt19937_64 rng(seed);
  std::vector<AttendCase> cases = {
      {.n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .rows = {64, 64, 64, 37}},
      {.n_heads = 8, .n_kv_heads = 8, .head_dim = 128, .rows = {200, 1}},
      {.n_heads = 8, .n_kv_heads = 4, .head_dim = 8, .rows = {16, 16, 5}},
      {.n_heads = 6, .n_kv_heads = 2, .head_dim = 10, .rows = {17, 3}},
      {.n_heads = 10, .n_kv_heads = 2, .head_dim = 64, .rows = {130}},
      {.n_heads = 7, .n_kv_heads = 1, .head_dim = 13, .rows = {1, 9, 66}},
      {.n_heads = 16, .n_kv_heads = 2, .head_dim = 24, .rows = {65, 63}},
      {.n_heads = 4, .n_kv_heads = 2, .head_dim = 2, .rows = {31}},
      {.n_heads = 12, .n_kv_heads = 4, .head_dim = 128, .rows = {16, 16, 16}, .peak = 12.0f},
      {.n_heads = 8,
       .n_kv_heads = 2,
       .head_dim = 64,
       .rows = {64, 64, 64, 64},
       .peak = 6.0f,
       .growth = 1.5f},
  };
  for (const AttendCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " heads " << c.n_heads << "/" << c.n_kv_heads << " head_dim "
                 << c.head_dim << " peak " << c.peak << " growth " << c.growth);
    const AttendData d = MakeAttendData(c, rng);
    const size_t n_runs = d.runs.size();
    const AttendResult ref = Attend(ref::AttendF16, c, d, 0, n_runs);
    const AttendResult avx = Attend(avx2::AttendF16, c, d, 0, n_runs);
    for (size_t i = 0; i < d.q.size(); ++i) ASSERT_NEAR(ref.out[i], avx.out[i], 8e-5) << i;
    double total_ref = 0, total_avx = 0;
    for (size_t i = 0; i < n_runs; ++i) {
      EXPECT_NEAR(ref.mass[i], avx.mass[i], 1e-5) << "run " << i;
      total_ref += ref.mass[i];
      total_avx += avx.mass[i];
    }
    EXPECT_NEAR(total_ref, 1.0, 1e-5);
    EXPECT_NEAR(total_avx, 1.0, 1e-5);
    for (size_t h = 0; h < c.n_heads; ++h) {
      EXPECT_NEAR(ref.head_lse[h], avx.head_lse[h],
                  1e-5 * std::max(1.0f, std::fabs(ref.head_lse[h])));
    }
    for (size_t i = 0; i < ref.run_lse.size(); ++i) {
      if (std::isinf(ref.run_lse[i])) continue;  // A run whose weights all underflow.
      EXPECT_NEAR(ref.run_lse[i], avx.run_lse[i], 1e-5 * std::max(1.0f, std::fabs(ref.run_lse[i])));
    }
    // Split into two consecutive parts, attended apart and merged: the whole again.
    for (size_t split = 1; split < n_runs; ++split) {
      for (auto fn : {ref::AttendF16, avx2::AttendF16}) {
        AttendResult a = Attend(fn, c, d, 0, split);
        const AttendResult b = Attend(fn, c, d, split, n_runs);
        MergeAttendParts(c.n_heads, c.head_dim, b.out.data(), b.head_lse.data(), a.out.data(),
                         a.head_lse.data());
        std::vector<float> run_lse = a.run_lse;
        run_lse.insert(run_lse.end(), b.run_lse.begin(), b.run_lse.end());
        std::vector<float> mass(n_runs);
        RunMassFromLse(c.n_heads, n_runs, run_lse.data(), a.head_lse.data(), mass.data());
        for (size_t i = 0; i < d.q.size(); ++i) ASSERT_NEAR(a.out[i], ref.out[i], 8e-5) << i;
        for (size_t i = 0; i < n_runs; ++i) EXPECT_NEAR(mass[i], ref.mass[i], 1e-5) << i;
      }
    }
  }
}

TEST(KernelsTest, AttendRowsAreSoftmaxWeighted) {
  // One head, two rows of V (1 and 3), scores 0 and ln 3: weights 1/4 and 3/4, output 2.5.
  const std::vector<uint16_t> block = {ref::FloatToHalf(0.0f), ref::FloatToHalf(1.0f),
                                       ref::FloatToHalf(1.0f), ref::FloatToHalf(3.0f)};
  const float q = std::log(3.0f);
  const KvRun runs[2] = {{.k = block.data(), .v = block.data() + 2, .rows = 1},
                         {.k = block.data() + 1, .v = block.data() + 3, .rows = 1}};
  for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAvx2}) {
    float out = 0, mass[2] = {0, 0};
    std::vector<float> scratch(AttendScratchFloats(1, 2));
    GetAttentionKernels(isa).attend_f16({.n_heads = 1,
                                         .n_kv_heads = 1,
                                         .head_dim = 1,
                                         .q = &q,
                                         .runs = runs,
                                         .n_runs = 2,
                                         .out = &out,
                                         .run_mass = mass,
                                         .scratch = scratch.data()});
    EXPECT_NEAR(out, 2.5f, 1e-6) << static_cast<int>(isa);
    EXPECT_NEAR(mass[0], 0.25f, 1e-6);
    EXPECT_NEAR(mass[1], 0.75f, 1e-6);
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
