// Goal: every kernel set computes exactly what the scalar reference computes, the scalar
// reference is right, and GetKernels() hands out each set this CPU runs. Method: the FP16/BF16
// conversions are checked exhaustively over all 65536 16-bit inputs (the F16 reference also
// against exact ldexp arithmetic) and over hand-picked F32 edge values (ties, overflow,
// subnormals, NaN, Inf, signed zeros) and random bit patterns; the shuffles, min/max,
// quantization parameters, quantize/dequantize and nibble packing run on random data at every
// length around the vector widths (odd tails included), with group sizes that do and do not
// divide the length, on Gaussian values mixed with outliers, subnormals, signed zeros and the
// FP16 extremes; every pair of available sets (scalar, AVX2, AVX-512) is compared bit for bit.
// Random tests use fixed seeds that appear in failure messages.
#include "codecs/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvtier::codecs {
namespace {

constexpr uint32_t kSeed = 0x5eed1234;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Exact value of a finite binary16 by arithmetic, independent of the bit-twiddling reference.
double F16Value(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) != 0 ? -mag : mag;
}

std::vector<float> EdgeFloats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          1e10f,
                          inf,
                          -inf,
                          std::nanf(""),
                          -std::nanf(""),
                          0x1p-14f,
                          0x1p-24f,
                          0x1p-25f,
                          0x1.000002p-25f,
                          0x1.8p-24f,
                          0x1.4p-24f,
                          0x1p-26f,
                          1.0f + 0x1p-11f,
                          1.0f + 0x1.8p-10f,
                          3.14159f,
                          1e-40f,
                          -1e-45f,
                          FromBits(0x7f800001u),
                          FromBits(0xffc00001u),
                          0x1.ffcp-15f};
  return v;
}

TEST(Fp16ReferenceTest, AllHalvesConvertExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = F16ToF32(h);
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f)) << i;
      EXPECT_EQ(F32ToF16(f), h | 0x200) << i;  // Quieted, payload kept.
      continue;
    }
    if ((h & 0x7c00) == 0x7c00) {
      EXPECT_TRUE(std::isinf(f)) << i;
    } else {
      EXPECT_EQ(static_cast<double>(f), F16Value(h)) << i;
    }
    EXPECT_EQ(F32ToF16(f), h) << "round trip of " << i;
  }
}

TEST(Fp16ReferenceTest, RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3c00);    // Tie, even stays.
  EXPECT_EQ(F32ToF16(1.0f + 0x1.8p-10f), 0x3c02);  // Tie to even upward.
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);           // Below the midpoint: max finite.
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);           // Midpoint ties to even: infinity.
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);         // Smallest subnormal.
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);         // Tie to even: zero.
  EXPECT_EQ(F32ToF16(0x1.000002p-25f), 0x0001);  // Just above the tie.
  EXPECT_EQ(F32ToF16(0x1.8p-24f), 0x0002);       // 1.5 ulp ties to 2.
  EXPECT_EQ(F32ToF16(0x1.ffcp-15f), 0x0400);     // Subnormal rounding up to the min normal.
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1e-40f), 0x0000);  // F32 subnormal.
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16(std::nanf("")) & 0x7e00, 0x7e00);
}

TEST(Bf16ReferenceTest, RoundsHalfToEvenAndKeepsNan) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808000u)), 0x3f80);  // Tie, even stays.
  EXPECT_EQ(F32ToBF16(FromBits(0x3f818000u)), 0x3f82);  // Tie to even upward.
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(F32ToBF16(FromBits(0x7f7fffffu)), 0x7f80);  // Max float rounds to infinity.
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(FromBits(0x7f800001u)))));  // Payload in low bits.
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = BF16ToF32(h);
    if (!std::isnan(f)) {
      EXPECT_EQ(F32ToBF16(f), h) << i;
    }
  }
}

class Avx2KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuHasAvx2()) GTEST_SKIP() << "CPU without AVX2/F16C/FMA";
  }
};

TEST_F(Avx2KernelTest, HalfConversionsMatchReferenceOnAllInputs) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> want(all.size()), got(all.size());
  ref::F16ToF32(all.data(), all.size(), want.data());
  avx2::F16ToF32(all.data(), all.size(), got.data());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << "f16 " << i;
  ref::BF16ToF32(all.data(), all.size(), want.data());
  avx2::BF16ToF32(all.data(), all.size(), got.data());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << "bf16 " << i;
}

