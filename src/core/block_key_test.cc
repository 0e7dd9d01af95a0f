// Goal: block keys are exactly the documented function of their inputs, isolate tenants and
// models, share prefixes, leave the partial tail unkeyed, and extend incrementally to the same
// result as a one-shot computation.
// Method: the namespace digest and chunk hashes are checked against the test vectors of
// docs/key_format.md (which a Python reference and sha256sum reproduce independently); the
// properties are checked on hand-made inputs and on randomized ones whose seed is printed so a
// failure can be replayed (change kSeedOverride to the printed value).
#include "core/block_key.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/assert.h"
#include "core/limits.h"

namespace kvtier {
namespace {

// 0 draws a fresh seed from std::random_device; set it to a printed seed to replay a failure.
constexpr uint64_t kSeedOverride = 0;

uint64_t TestSeed() {
  const uint64_t seed = kSeedOverride != 0 ? kSeedOverride : std::random_device{}();
  std::printf("random seed: %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

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

std::vector<std::string> ToHexes(const std::vector<Hash256>& hashes) {
  std::vector<std::string> out;
  for (const Hash256& h : hashes) out.push_back(ToHex(h));
  return out;
}

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// The layouts and namespaces of docs/key_format.md.
const KvLayout kL1{
    .layers = 32, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 256};
const KvLayout kL2{
    .layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16, .block_tokens = 16};

Hash256 N1() {
  Result<Hash256> ns = NamespaceDigest({.name = "tiny"}, kL2, "tenant-a", {});
  KV_CHECK(ns.ok());
  return *ns;
}

Hash256 N2() {
  const std::vector<std::string> extra = {"lora:sql", "img:7f3a"};
  Result<Hash256> ns = NamespaceDigest({.name = "tiny"}, kL2, "tenant-a", extra);
  KV_CHECK(ns.ok());
  return *ns;
}

Hash256 N3() {
  Result<Hash256> ns = NamespaceDigest(
      {.name = "meta-llama/Llama-2-7b-hf", .weights_digest = Sha256Of("weights")}, kL1, "", {});
  KV_CHECK(ns.ok());
  return *ns;
}

TEST(NamespaceDigestTest, MatchesDocumentedVectors) {
  Result<std::string> enc = EncodeNamespaceForDigest({.name = "tiny"}, kL2, "tenant-a", {});
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(BytesToHex(*enc),
            "090000006b76746965722e6e73010000000400000074696e79"
            "0000000000000000000000000000000000000000000000000000000000000000"
            "422668ad3af683c2b8249b937b62554c6084790a0c855ad464033707457c0329"
            "0800000074656e616e742d6100000000");
  EXPECT_EQ(ToHex(N1()), "84c1edcdc4a8dab4f3b3d4a4b5af738b2655426d8bad726fc78973136c2a330c");
  EXPECT_EQ(ToHex(N2()), "f122c2c237d38e9a14e297fd0abb09fe25ce7544498f2c14637a26ca8d58cdec");
  EXPECT_EQ(ToHex(N3()), "396b3a96b2479565b6c6612d198197d44ab517d5e87a46b0ac9be233b5e38a76");
}

TEST(ChunkHashesTest, MatchesDocumentedVectors) {
  const std::vector<uint32_t> t40 = Iota(40);
  Result<std::vector<Hash256>> c1 = ChunkHashes(N1(), t40, 16);
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(ToHexes(*c1), (std::vector<std::string>{
                              "354858e41e3ed729af884a6f5d429572751e908550e51871cb267d177c103ad2",
                              "e9dc156b2cbea04456563fb738f9eafadb45c44ec6868523a4bc223afdeb603d"}));
  Result<std::vector<Hash256>> c2 = ChunkHashes(N2(), t40, 16);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(ToHexes(*c2), (std::vector<std::string>{
                              "8975ee0c6beb4110dcfe28a57a16814bc47c421dcc0c371c36500e641a76ea48",
                              "214391d73f735382ecb5dfed3d786c446b8ee375f6b9c9af36a6a2e3244134b9"}));
  std::vector<uint32_t> t600(600);
  for (uint32_t i = 0; i < 600; ++i) t600[i] = (i * 7919u) % 32000u;
  Result<std::vector<Hash256>> c3 = ChunkHashes(N3(), t600, 256);
  ASSERT_TRUE(c3.ok());
  EXPECT_EQ(ToHexes(*c3), (std::vector<std::string>{
                              "f86121b9af086369515c7724ad4fb505f9bceef88371e51e6b065fb5c86e1303",
                              "bdcd512d2716156955ef7d9268ba472f618b7b1a66fb5b411e064d2fee21d85d"}));
}

TEST(NamespaceDigestTest, RejectsOversizedInputsAndBadLayouts) {
  KvLayout bad = kL2;
  bad.block_tokens = 20;
  EXPECT_TRUE(NamespaceDigest({}, bad, "", {}).status().IsInvalidArgument());
  const std::string salt_max(kSaltBytesMax, 's');
  EXPECT_TRUE(NamespaceDigest({}, kL2, salt_max, {}).ok());
  Result<Hash256> r = NamespaceDigest({}, kL2, salt_max + "s", {});
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("salt"), std::string::npos);
  r = NamespaceDigest({.name = std::string(kModelNameBytesMax + 1, 'm')}, kL2, "", {});
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("model name"), std::string::npos);
  std::vector<std::string> extra(kExtraKeysMax, "k");
  EXPECT_TRUE(NamespaceDigest({}, kL2, "", extra).ok());
  extra.push_back("k");
  r = NamespaceDigest({}, kL2, "", extra);
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("extra keys"), std::string::npos);
  const std::vector<std::string> long_key = {std::string(kExtraKeyBytesMax + 1, 'k')};
  r = NamespaceDigest({}, kL2, "", long_key);
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("extra key"), std::string::npos);
}

