#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/assert.h"

namespace kvtier {

std::string ToHex(const Hash256& h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < h.size(); ++i) {
    out[2 * i] = kDigits[h[i] >> 4];
    out[2 * i + 1] = kDigits[h[i] & 0xF];
  }
  return out;
}

bool FromHex(std::string_view hex, Hash256* out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return true;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  KV_CHECK(ctx_ != nullptr);
  KV_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(const void* data, size_t n) {
  KV_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1);
}

Hash256 Sha256::Finish() {
  Hash256 out{};
  unsigned int len = 0;
  KV_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len) == 1);
  KV_CHECK(len == out.size());
  return out;
}

Hash256 Sha256Of(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Finish();
}

}  // namespace kvtier