TEST_F(Avx2KernelTest, F32ToF16MatchesReferenceOnEdgesAndRandomBits) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  std::vector<float> in = EdgeFloats();
  for (int i = 0; i < 1 << 20; ++i) in.push_back(FromBits(static_cast<uint32_t>(rng())));
  // Dense sweep of the subnormal and overflow neighbourhoods.
  for (uint32_t b = 0x33000000u - 64; b < 0x38800000u + 64; b += 97) in.push_back(FromBits(b));
  for (uint32_t b = 0x477fe000u; b < 0x47800010u; ++b) in.push_back(FromBits(b));
  for (size_t len : {in.size(), in.size() - 3}) {  // Odd tail too.
    std::vector<uint16_t> want(len), got(len);
    ref::F32ToF16(in.data(), len, want.data());
    avx2::F32ToF16(in.data(), len, got.data());
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(got[i], want[i]) << "input bits 0x" << std::hex << Bits(in[i]);
    }
  }
}

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937* rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>((*rng)());
  return v;
}

TEST_F(Avx2KernelTest, ShufflesMatchReferenceAndRoundTrip) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  for (size_t n = 0; n < 200; n += (n < 70 ? 1 : 13)) {
    const std::vector<uint8_t> src = RandomBytes(2 * n + 1, &rng);
    std::vector<uint8_t> want(2 * n), got(2 * n), back(2 * n);
    ref::Shuffle16(src.data(), n, want.data());
    avx2::Shuffle16(src.data(), n, got.data());
    ASSERT_EQ(got, want) << "n=" << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(want[i], src[2 * i]);  // Low plane first.
    avx2::Unshuffle16(got.data(), n, back.data());
    ASSERT_EQ(back, std::vector<uint8_t>(src.begin(), src.begin() + static_cast<long>(2 * n)));
    ref::Unshuffle16(want.data(), n, back.data());
    ASSERT_EQ(back, std::vector<uint8_t>(src.begin(), src.begin() + static_cast<long>(2 * n)));
  }
}

TEST(ScalarKernelTest, Shuffle32RoundTrips) {
  std::mt19937 rng(kSeed);
  for (size_t n : {0u, 1u, 7u, 33u, 1000u}) {
    const std::vector<uint8_t> src = RandomBytes(4 * n, &rng);
    std::vector<uint8_t> planes(4 * n), back(4 * n);
    ref::Shuffle32(src.data(), n, planes.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(planes[3 * n + i], src[4 * i + 3]);
    ref::Unshuffle32(planes.data(), n, back.data());
    ASSERT_EQ(back, src);
  }
}

std::vector<float> RandomFloats(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(*rng);
  return v;
}

TEST_F(Avx2KernelTest, AllFiniteAndMinMaxMatchReference) {
  std::mt19937 rng(kSeed);
  for (size_t n = 1; n < 80; ++n) {
    std::vector<float> x = RandomFloats(n, &rng);
    EXPECT_TRUE(avx2::AllFinite(x.data(), n));
    float mn0, mx0, mn1, mx1;
    ref::MinMax(x.data(), n, &mn0, &mx0);
    avx2::MinMax(x.data(), n, &mn1, &mx1);
    ASSERT_EQ(mn0, mn1) << n;
    ASSERT_EQ(mx0, mx1) << n;
    std::vector<float> a0 = RandomFloats(n, &rng), b0 = RandomFloats(n, &rng);
    std::vector<float> a1 = a0, b1 = b0;
    ref::MinMaxAccumulate(x.data(), n, a0.data(), b0.data());
    avx2::MinMaxAccumulate(x.data(), n, a1.data(), b1.data());
    ASSERT_EQ(a0, a1);
    ASSERT_EQ(b0, b1);
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> y = x;
      y[rng() % n] = bad;
      EXPECT_FALSE(avx2::AllFinite(y.data(), n)) << n;
      EXPECT_FALSE(ref::AllFinite(y.data(), n)) << n;
    }
  }
}

