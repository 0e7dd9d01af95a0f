// Goal: KvLayout accepts every real model geometry, rejects each kind of bad geometry with a
// message naming the field, parses and prints its text form, and has a digest that never drifts.
// Method: table-driven validation and parse cases (each error checked for the field it names),
// byte counts and strides checked against hand-computed figures for Llama-2 geometries, and the
// digest checked against the test vectors of docs/key_format.md, which a Python reference
// implementation (given in that doc) produced independently.
#include "core/kv_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/limits.h"

namespace kvtier {
namespace {

std::string BytesToHex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

KvLayout Llama2_7b() {
  return {.layers = 32, .kv_heads = 32, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 256};
}

// Expects an InvalidArgument whose message mentions `needle`.
void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << " lacks " << needle;
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSizeBytes(DType::kF16), 2u);
  EXPECT_EQ(DTypeSizeBytes(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSizeBytes(DType::kF32), 4u);
  EXPECT_EQ(DTypeSizeBytes(static_cast<DType>(9)), 0u);
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    Result<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(ParseDType("fp16").ok());
  EXPECT_FALSE(ParseDType("").ok());
  // The values are stored in keys: they must never change.
  EXPECT_EQ(static_cast<int>(DType::kF16), 1);
  EXPECT_EQ(static_cast<int>(DType::kBF16), 2);
  EXPECT_EQ(static_cast<int>(DType::kF32), 3);
}

TEST(KvLayoutTest, RealModelsValidateWithExpectedByteCounts) {
  const KvLayout l7b = Llama2_7b();
  ASSERT_TRUE(l7b.Validate().ok());
  EXPECT_EQ(l7b.TokenBytes(), 512 * kKiB);
  EXPECT_EQ(l7b.TokenBytesPerLayer(), 16 * kKiB);
  EXPECT_EQ(l7b.BlockBytes(), 4 * kMiB);
  const KvLayout l70b{
      .layers = 80, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 256};
  ASSERT_TRUE(l70b.Validate().ok());
  EXPECT_EQ(l70b.TokenBytes(), 320 * kKiB);
  const KvLayout f32{
      .layers = 1, .kv_heads = 1, .head_dim = 1, .dtype = DType::kF32, .block_tokens = 16};
  ASSERT_TRUE(f32.Validate().ok());
  EXPECT_EQ(f32.BlockBytes(), 2u * 16 * 4);
}

TEST(KvLayoutTest, StridesFollowCanonicalLayout) {
  const KvLayout l{
      .layers = 2, .kv_heads = 4, .head_dim = 64, .dtype = DType::kBF16, .block_tokens = 32};
  ASSERT_TRUE(l.Validate().ok());
  const BlockStrides s = l.Strides();
  EXPECT_EQ(s.elem_bytes, 2u);
  EXPECT_EQ(s.head_bytes, 64u * 2);
  EXPECT_EQ(s.token_bytes, 4u * 64 * 2);
  EXPECT_EQ(s.kv_bytes, 32u * 4 * 64 * 2);
  // [k|v][token][kv_head][head_dim]: dim is innermost, K precedes V.
  EXPECT_EQ(l.ElementOffsetBytes(0, 0, 0, 0), 0u);
  EXPECT_EQ(l.ElementOffsetBytes(0, 0, 0, 1), 2u);
  EXPECT_EQ(l.ElementOffsetBytes(0, 0, 1, 0), 128u);
  EXPECT_EQ(l.ElementOffsetBytes(0, 1, 0, 0), 512u);
  EXPECT_EQ(l.ElementOffsetBytes(1, 0, 0, 0), s.kv_bytes);
  EXPECT_EQ(l.ElementOffsetBytes(1, 31, 3, 63) + s.elem_bytes, l.BlockBytes());
}

TEST(KvLayoutTest, ValidateNamesTheBadField) {
  struct Case {
    KvLayout layout;
    std::string needle;
  };
  const KvLayout ok = Llama2_7b();
  auto with = [&ok](auto mutate) {
    KvLayout l = ok;
    mutate(l);
    return l;
  };
  const std::vector<Case> cases = {
      {with([](KvLayout& l) { l.layers = 0; }), "layers must be positive"},
      {with([](KvLayout& l) { l.kv_heads = 0; }), "kv_heads must be positive"},
      {with([](KvLayout& l) { l.head_dim = 0; }), "head_dim must be positive"},
      {with([](KvLayout& l) { l.block_tokens = 0; }), "block_tokens must be positive"},
      {with([](KvLayout& l) { l.dtype = static_cast<DType>(0); }), "dtype value 0"},
      {with([](KvLayout& l) { l.dtype = static_cast<DType>(4); }), "dtype value 4"},
      {with([](KvLayout& l) { l.block_tokens = 8; }), "block_tokens is 8, outside [16, 1024]"},
      {with([](KvLayout& l) { l.block_tokens = 2048; }), "block_tokens is 2048, outside"},
      {with([](KvLayout& l) { l.block_tokens = 24; }), "block_tokens is 24, not a multiple of 16"},
      {with([](KvLayout& l) { l.block_tokens = 1040; }), "block_tokens is 1040, outside"},
      {with([](KvLayout& l) { l.layers = kLayersMax + 1; }), "layers is 1025, above the limit"},
      {with([](KvLayout& l) { l.kv_heads = kKvHeadsMax + 1; }), "kv_heads is 1025, above"},
      {with([](KvLayout& l) { l.head_dim = kHeadDimMax + 1; }), "head_dim is 4097, above"},
      {with([](KvLayout& l) { l.head_dim = 0xffffffffu; }), "head_dim is 4294967295, above"},
      // 2 * 1024 * 1024 * 128 * 2 bytes = 512 MiB per block.
      {with([](KvLayout& l) {
         l.block_tokens = 1024;
         l.kv_heads = 1024;
       }),
       "block bytes"},
      // Blocks of 8 MiB, but 512 MiB per token across 1024 layers.
      {with([](KvLayout& l) {
         l.block_tokens = 16;
         l.kv_heads = 1024;
         l.layers = 1024;
       }),
       "token bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layout.ToString());
    ExpectInvalid(c.layout.Validate(), c.needle);
  }
}

TEST(KvLayoutTest, BoundsAreInclusive) {
  KvLayout l = Llama2_7b();
  l.block_tokens = kBlockTokensMin;
  EXPECT_TRUE(l.Validate().ok());
  l.block_tokens = kBlockTokensMax;
  EXPECT_TRUE(l.Validate().ok());
  l = {
      .layers = kLayersMax, .kv_heads = 1, .head_dim = 1, .dtype = DType::kF16, .block_tokens = 16};
  EXPECT_TRUE(l.Validate().ok());
  l = {.layers = 1, .kv_heads = 1, .head_dim = kHeadDimMax, .dtype = DType::kF32};
  EXPECT_TRUE(l.Validate().ok());
}

TEST(ParseLayoutTest, ParsesAndRoundTrips) {
  Result<KvLayout> l = ParseLayout("layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=256");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->layers, 32u);
  EXPECT_EQ(l->kv_heads, 8u);
  EXPECT_EQ(l->head_dim, 128u);
  EXPECT_EQ(l->dtype, DType::kF16);
  EXPECT_EQ(l->block_tokens, 256u);
  EXPECT_EQ(l->ToString(), "layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=256");
  Result<KvLayout> reordered =
      ParseLayout("dtype=bf16,block_tokens=16,head_dim=64,kv_heads=2,layers=3");
  ASSERT_TRUE(reordered.ok());
  EXPECT_EQ(reordered->dtype, DType::kBF16);
  Result<KvLayout> again = ParseLayout(reordered->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *reordered);
}

TEST(ParseLayoutTest, RejectsBadText) {
  const std::string tail = ",kv_heads=8,head_dim=128,dtype=f16,block_tokens=256";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "layout is empty"},
      {"layers=32" + tail + ",rope=1", "unknown layout key 'rope'"},
      {"layers=32,kv_heads=8,head_dim=128,dtype=f16", "layout key 'block_tokens' missing"},
      {"kv_heads=8,head_dim=128,dtype=f16,block_tokens=256", "layout key 'layers' missing"},
      {"layers=32,layers=32" + tail, "layout key 'layers' repeated"},
      {"layers=32" + tail + ",dtype=f32", "layout key 'dtype' repeated"},
      {"layers=abc" + tail, "layers value 'abc' is not a decimal number"},
      {"layers=" + tail, "layers value '' is not a decimal number"},
      {"layers=-1" + tail, "layers value '-1' is not a decimal number"},
      {"layers=+1" + tail, "layers value '+1' is not a decimal number"},
      {"layers=1.5" + tail, "layers value '1.5' is not a decimal number"},
      {"layers= 32" + tail, "layers value ' 32' is not a decimal number"},
      {"layers=32x" + tail, "layers value '32x' is not a decimal number"},
      {"layers=4294967296" + tail, "layers value '4294967296' is out of range for u32"},
      {"layers=99999999999999999999" + tail, "out of range for u32"},
      {"layers=5000" + tail, "layers is 5000, above the limit 1024"},
      {"layers=32,kv_heads=8,head_dim=128,dtype=f8,block_tokens=256", "dtype 'f8' is not one of"},
      {"layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=100", "not a multiple of 16"},
      {"layers=32" + tail + ",", "layout item '' is not key=value"},
      {"layers" + tail, "layout item 'layers' is not key=value"},
  };
  for (const auto& [text, needle] : cases) {
    SCOPED_TRACE(text);
    Result<KvLayout> l = ParseLayout(text);
    ASSERT_FALSE(l.ok());
    ExpectInvalid(l.status(), needle);
  }
}