TEST(NamespaceDigestTest, EveryInputChangesTheNamespace) {
  auto ns = [](const ModelIdentity& m, const KvLayout& l, std::string_view salt,
               const std::vector<std::string>& extra) {
    Result<Hash256> r = NamespaceDigest(m, l, salt, extra);
    KV_CHECK(r.ok());
    return ToHex(*r);
  };
  ModelIdentity other_weights{.name = "tiny"};
  other_weights.weights_digest[31] = 1;
  KvLayout other_layout = kL2;
  other_layout.dtype = DType::kBF16;
  // Length prefixes keep field boundaries: moving bytes between fields changes the digest.
  const std::vector<std::string> all = {
      ns({.name = "tiny"}, kL2, "tenant-a", {}),
      ns({.name = "tiny2"}, kL2, "tenant-a", {}),
      ns(other_weights, kL2, "tenant-a", {}),
      ns({.name = "tiny"}, other_layout, "tenant-a", {}),
      ns({.name = "tiny"}, kL2, "tenant-b", {}),
      ns({.name = "tiny"}, kL2, "", {}),
      ns({.name = "tinyt"}, kL2, "enant-a", {}),
      ns({.name = "tiny"}, kL2, "tenant-a", {""}),
      ns({.name = "tiny"}, kL2, "tenant-a", {"lora:a"}),
      ns({.name = "tiny"}, kL2, "tenant-a", {"lora:a", "img:b"}),
      ns({.name = "tiny"}, kL2, "tenant-a", {"img:b", "lora:a"}),
      ns({.name = "tiny"}, kL2, "tenant-a", {"lora:aimg:b"}),
      ns({.name = "tiny"}, kL2, "tenant-alora:a", {}),
  };
  const std::unordered_set<std::string> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), all.size());
}