TEST_F(Avx2KernelTest, QuantizeDequantizeMatchReference) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  for (float qmax : {15.0f, 255.0f}) {
    for (size_t n = 1; n < 140; n += 3) {
      const std::vector<float> x = RandomFloats(n, &rng);
      const std::vector<float> zero = RandomFloats(n, &rng);
      std::vector<float> inv(n), scale(n);
      for (size_t i = 0; i < n; ++i) {
        scale[i] = 0.01f + static_cast<float>(rng() % 100) * 0.003f;
        inv[i] = 1.0f / scale[i];
      }
      std::vector<uint8_t> c0(n), c1(n);
      std::vector<float> y0(n), y1(n);
      ref::QuantizeUniform(x.data(), n, zero[0], inv[0], qmax, c0.data());
      avx2::QuantizeUniform(x.data(), n, zero[0], inv[0], qmax, c1.data());
      ASSERT_EQ(c0, c1) << "uniform n=" << n;
      ref::DequantizeUniform(c0.data(), n, zero[0], scale[0], y0.data());
      avx2::DequantizeUniform(c0.data(), n, zero[0], scale[0], y1.data());
      ASSERT_EQ(y0, y1) << "uniform n=" << n;
      ref::QuantizePerChannel(x.data(), n, zero.data(), inv.data(), qmax, c0.data());
      avx2::QuantizePerChannel(x.data(), n, zero.data(), inv.data(), qmax, c1.data());
      ASSERT_EQ(c0, c1) << "per-channel n=" << n;
      for (uint8_t c : c0) ASSERT_LE(c, qmax);
      ref::DequantizePerChannel(c0.data(), n, zero.data(), scale.data(), y0.data());
      avx2::DequantizePerChannel(c0.data(), n, zero.data(), scale.data(), y1.data());
      ASSERT_EQ(y0, y1) << "per-channel n=" << n;
    }
  }
}

TEST(ScalarKernelTest, QuantizeRoundsHalfToEvenAndClamps) {
  const float x[] = {0.5f, 1.5f, 2.5f, -3.0f, 300.0f, 0.0f};
  uint8_t c[6];
  ref::QuantizeUniform(x, 6, 0.0f, 1.0f, 255.0f, c);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 2);
  EXPECT_EQ(c[2], 2);
  EXPECT_EQ(c[3], 0);
  EXPECT_EQ(c[4], 255);
  EXPECT_EQ(c[5], 0);
}

TEST_F(Avx2KernelTest, NibblePackingMatchesReferenceAndRoundTrips) {
  std::mt19937 rng(kSeed);
  for (size_t n = 0; n < 150; ++n) {
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() % 16);
    std::vector<uint8_t> p0((n + 1) / 2), p1((n + 1) / 2), back(n);
    ref::PackNibbles(codes.data(), n, p0.data());
    avx2::PackNibbles(codes.data(), n, p1.data());
    ASSERT_EQ(p0, p1) << n;
    if (n >= 2) {
      EXPECT_EQ(p0[0], codes[0] | (codes[1] << 4));
    }
    avx2::UnpackNibbles(p0.data(), n, back.data());
    ASSERT_EQ(back, codes) << n;
    ref::UnpackNibbles(p0.data(), n, back.data());
    ASSERT_EQ(back, codes) << n;
  }
}

TEST(KernelSelectionTest, EachRequestGetsTheWidestAvailableSetAtMost) {
  const KernelIsa avx2_or_scalar = CpuHasAvx2() ? KernelIsa::kAvx2 : KernelIsa::kScalar;
  const KernelIsa widest = CpuHasAvx512() ? KernelIsa::kAvx512 : avx2_or_scalar;
  EXPECT_EQ(GetKernels(KernelIsa::kScalar).isa, KernelIsa::kScalar);
  EXPECT_EQ(GetKernels(KernelIsa::kAvx2).isa, avx2_or_scalar);
  EXPECT_EQ(GetKernels(KernelIsa::kAvx512).isa, widest);
  EXPECT_EQ(GetKernels(KernelIsa::kAuto).isa, widest);
  EXPECT_TRUE(!CpuHasAvx512() || CpuHasAvx2());
}

// ---------------------------------------------------------------------------------------------
// Every available kernel set against every other, through the tables GetKernels() returns.

