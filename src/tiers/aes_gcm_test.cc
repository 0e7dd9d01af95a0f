// Goal: both AES-256-GCM implementations behind AesGcm (libipsec-mb, OpenSSL) compute the
// standard function, so a value sealed by either opens with the other, and a wrong tag, byte of
// ciphertext or byte of associated data fails on both.
// Method: the published test case 16 of the GCM specification (256-bit key, 60-byte plaintext,
// 20-byte AAD) through each implementation; then random keys, nonces and messages from 0 bytes to
// 1 MiB + 3, split into random parts and AAD pieces, sealed by one implementation and compared
// byte for byte with the other's, opened by the other, and tampered with. Contexts are reused
// across keys and directions to exercise the key-schedule cache. On x86-64 builds with
// libipsec-mb, its implementation must be available (the CPUs this runs on have AES-NI).
#include "tiers/aes_gcm.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kvtier {
namespace {

std::vector<std::byte> Hex(const std::string& hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<GcmImpl> Impls() {
  std::vector<GcmImpl> out{GcmImpl::kOpenSsl};
  if (GcmImplAvailable(GcmImpl::kIpsecMb)) out.push_back(GcmImpl::kIpsecMb);
  return out;
}

std::array<uint8_t, kAesGcmKeyBytes> KeyOf(const std::vector<std::byte>& bytes) {
  std::array<uint8_t, kAesGcmKeyBytes> key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(bytes[i]);
  return key;
}

TEST(AesGcmTest, IpsecMbIsAvailableWhereBuilt) {
#ifdef KVTIER_HAVE_IPSEC_MB
  if (!__builtin_cpu_supports("aes") || !__builtin_cpu_supports("avx")) {
    GTEST_SKIP() << "this CPU lacks AES-NI or AVX; ipsec-mb is not used here";
  }
  EXPECT_TRUE(GcmImplAvailable(GcmImpl::kIpsecMb));
  EXPECT_EQ(DefaultGcmImpl(), GcmImpl::kIpsecMb);
  EXPECT_EQ(std::string(GcmImplName(GcmImpl::kIpsecMb)).rfind("ipsec-mb ", 0), 0u);
#else
  EXPECT_FALSE(GcmImplAvailable(GcmImpl::kIpsecMb));
  EXPECT_EQ(DefaultGcmImpl(), GcmImpl::kOpenSsl);
#endif
  EXPECT_STREQ(GcmImplName(GcmImpl::kOpenSsl), "openssl");
}

TEST(AesGcmTest, PublishedVector) {
  const auto key = KeyOf(Hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"));
  const auto plain = Hex(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
      "49a6b525b16aedf5aa0de657ba637b39");
  const auto aad = Hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  const auto nonce = Hex("cafebabefacedbaddecaf888");
  const auto cipher = Hex(
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b10"
      "56828838c5f61e6393ba7a0abcc9f662");
  const auto tag = Hex("76fc6ece0f4e1768cddf8853bb2d551b");
  for (const GcmImpl impl : Impls()) {
    SCOPED_TRACE(GcmImplName(impl));
    AesGcm gcm(impl);
    std::vector<std::byte> out(plain.size());
    std::array<std::byte, kAesGcmTagBytes> got{};
    // The AAD in two pieces and the plaintext in three, as the sealed values pass them.
    const std::span<const std::byte> aads[] = {std::span(aad).first(7), std::span(aad).subspan(7)};
    const GcmPart parts[] = {{plain.data(), out.data(), 5},
                             {plain.data() + 5, out.data() + 5, 33},
                             {plain.data() + 38, out.data() + 38, plain.size() - 38}};
    ASSERT_TRUE(gcm.Run(true, key, nonce.data(), aads, parts, got.data()));
    EXPECT_EQ(out, cipher);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), tag.begin()));

    std::vector<std::byte> back(cipher.size());
    const GcmPart open[] = {{cipher.data(), back.data(), cipher.size()}};
    const std::span<const std::byte> whole[] = {aad};
    std::array<std::byte, kAesGcmTagBytes> want{};
    std::copy(tag.begin(), tag.end(), want.begin());
    ASSERT_TRUE(gcm.Run(false, key, nonce.data(), whole, open, want.data()));
    EXPECT_EQ(back, plain);
  }
}

