// SHA-256 through OpenSSL's EVP interface (libcrypto), for block keys and digests.
//
// Thread safety: Sha256 objects are not shared; the free function is reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvtier {

using Hash256 = std::array<uint8_t, 32>;

// Lowercase hex of the 32 bytes.
std::string ToHex(const Hash256& h);
// Parses 64 hex digits; false on any other input.
bool FromHex(std::string_view hex, Hash256* out);

// Incremental hasher. Aborts only if libcrypto itself fails to initialise a digest context,
// which happens solely on memory exhaustion inside OpenSSL.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  void Update(std::span<const std::byte> s) { Update(s.data(), s.size()); }
  Hash256 Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so OpenSSL headers stay out of this header.
};

Hash256 Sha256Of(std::string_view data);

}  // namespace kvtier