std::vector<const Kernels*> AvailableSets() {
  std::vector<const Kernels*> sets = {&GetKernels(KernelIsa::kScalar)};
  if (CpuHasAvx2()) sets.push_back(&GetKernels(KernelIsa::kAvx2));
  if (CpuHasAvx512()) sets.push_back(&GetKernels(KernelIsa::kAvx512));
  return sets;
}

const char* IsaName(const Kernels& k) {
  switch (k.isa) {
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
    default:
      return "scalar";
  }
}

// Runs `run(set)` for every available set and checks each result equals the scalar one.
template <typename Run>
void ExpectSameForAllSets(Run run, const std::string& what) {
  const std::vector<const Kernels*> sets = AvailableSets();
  const auto want = run(*sets[0]);
  for (size_t s = 1; s < sets.size(); ++s) {
    ASSERT_TRUE(run(*sets[s]) == want) << what << ": " << IsaName(*sets[s]) << " != scalar";
  }
}

std::vector<uint32_t> BitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = Bits(v[i]);
  return b;
}

// Finite values within the FP16 range as quantization sees them: Gaussian, with outliers,
// subnormals (F32 and FP16), signed zeros, the FP16 extremes and runs of equal values.
std::vector<float> NastyFinite(size_t n, std::mt19937* rng) {
  std::vector<float> v = RandomFloats(n, rng);
  const float specials[] = {0.0f,     -0.0f,    1e-40f,  -1e-45f, 0x1p-24f, -0x1p-14f,
                            65504.0f, -65504.0f, 3000.0f, -777.5f, 1.0f,     1.0f};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = (*rng)() % 16;
    if (r < 3) v[i] = specials[(*rng)() % std::size(specials)];
    if (r == 3 && i > 0) v[i] = v[i - 1];
  }
  return v;
}

TEST(KernelSetsTest, EveryAvailableSetIsCoveredAndRuns) {
  const std::vector<const Kernels*> sets = AvailableSets();
  EXPECT_EQ(sets.size(), 1u + (CpuHasAvx2() ? 1u : 0u) + (CpuHasAvx512() ? 1u : 0u));
  for (const Kernels* k : sets) {
    SCOPED_TRACE(IsaName(*k));
    const float x[] = {1.0f, -2.0f, 3.5f};
    float mins[2] = {}, maxs[2] = {};
    k->min_max_groups(x, 3, 2, mins, maxs);  // Groups {1, -2} and {3.5}.
    EXPECT_EQ(mins[0], -2.0f);
    EXPECT_EQ(maxs[0], 1.0f);
    EXPECT_EQ(mins[1], 3.5f);
    EXPECT_EQ(maxs[1], 3.5f);
    uint8_t scale_le[2], zero_le[2];
    float zero = 0, inv = 0;
    k->quant_params(mins, maxs, 1, 255.0f, scale_le, zero_le, &zero, &inv);
    EXPECT_EQ(zero, -2.0f);
    EXPECT_EQ(scale_le[0] | (scale_le[1] << 8), F32ToF16(3.0f / 255.0f));
    uint8_t codes[3];
    k->quantize_groups(x, 3, 3, &zero, &inv, 255.0f, codes);
    EXPECT_EQ(codes[1], 0);
    EXPECT_TRUE(k->all_finite(x, 3));
  }
}

// Each conversion of `conversions` (a Kernels member and its name) gives the same bits on every
// kernel set for the first `len` elements of `in`, for each of `lens`.
template <typename In, typename Out>
void ExpectConversionsAgree(
    std::initializer_list<std::pair<void (*Kernels::*)(const In*, size_t, Out*), const char*>>
        conversions,
    const std::vector<In>& in, std::initializer_list<size_t> lens) {
  for (const auto& conversion : conversions) {
    const auto convert = conversion.first;  // Not a structured binding: lambdas capture it.
    const std::string name = conversion.second;
    for (size_t len : lens) {
      ExpectSameForAllSets(
          [&](const Kernels& k) {
            std::vector<Out> out(len);
            (k.*convert)(in.data(), len, out.data());
            if constexpr (std::is_same_v<Out, float>) {
              return BitsOf(out);
            } else {
              return out;
            }
          },
          name + " len " + std::to_string(len));
    }
  }
}