// Vectors from docs/key_format.md, section "Test vectors".
TEST(LayoutDigestTest, MatchesDocumentedVectors) {
  const KvLayout l1{
      .layers = 32, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 256};
  EXPECT_EQ(BytesToHex(EncodeLayoutForDigest(l1)),
            "0d0000006b76746965722e6c61796f7574010000002000000008000000800000000001000001");
  EXPECT_EQ(ToHex(LayoutDigest(l1)),
            "7f3bd48ee4eab7151275ec8b3f31a5dc686cfcbe2480c24dba6095631493c4b2");
  const KvLayout l2{
      .layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16, .block_tokens = 16};
  EXPECT_EQ(ToHex(LayoutDigest(l2)),
            "422668ad3af683c2b8249b937b62554c6084790a0c855ad464033707457c0329");
  const KvLayout l3{
      .layers = 80, .kv_heads = 8, .head_dim = 128, .dtype = DType::kBF16, .block_tokens = 512};
  EXPECT_EQ(ToHex(LayoutDigest(l3)),
            "5cc692bb98e1ba77c0a29e8b6c620cdc93216bba0555aaaed44507a402144f3a");
  KvLayout l4 = l2;
  l4.kind = LayoutKind::kLatent;
  EXPECT_EQ(BytesToHex(EncodeLayoutForDigest(l4)),
            "0d0000006b76746965722e6c61796f757401000000020000000100000010000000100000000101");
  EXPECT_EQ(ToHex(LayoutDigest(l4)),
            "11a363fc4832425bcb7ef92d6e079a2333c8e019339973c28a2b86dae592ebf4");
  const KvLayout l5{.layers = 60,
                    .kv_heads = 1,
                    .head_dim = 576,
                    .dtype = DType::kBF16,
                    .block_tokens = 64,
                    .kind = LayoutKind::kLatent};
  EXPECT_EQ(ToHex(LayoutDigest(l5)),
            "b674f60d69918bc81bf5f633084b821c37d304dae335fc8442de85b5253b9fcd");
}