TEST(ChunkHashesTest, DifferentSaltsNeverShareAKey) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::unordered_set<std::string> seen;
  size_t expected = 0;
  for (int round = 0; round < 200; ++round) {
    // Two distinct random salts (0..63 random bytes) over the same random tokens.
    std::string salt_a(rng() % 64, '\0'), salt_b;
    for (char& c : salt_a) c = static_cast<char>(rng());
    do {
      salt_b.assign(rng() % 64, '\0');
      for (char& c : salt_b) c = static_cast<char>(rng());
    } while (salt_b == salt_a);
    std::vector<uint32_t> tokens(16 + rng() % 200);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 4);  // Few ids: similar chunks.
    for (const std::string* salt : {&salt_a, &salt_b}) {
      Result<Hash256> ns = NamespaceDigest({.name = "m"}, kL2, *salt, {});
      ASSERT_TRUE(ns.ok());
      Result<std::vector<Hash256>> hashes = ChunkHashes(*ns, tokens, 16);
      ASSERT_TRUE(hashes.ok());
      for (const Hash256& h : *hashes) seen.insert(ToHex(h));
      expected += hashes->size();
    }
    // Keys of one round must be pairwise distinct: chunks of one sequence differ by position
    // (the parent hash), and the two salts differ by namespace.
    ASSERT_EQ(seen.size(), expected) << "round " << round;
    seen.clear();
    expected = 0;
  }
}

TEST(ChunkHashesTest, ExtensionSharesLeadingHashes) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(16 * 5 + 7);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng());
  const std::span<const uint32_t> all(tokens);
  Result<std::vector<Hash256>> full = ChunkHashes(N1(), all, 16);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->size(), 5u);
  for (size_t n = 0; n <= tokens.size(); ++n) {
    Result<std::vector<Hash256>> prefix = ChunkHashes(N1(), all.first(n), 16);
    ASSERT_TRUE(prefix.ok());
    ASSERT_EQ(prefix->size(), n / 16);
    for (size_t i = 0; i < prefix->size(); ++i) EXPECT_EQ((*prefix)[i], (*full)[i]) << n;
  }
  // Changing one token of chunk 2 keeps chunks 0 and 1 and changes 2 and every later chunk.
  tokens[2 * 16 + 3] ^= 1;
  Result<std::vector<Hash256>> changed = ChunkHashes(N1(), tokens, 16);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ((*changed)[0], (*full)[0]);
  EXPECT_EQ((*changed)[1], (*full)[1]);
  for (size_t i = 2; i < 5; ++i) EXPECT_NE((*changed)[i], (*full)[i]) << i;
}

TEST(ChunkHashesTest, PartialTailGetsNoHash) {
  for (uint32_t n : {0u, 1u, 15u, 16u, 17u, 47u, 48u, 49u}) {
    Result<std::vector<Hash256>> h = ChunkHashes(N1(), Iota(n), 16);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->size(), n / 16) << n;
  }
  // The first hash is the documented link with the zero parent.
  const std::vector<uint32_t> t16 = Iota(16);
  Result<std::vector<Hash256>> h = ChunkHashes(N1(), t16, 16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)[0], ChunkHash(N1(), Hash256{}, t16));
}

TEST(ChunkHashesTest, RejectsBadArguments) {
  const std::vector<uint32_t> t = Iota(64);
  for (uint32_t bt : {0u, 8u, 24u, 2048u}) {
    EXPECT_TRUE(ChunkHashes(N1(), t, bt).status().IsInvalidArgument()) << bt;
  }
  const std::vector<uint32_t> too_many(kTokensPerCallMax + 1, 7);
  Result<std::vector<Hash256>> r = ChunkHashes(N1(), too_many, 16);
  ASSERT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("above the limit"), std::string::npos);
  std::vector<Hash256> known(5);
  EXPECT_TRUE(ExtendChunkHashes(N1(), t, 16, &known).IsInvalidArgument());
}