TEST(KernelSetsTest, ConversionsAgreeOnAllHalvesAndEdgeFloats) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  ExpectConversionsAgree<uint16_t, float>(
      {{&Kernels::f16_to_f32, "f16_to_f32"}, {&Kernels::bf16_to_f32, "bf16_to_f32"}}, all,
      {all.size(), all.size() - 7, size_t{13}, size_t{1}});
  std::mt19937 rng(kSeed);
  std::vector<float> in = EdgeFloats();
  for (int i = 0; i < 1 << 16; ++i) in.push_back(FromBits(static_cast<uint32_t>(rng())));
  ExpectConversionsAgree<float, uint16_t>(
      {{&Kernels::f32_to_f16, "f32_to_f16"}, {&Kernels::f32_to_bf16, "f32_to_bf16"}}, in,
      {in.size(), in.size() - 5, size_t{15}, size_t{17}});
}

TEST(KernelSetsTest, FiniteChecksAndMinMaxAgree) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n = 1; n < 100; n += (n < 40 ? 1 : 7)) {
    const std::vector<float> x = NastyFinite(n, &rng);
    for (const Kernels* k : AvailableSets()) EXPECT_TRUE(k->all_finite(x.data(), n)) << n;
    for (float bad : {std::nanf(""), -std::nanf(""), inf, -inf, FromBits(0x7f800001u)}) {
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        std::vector<float> y = x;
        y[at] = bad;
        for (const Kernels* k : AvailableSets()) {
          EXPECT_FALSE(k->all_finite(y.data(), n)) << IsaName(*k) << " n=" << n << " at " << at;
        }
      }
    }
    const std::vector<float> acc0 = NastyFinite(n, &rng), acc1 = NastyFinite(n, &rng);
    ExpectSameForAllSets(
        [&](const Kernels& k) {
          std::vector<float> mins = acc0, maxs = acc1;
          k.min_max_accumulate(x.data(), n, mins.data(), maxs.data());
          std::vector<uint32_t> out = BitsOf(mins);
          const std::vector<uint32_t> hi = BitsOf(maxs);
          out.insert(out.end(), hi.begin(), hi.end());
          return out;
        },
        "min_max_accumulate n=" + std::to_string(n));
    for (size_t group : {size_t{1}, size_t{7}, size_t{8}, size_t{16}, size_t{17}, size_t{32},
                         size_t{33}, size_t{64}, size_t{1024}}) {
      // Equal as numbers: which zero a group reports is left open (see Kernels::min_max_groups).
      ExpectSameForAllSets(
          [&](const Kernels& k) {
            const size_t groups = (n + group - 1) / group;
            std::vector<float> out(2 * groups);
            k.min_max_groups(x.data(), n, group, out.data(), out.data() + groups);
            return out;
          },
          "min_max_groups n=" + std::to_string(n) + " group=" + std::to_string(group));
    }
  }
}

TEST(KernelSetsTest, QuantParamsAgreeAndIgnoreTheSignOfZero) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  for (float qmax : {15.0f, 255.0f}) {
    for (size_t n = 1; n < 90; n += (n < 40 ? 1 : 5)) {
      // Pairs (min <= max) from real groups, plus empty ranges at every special value.
      std::vector<float> mins(n), maxs(n);
      const std::vector<float> a = NastyFinite(n, &rng), b = NastyFinite(n, &rng);
      for (size_t i = 0; i < n; ++i) {
        mins[i] = std::min(a[i], b[i]);
        maxs[i] = rng() % 5 == 0 ? mins[i] : std::max(a[i], b[i]);
      }
      ExpectSameForAllSets(
          [&](const Kernels& k) {
            std::vector<uint8_t> bytes(4 * n);
            std::vector<float> zero(n), inv(n);
            k.quant_params(mins.data(), maxs.data(), n, qmax, bytes.data(), bytes.data() + 2 * n,
                           zero.data(), inv.data());
            std::vector<uint32_t> out(bytes.begin(), bytes.end());
            for (float f : zero) out.push_back(Bits(f));
            for (float f : inv) out.push_back(Bits(f));
            // In place (zero == mins) gives the same.
            std::vector<float> in_place = mins;
            std::vector<uint8_t> bytes2(4 * n);
            k.quant_params(in_place.data(), maxs.data(), n, qmax, bytes2.data(),
                           bytes2.data() + 2 * n, in_place.data(), inv.data());
            EXPECT_EQ(bytes2, bytes) << IsaName(k);
            EXPECT_EQ(BitsOf(in_place), BitsOf(zero)) << IsaName(k);
            return out;
          },
          "quant_params n=" + std::to_string(n));
    }
  }
  for (const Kernels* k : AvailableSets()) {
    // Any mix of signed zeros gives the parameters of (+0, +0): scale +0, zero +0, inverse 0.
    const float mins[] = {0.0f, -0.0f, 0.0f, -0.0f};
    const float maxs[] = {0.0f, 0.0f, -0.0f, -0.0f};
    uint8_t bytes[16];
    float zero[4], inv[4];
    k->quant_params(mins, maxs, 4, 255.0f, bytes, bytes + 8, zero, inv);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(bytes[2 * i] | bytes[2 * i + 1] | bytes[8 + 2 * i] | bytes[9 + 2 * i], 0)
          << IsaName(*k) << " " << i;
      EXPECT_EQ(Bits(zero[i]), 0u);
      EXPECT_EQ(Bits(inv[i]), 0u);
    }
  }
}