// A latent layout (MLA): one plane per block, kv_heads = 1, its own text and digest.
KvLayout DeepSeekV2() {
  return {.layers = 60,
          .kv_heads = 1,
          .head_dim = 576,
          .dtype = DType::kBF16,
          .block_tokens = 64,
          .kind = LayoutKind::kLatent};
}

TEST(LatentLayoutTest, OnePlaneByteCounts) {
  const KvLayout l = DeepSeekV2();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  EXPECT_EQ(l.Planes(), 1u);
  EXPECT_EQ(l.BlockBytes(), 64u * 576 * 2);
  EXPECT_EQ(l.TokenBytesPerLayer(), 576u * 2);
  EXPECT_EQ(l.TokenBytes(), 60u * 576 * 2);
  const BlockStrides s = l.Strides();
  EXPECT_EQ(s.token_bytes, 576u * 2);
  EXPECT_EQ(s.kv_bytes, l.BlockBytes());
  EXPECT_EQ(l.ElementOffsetBytes(0, 3, 0, 513), (3u * 576 + 513) * 2);
  KvLayout kv = l;
  kv.kind = LayoutKind::kKv;
  EXPECT_EQ(kv.BlockBytes(), 2 * l.BlockBytes());
}

TEST(LatentLayoutTest, NeedsOneHead) {
  KvLayout l = DeepSeekV2();
  l.kv_heads = 2;
  ExpectInvalid(l.Validate(), "kv_heads=1");
  l = DeepSeekV2();
  l.kind = static_cast<LayoutKind>(7);
  ExpectInvalid(l.Validate(), "kind");
}

