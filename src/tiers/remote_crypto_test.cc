// Goal: show that sealed remote values can only be read by a holder of the key they were written
// with, for the key name they were written under: any flipped byte, a value moved to another
// name, a forgery with a made-up key, or an unknown key id is refused; the ciphertext shows no
// run of the plaintext; a value received in parts and opened in place gives the same bytes and
// leaves nothing behind when refused; keys rotate (old values readable, new ones written with the new key,
// names unchanged); key names hide the chunk hash; key files are refused when others can read
// them; and tenant salts are deterministic per (tenant, secret) and differ otherwise.
// Method: real OpenSSL primitives on random blocks; every byte of a sealed value flipped in turn
// (sampled on larger values); key files written with chosen modes in a temporary directory.
#include "tiers/remote_crypto.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "core/assert.h"
#include "core/sha256.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

RemoteKeyring Ring(std::string_view text) {
  Result<RemoteKeyring> r = RemoteKeyring::Parse(text);
  KV_CHECK_OK(r.status());
  return std::move(r).value();
}

const std::string kKey1 = "1 " + std::string(64, 'a') + "\n";
const std::string kKey2 = "2 " + std::string(62, 'b') + "0c\n";

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

BlockKey TestKey(uint8_t v, uint32_t layer) {
  BlockKey k;
  k.chunk_hash.fill(v);
  k.layer = layer;
  return k;
}

TEST(RemoteCryptoTest, ParseAcceptsKeysAndRejectsBadLinesWithoutEchoingThem) {
  const RemoteKeyring ring = Ring("# keys\n\n" + kKey2 + kKey1);
  EXPECT_EQ(ring.keys().size(), 2u);
  EXPECT_EQ(ring.write_key().id, 2u);
  ASSERT_NE(ring.Find(1), nullptr);
  EXPECT_EQ(ring.Find(3), nullptr);
  for (const std::string& bad :
       {std::string(""), std::string("# only a comment\n"), "0 " + std::string(64, 'a'),
        "x " + std::string(64, 'a'), "1 " + std::string(63, 'a'), "1 " + std::string(64, 'g'),
        "99999999999 " + std::string(64, 'a'), kKey1 + kKey1, std::string(64, 'a')}) {
    Result<RemoteKeyring> r = RemoteKeyring::Parse(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
    EXPECT_EQ(r.status().message().find("aaaaaaaa"), std::string::npos) << r.status().ToString();
  }
}

TEST(RemoteCryptoTest, SealOpenRoundTripAndEveryTamperingFails) {
  const RemoteKeyring ring = Ring(kKey1);
  const std::vector<std::byte> plain = RandomBytes(700, 1);
  std::vector<std::byte> sealed, back;
  ASSERT_TRUE(SealRemoteValue(ring, "kvt:{a}:b", plain, &sealed).ok());
  EXPECT_EQ(sealed.size(), plain.size() + kSealedOverheadBytes);
  uint32_t id = 0;
  ASSERT_TRUE(OpenRemoteValue(ring, "kvt:{a}:b", sealed, &back, &id).ok());
  EXPECT_EQ(back, plain);
  EXPECT_EQ(id, 1u);
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::vector<std::byte> bad = sealed;
    bad[i] ^= std::byte{0x01};
    const Status s = OpenRemoteValue(ring, "kvt:{a}:b", bad, &back, &id);
    EXPECT_FALSE(s.ok()) << "byte " << i;
  }
  EXPECT_TRUE(OpenRemoteValue(ring, "kvt:{a}:c", sealed, &back, &id).IsCorruption());
  EXPECT_TRUE(OpenRemoteValue(ring, "kvt:{a}:b", std::span(sealed).first(39), &back, &id)
                  .IsCorruption());
  // A forger with another key, even claiming key id 1, fails authentication.
  const RemoteKeyring other = Ring("1 " + std::string(64, 'f'));
  std::vector<std::byte> forged;
  ASSERT_TRUE(SealRemoteValue(other, "kvt:{a}:b", plain, &forged).ok());
  EXPECT_TRUE(OpenRemoteValue(ring, "kvt:{a}:b", forged, &back, &id).IsCorruption());
  // Plaintext (an unsealed value) is refused too.
  EXPECT_TRUE(OpenRemoteValue(ring, "kvt:{a}:b", plain, &back, &id).IsCorruption());
}