TEST(KernelSetsTest, QuantizeAndDequantizeAgree) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed);
  std::mt19937 rng(kSeed);
  for (float qmax : {15.0f, 255.0f}) {
    for (size_t n = 1; n < 150; n += (n < 70 ? 1 : 9)) {
      for (size_t group :
           {size_t{8}, size_t{13}, size_t{16}, size_t{32}, size_t{40}, size_t{1024}}) {
        const std::vector<float> x = NastyFinite(n, &rng);
        const size_t groups = (n + group - 1) / group;
        // Parameters as the codec derives them, so codes span 0..qmax with ties and clamps.
        std::vector<float> mins(groups), maxs(groups), zero(groups), inv(groups);
        std::vector<uint8_t> bytes(4 * groups);
        ref::MinMaxGroups(x.data(), n, group, mins.data(), maxs.data());
        ref::QuantParams(mins.data(), maxs.data(), groups, qmax, bytes.data(),
                         bytes.data() + 2 * groups, zero.data(), inv.data());
        const std::string what = "n=" + std::to_string(n) + " group=" + std::to_string(group) +
                                 " qmax=" + std::to_string(qmax);
        ExpectSameForAllSets(
            [&](const Kernels& k) {
              std::vector<uint8_t> codes(n);
              k.quantize_groups(x.data(), n, group, zero.data(), inv.data(), qmax, codes.data());
              return codes;
            },
            "quantize_groups " + what);
        ExpectSameForAllSets(
            [&](const Kernels& k) {
              std::vector<uint8_t> codes(n);
              k.quantize_uniform(x.data(), n, zero[0], inv[0], qmax, codes.data());
              return codes;
            },
            "quantize_uniform " + what);
        std::vector<float> zero_c(n), inv_c(n), scale_c(n);
        for (size_t i = 0; i < n; ++i) {
          zero_c[i] = zero[i / group];
          inv_c[i] = inv[i / group];
          scale_c[i] = inv_c[i] > 0.0f ? 1.0f / inv_c[i] : 0.0f;
        }
        std::vector<uint8_t> codes(n);
        ref::QuantizePerChannel(x.data(), n, zero_c.data(), inv_c.data(), qmax, codes.data());
        ExpectSameForAllSets(
            [&](const Kernels& k) {
              std::vector<uint8_t> c(n);
              k.quantize_per_channel(x.data(), n, zero_c.data(), inv_c.data(), qmax, c.data());
              return c;
            },
            "quantize_per_channel " + what);
        ExpectSameForAllSets(
            [&](const Kernels& k) {
              std::vector<float> y(n);
              k.dequantize_per_channel(codes.data(), n, zero_c.data(), scale_c.data(), y.data());
              return BitsOf(y);
            },
            "dequantize_per_channel " + what);
        ExpectSameForAllSets(
            [&](const Kernels& k) {
              std::vector<float> y(n);
              k.dequantize_uniform(codes.data(), n, zero[0], scale_c[0], y.data());
              return BitsOf(y);
            },
            "dequantize_uniform " + what);
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::codecs