TEST(LatentLayoutTest, TextRoundTripsAndKvTextIsUnchanged) {
  const KvLayout l = DeepSeekV2();
  EXPECT_EQ(l.ToString(), "layers=60,kv_heads=1,head_dim=576,dtype=bf16,block_tokens=64,kind=latent");
  Result<KvLayout> back = ParseLayout(l.ToString());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);
  // A K/V layout prints as it always did; "kind=kv" is accepted and is the default.
  EXPECT_EQ(Llama2_7b().ToString(),
            "layers=32,kv_heads=32,head_dim=128,dtype=f16,block_tokens=256");
  Result<KvLayout> kv =
      ParseLayout("layers=32,kv_heads=32,head_dim=128,dtype=f16,block_tokens=256,kind=kv");
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(*kv, Llama2_7b());
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"layers=1,kv_heads=1,head_dim=8,dtype=f16,block_tokens=16,kind=mla", "kind 'mla'"},
           {"layers=1,kv_heads=1,head_dim=8,dtype=f16,block_tokens=16,kind=kv,kind=kv",
            "'kind' repeated"},
           {"layers=1,kv_heads=4,head_dim=8,dtype=f16,block_tokens=16,kind=latent", "kv_heads=1"},
       }) {
    Result<KvLayout> bad = ParseLayout(text);
    ASSERT_FALSE(bad.ok()) << text;
    ExpectInvalid(bad.status(), needle);
  }
}

TEST(LatentLayoutTest, NeverAliasesAKvLayout) {
  KvLayout latent = DeepSeekV2();
  KvLayout kv = latent;
  kv.kind = LayoutKind::kKv;
  EXPECT_NE(LayoutDigest(latent), LayoutDigest(kv));
  EXPECT_NE(EncodeLayoutForDigest(latent).size(), EncodeLayoutForDigest(kv).size());
}

TEST(LayoutDigestTest, EveryFieldChangesTheDigest) {
  const KvLayout base = Llama2_7b();
  std::vector<KvLayout> variants(5, base);
  variants[0].layers += 1;
  variants[1].kv_heads += 1;
  variants[2].head_dim += 1;
  variants[3].dtype = DType::kBF16;
  variants[4].block_tokens += 16;
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(LayoutDigest(variants[i]), LayoutDigest(base)) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(LayoutDigest(variants[i]), LayoutDigest(variants[j]));
  }
}

}  // namespace
}  // namespace kvtier