// Splits [0, n) into up to 4 random pieces.
std::vector<size_t> Cuts(size_t n, std::mt19937_64& rng) {
  std::vector<size_t> cuts{0, n};
  for (int i = 0; i < 3 && n > 0; ++i) cuts.push_back(rng() % (n + 1));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

TEST(AesGcmTest, ImplementationsAgreeAndRefuseTampering) {
  const std::vector<GcmImpl> impls = Impls();
  if (impls.size() < 2) GTEST_SKIP() << "only OpenSSL in this build: nothing to compare";
  std::mt19937_64 rng(7);
  AesGcm ipsec(GcmImpl::kIpsecMb);
  AesGcm openssl(GcmImpl::kOpenSsl);
  const size_t sizes[] = {0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 4095, 4096, 65537,
                          (1u << 20) + 3};
  for (int round = 0; round < 3; ++round) {
    for (const size_t n : sizes) {
      SCOPED_TRACE("size " + std::to_string(n) + " round " + std::to_string(round));
      std::array<uint8_t, kAesGcmKeyBytes> key{};
      for (auto& b : key) b = static_cast<uint8_t>(rng());
      std::array<std::byte, kAesGcmNonceBytes> nonce{};
      for (auto& b : nonce) b = static_cast<std::byte>(rng());
      std::vector<std::byte> plain(n), aad(rng() % 120);
      for (auto& b : plain) b = static_cast<std::byte>(rng());
      for (auto& b : aad) b = static_cast<std::byte>(rng());
      const size_t aad_cut = aad.empty() ? 0 : rng() % aad.size();
      const std::span<const std::byte> aads[] = {std::span(aad).first(aad_cut),
                                                 std::span(aad).subspan(aad_cut)};

      auto seal = [&](AesGcm& gcm, std::vector<std::byte>* out, std::byte* tag) {
        out->assign(n, std::byte{0});
        std::vector<GcmPart> parts;
        const std::vector<size_t> c = Cuts(n, rng);
        for (size_t i = 0; i + 1 < c.size(); ++i) {
          parts.push_back({plain.data() + c[i], out->data() + c[i], c[i + 1] - c[i]});
        }
        return gcm.Run(true, key, nonce.data(), aads, parts, tag);
      };
      std::vector<std::byte> a, b;
      std::array<std::byte, kAesGcmTagBytes> tag_a{}, tag_b{};
      ASSERT_TRUE(seal(ipsec, &a, tag_a.data()));
      ASSERT_TRUE(seal(openssl, &b, tag_b.data()));
      ASSERT_EQ(a, b);
      ASSERT_EQ(tag_a, tag_b);

      // Each opens the other's, in place, in random pieces.
      for (AesGcm* gcm : {&ipsec, &openssl}) {
        std::vector<std::byte> buf = a;
        std::vector<GcmPart> parts;
        const std::vector<size_t> c = Cuts(n, rng);
        for (size_t i = 0; i + 1 < c.size(); ++i) {
          parts.push_back({buf.data() + c[i], buf.data() + c[i], c[i + 1] - c[i]});
        }
        std::array<std::byte, kAesGcmTagBytes> tag = tag_a;
        ASSERT_TRUE(gcm->Run(false, key, nonce.data(), aads, parts, tag.data()));
        ASSERT_EQ(buf, plain);
      }

      // Tampering: a tag bit, a ciphertext byte, an AAD byte, another nonce.
      for (AesGcm* gcm : {&ipsec, &openssl}) {
        std::vector<std::byte> out(n);
        auto open = [&](const std::vector<std::byte>& ct, std::span<const std::byte> aad_piece,
                        const std::byte* iv, std::array<std::byte, kAesGcmTagBytes> tag) {
          const GcmPart parts[] = {{ct.data(), out.data(), n}};
          const std::span<const std::byte> pieces[] = {aad_piece};
          return gcm->Run(false, key, iv, pieces, parts, tag.data());
        };
        std::array<std::byte, kAesGcmTagBytes> bad_tag = tag_a;
        bad_tag[rng() % bad_tag.size()] ^= std::byte{0x10};
        EXPECT_FALSE(open(a, aad, nonce.data(), bad_tag));
        if (n > 0) {
          std::vector<std::byte> bad = a;
          bad[rng() % n] ^= std::byte{1};
          EXPECT_FALSE(open(bad, aad, nonce.data(), tag_a));
        }
        if (!aad.empty()) {
          std::vector<std::byte> bad_aad = aad;
          bad_aad[rng() % aad.size()] ^= std::byte{0x80};
          EXPECT_FALSE(open(a, bad_aad, nonce.data(), tag_a));
        }
        std::array<std::byte, kAesGcmNonceBytes> other = nonce;
        other[0] ^= std::byte{1};
        EXPECT_FALSE(open(a, aad, other.data(), tag_a));
        // And the context still works after a failure.
        EXPECT_TRUE(open(a, aad, nonce.data(), tag_a));
        EXPECT_EQ(out, plain);
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