// A sealed value received in three parts (seal header and header ciphertext; body ciphertext,
// opened in place; tag) opens to the same plaintext as when whole, and every tampering fails
// with both buffers wiped.
TEST(RemoteCryptoTest, InPlaceOpenMatchesTheWholeValueAndWipesOnFailure) {
  const RemoteKeyring ring = Ring(kKey1);
  constexpr size_t kHead = 128;
  for (const size_t body_bytes : {size_t{0}, size_t{1}, size_t{5000}}) {
    const std::vector<std::byte> plain = RandomBytes(kHead + body_bytes, 7);
    std::vector<std::byte> sealed;
    ASSERT_TRUE(SealRemoteValue(ring, "kvt:{a}:b", plain, &sealed).ok());
    const auto open = [&](const std::vector<std::byte>& value, std::string_view name,
                          std::vector<std::byte>* head, std::vector<std::byte>* body) {
      const std::span<const std::byte> v(value);
      head->assign(kHead, std::byte{0x55});
      body->assign(v.begin() + kSealedHeaderBytes + kHead, v.end() - kSealedTagBytes);
      uint32_t id = 0;
      return OpenRemoteValueInPlace(ring, name, v.first(kSealedHeaderBytes + kHead), *head, *body,
                                    v.last<kSealedTagBytes>(), &id);
    };
    std::vector<std::byte> head, body;
    ASSERT_TRUE(open(sealed, "kvt:{a}:b", &head, &body).ok()) << body_bytes;
    EXPECT_TRUE(std::equal(head.begin(), head.end(), plain.begin()));
    EXPECT_TRUE(std::equal(body.begin(), body.end(), plain.begin() + kHead));
    const auto wiped = [](const std::vector<std::byte>& b) {
      return std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
    };
    for (size_t i = 0; i < sealed.size(); i += 1 + sealed.size() / 97) {
      std::vector<std::byte> bad = sealed;
      bad[i] ^= std::byte{0x01};
      const Status s = open(bad, "kvt:{a}:b", &head, &body);
      EXPECT_FALSE(s.ok()) << "byte " << i;
      if (s.IsCorruption() && i >= kSealedHeaderBytes) {  // The GCM pass ran and failed.
        EXPECT_TRUE(wiped(head) && wiped(body)) << "byte " << i;
      }
    }
    EXPECT_TRUE(open(sealed, "kvt:{a}:c", &head, &body).IsCorruption());
    EXPECT_TRUE(wiped(head) && wiped(body));
  }
  // An unknown key id is NotFound, as for a whole value.
  std::vector<std::byte> foreign;
  ASSERT_TRUE(SealRemoteValue(Ring(kKey2), "n", RandomBytes(kHead, 2), &foreign).ok());
  std::vector<std::byte> head(kHead), body;
  uint32_t id = 0;
  EXPECT_TRUE(OpenRemoteValueInPlace(ring, "n", std::span(foreign).first(kSealedHeaderBytes + kHead),
                                     head, body, std::span(foreign).last<kSealedTagBytes>(), &id)
                  .IsNotFound());
  EXPECT_EQ(id, 2u);
}

TEST(RemoteCryptoTest, CiphertextHasNoRunOfThePlaintextAndNoncesDiffer) {
  const RemoteKeyring ring = Ring(kKey1);
  // A block with long repeated runs, the easiest case for a leak.
  std::vector<std::byte> plain(64 * 1024, std::byte{0x3c});
  std::vector<std::byte> a, b;
  ASSERT_TRUE(SealRemoteValue(ring, "n", plain, &a).ok());
  ASSERT_TRUE(SealRemoteValue(ring, "n", plain, &b).ok());
  EXPECT_NE(a, b);  // Fresh nonce per value.
  const std::vector<std::byte> run(plain.begin(), plain.begin() + 64);
  EXPECT_EQ(std::search(a.begin(), a.end(), run.begin(), run.end()), a.end());
}

// A RemoteCipher kept across values (as the remote store keeps one per call and per worker)
// must behave exactly like a fresh context per value: its key changes with the keyring, it
// switches between sealing and opening, a refused value leaves nothing behind and does not spoil
// the next open, and every seal still draws a fresh nonce.
TEST(RemoteCryptoTest, AReusedCipherActsLikeAFreshOneAcrossKeysDirectionsAndFailures) {
  const RemoteKeyring rings[] = {Ring(kKey1), Ring(kKey2)};
  RemoteCipher sealer, opener;
  for (uint32_t i = 0; i < 12; ++i) {
    const RemoteKeyring& ring = rings[i % 3 == 2 ? 1 : 0];
    const std::string name = "kvt:{c}:" + std::to_string(i);
    const std::vector<std::byte> plain = RandomBytes(1000 + 37 * i, i);
    std::vector<std::byte> sealed, again;
    ASSERT_TRUE(SealRemoteValue(ring, name, plain, {}, &sealed, &sealer).ok());
    ASSERT_TRUE(SealRemoteValue(ring, name, plain, {}, &again, &sealer).ok());
    EXPECT_NE(sealed, again) << "a fresh nonce per value, context reused or not";
    std::vector<std::byte> fresh;
    uint32_t key_id = 0;
    ASSERT_TRUE(OpenRemoteValue(ring, name, sealed, &fresh, &key_id).ok()) << i;
    EXPECT_EQ(fresh, plain);

    std::vector<std::byte> forged = sealed;
    forged[kSealedHeaderBytes + i] ^= std::byte{1};
    std::vector<std::byte> out(plain.size(), std::byte{0x55});
    size_t body_bytes = 0;
    EXPECT_TRUE(OpenRemoteValueInto(ring, name, forged, {}, out, &body_bytes, &key_id, &opener)
                    .IsCorruption());
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0}; }))
        << "nothing unauthenticated is left in the buffer";
    for (RemoteCipher* c : {&opener, &sealer}) {  // The sealer switches direction here.
      std::fill(out.begin(), out.end(), std::byte{0});
      ASSERT_TRUE(
          OpenRemoteValueInto(ring, name, sealed, {}, out, &body_bytes, &key_id, c).ok())
          << i;
      EXPECT_EQ(body_bytes, plain.size());
      EXPECT_EQ(out, plain);
    }
    EXPECT_FALSE(OpenRemoteValueInto(ring, name + "x", sealed, {}, out, &body_bytes, &key_id,
                                     &opener)
                     .ok())
        << "the key name is still bound";
  }
}