TEST(ChunkHashesTest, IncrementalExtensionEqualsOneShot) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(32 * 9 + 5);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 50000);
  Result<std::vector<Hash256>> one_shot = ChunkHashes(N2(), tokens, 32);
  ASSERT_TRUE(one_shot.ok());
  ASSERT_EQ(one_shot->size(), 9u);
  // ExtendChunkHashes from every number of known hashes.
  for (size_t known = 0; known <= 9; ++known) {
    std::vector<Hash256> hashes(one_shot->begin(), one_shot->begin() + static_cast<long>(known));
    ASSERT_TRUE(ExtendChunkHashes(N2(), tokens, 32, &hashes).ok());
    EXPECT_EQ(hashes, *one_shot) << known;
  }
  // ChainHasher fed in random pieces, then resumed half way through.
  Result<ChainHasher> chain = ChainHasher::Create(N2(), 32);
  ASSERT_TRUE(chain.ok());
  std::vector<Hash256> streamed;
  for (size_t pos = 0; pos < tokens.size();) {
    const size_t piece = std::min<size_t>(rng() % 70, tokens.size() - pos);
    ASSERT_TRUE(chain->Append(std::span(tokens).subspan(pos, piece), &streamed).ok());
    pos += piece;
    EXPECT_EQ(chain->chunks_done(), pos / 32);
    EXPECT_EQ(chain->pending_tokens(), pos % 32);
  }
  EXPECT_EQ(streamed, *one_shot);
  EXPECT_EQ(chain->parent(), one_shot->back());
  Result<ChainHasher> resumed = ChainHasher::Resume(N2(), 32, (*one_shot)[3], 4);
  ASSERT_TRUE(resumed.ok());
  std::vector<Hash256> rest;
  ASSERT_TRUE(resumed->Append(std::span(tokens).subspan(4 * 32), &rest).ok());
  ASSERT_EQ(rest.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rest[i], (*one_shot)[4 + i]);
}

TEST(ChainHasherTest, RejectsBadStarts) {
  EXPECT_TRUE(ChainHasher::Create(N1(), 17).status().IsInvalidArgument());
  Hash256 parent{};
  parent[0] = 1;
  EXPECT_TRUE(ChainHasher::Resume(N1(), 16, parent, 0).status().IsInvalidArgument());
  EXPECT_TRUE(ChainHasher::Resume(N1(), 16, parent, 3).ok());
}

TEST(BlockKeyTest, EncodingRoundTripsAndIsLittleEndian) {
  BlockKey key{.chunk_hash = N1(), .layer = 0x01020304};
  const std::array<std::byte, kBlockKeyEncodedBytes> enc = EncodeBlockKey(key);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(std::to_integer<uint8_t>(enc[i]), key.chunk_hash[i]);
  EXPECT_EQ(std::to_integer<uint8_t>(enc[32]), 0x04);
  EXPECT_EQ(std::to_integer<uint8_t>(enc[35]), 0x01);
  Result<BlockKey> dec = DecodeBlockKey(enc);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, key);
  EXPECT_TRUE(DecodeBlockKey(std::span(enc).first(35)).status().IsCorruption());
  const std::vector<std::byte> longer(37);
  EXPECT_TRUE(DecodeBlockKey(longer).status().IsCorruption());
}

TEST(BlockKeyTest, TextRoundTrips) {
  const BlockKey key{.chunk_hash = N1(), .layer = 31};
  EXPECT_EQ(key.ToString(), "84c1edcdc4a8dab4f3b3d4a4b5af738b2655426d8bad726fc78973136c2a330c:31");
  Result<BlockKey> parsed = ParseBlockKey(key.ToString());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, key);
  const std::string hex = ToHex(N1());
  for (const std::string& bad :
       {std::string(""), hex, hex + ":", hex + ":x", hex + ":-1", hex + ":4294967296",
        hex.substr(1) + ":1", "zz" + hex.substr(2) + ":1"}) {
    EXPECT_TRUE(ParseBlockKey(bad).status().IsInvalidArgument()) << bad;
  }
}

TEST(BlockKeyTest, HashDistinguishesLayersAndWorksInSets) {
  const BlockKey a{.chunk_hash = N1(), .layer = 0};
  BlockKey b = a;
  b.layer = 1;
  EXPECT_NE(a, b);
  EXPECT_NE(BlockKeyHash{}(a), BlockKeyHash{}(b));
  EXPECT_EQ(std::hash<BlockKey>{}(a), BlockKeyHash{}(a));
  std::unordered_set<BlockKey> set;
  for (uint32_t layer = 0; layer < 80; ++layer) {
    set.insert({.chunk_hash = N1(), .layer = layer});
    set.insert({.chunk_hash = N2(), .layer = layer});
  }
  EXPECT_EQ(set.size(), 160u);
  EXPECT_EQ(set.count(b), 1u);
}

}  // namespace
}  // namespace kvtier