TEST(RemoteCryptoTest, RotationKeepsOldValuesReadableAndNamesStable) {
  const RemoteKeyring old_ring = Ring(kKey1);
  const RemoteKeyring rotated = Ring(kKey1 + kKey2);
  const RemoteKeyring only_new = Ring(kKey2);
  const std::vector<std::byte> plain = RandomBytes(300, 2);
  std::vector<std::byte> v1, v2, back;
  uint32_t id = 0;
  ASSERT_TRUE(SealRemoteValue(old_ring, "k", plain, &v1).ok());
  ASSERT_TRUE(SealRemoteValue(rotated, "k", plain, &v2).ok());
  ASSERT_TRUE(OpenRemoteValue(rotated, "k", v1, &back, &id).ok());
  EXPECT_EQ(id, 1u);
  ASSERT_TRUE(OpenRemoteValue(rotated, "k", v2, &back, &id).ok());
  EXPECT_EQ(id, 2u);
  EXPECT_TRUE(OpenRemoteValue(old_ring, "k", v2, &back, &id).IsNotFound());
  EXPECT_TRUE(OpenRemoteValue(only_new, "k", v1, &back, &id).IsNotFound());
  const BlockKey key = TestKey(0x11, 3);
  EXPECT_EQ(SealedKeyName("kvt", old_ring, key), SealedKeyName("kvt", rotated, key));
  EXPECT_NE(SealedKeyName("kvt", old_ring, key), SealedKeyName("kvt", only_new, key));
}

TEST(RemoteCryptoTest, KeyNamesHideTheChunkHashAndKeepLayersOnOneSlot) {
  const RemoteKeyring ring = Ring(kKey1);
  const BlockKey k0 = TestKey(0x5a, 0), k1 = TestKey(0x5a, 1), other = TestKey(0x5b, 0);
  const std::string n0 = SealedKeyName("kvt", ring, k0);
  const std::string n1 = SealedKeyName("kvt", ring, k1);
  EXPECT_EQ(n0.find(ToHex(k0.chunk_hash).substr(0, 16)), std::string::npos) << n0;
  EXPECT_EQ(n0.rfind("kvt:{", 0), 0u);
  EXPECT_NE(n0, n1);
  EXPECT_EQ(n0.substr(0, n0.find('}')), n1.substr(0, n1.find('}')));  // Same hash tag.
  EXPECT_NE(n0.substr(0, n0.find('}')),
            SealedKeyName("kvt", ring, other).substr(0, n0.find('}')));
}

TEST(RemoteCryptoTest, KeyFileModeIsChecked) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  const std::string path = dir->Join("keys");
  std::ofstream(path) << kKey1;
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  Result<RemoteKeyring> open = RemoteKeyring::LoadFile(path);
  EXPECT_TRUE(open.status().IsInvalidArgument()) << open.status().ToString();
  EXPECT_NE(open.status().message().find("0644"), std::string::npos) << open.status().ToString();
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_TRUE(RemoteKeyring::LoadFile(path).ok());
  const std::string fifo = dir->Join("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(RemoteKeyring::LoadFile(fifo).status().IsInvalidArgument());  // No hang.
  EXPECT_TRUE(RemoteKeyring::LoadFile(dir->Join("missing")).status().IsNotFound());
  Result<std::string> generated = RemoteKeyring::GenerateText(7);
  ASSERT_TRUE(generated.ok());
  Result<RemoteKeyring> parsed = RemoteKeyring::Parse(*generated);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->write_key().id, 7u);
}

TEST(RemoteCryptoTest, TenantSaltIsDeterministicAndSeparates) {
  const std::string secret(32, 's');
  const auto bytes = std::as_bytes(std::span(secret));
  Result<std::string> a = DeriveTenantSalt("tenant-a", bytes);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(*a, *DeriveTenantSalt("tenant-a", bytes));
  EXPECT_NE(*a, *DeriveTenantSalt("tenant-b", bytes));
  const std::string other(32, 't');
  EXPECT_NE(*a, *DeriveTenantSalt("tenant-a", std::as_bytes(std::span(other))));
  EXPECT_TRUE(DeriveTenantSalt("tenant-a", bytes.first(15)).status().IsInvalidArgument());
  EXPECT_TRUE(DeriveTenantSalt("", bytes).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
