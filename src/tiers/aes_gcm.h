// AES-256-GCM over a message given in parts, for the sealed remote values and the sealed SSD
// records (remote_crypto.h). Two implementations of the same standard, selected at run time:
//
// - ipsec-mb: Intel's Multi-Buffer Crypto for IPsec library (Debian's libipsec-mb), whose
//   AES-GCM uses VAES and VPCLMULQDQ on AVX-512 CPUs: 16-19 GiB/s on one core of the machines
//   docs/benchmarks.md describes, against 3.8-4.8 GiB/s for OpenSSL 3.0's AES-NI code
//   (bench/micro/aes_gcm_bench.cc). A sealed 1 MiB value then costs about 0.05 ms to open
//   instead of about 0.2 ms.
// - OpenSSL (EVP, AES-NI where present): the fallback when the build has no libipsec-mb or the
//   CPU lacks AES-NI and AVX2.
//
// Both compute the same function (tested against each other and against published vectors), so
// which one wrote a value never matters to the reader. Nothing here is hand-written cryptography:
// this file only frames calls into the two libraries.
//
// Thread safety: an AesGcm is one thread's at a time; separate objects may run concurrently.
// Ownership: an AesGcm owns its key schedule and wipes it when destroyed or rekeyed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace kvtier {

inline constexpr size_t kAesGcmKeyBytes = 32;
inline constexpr size_t kAesGcmNonceBytes = 12;
inline constexpr size_t kAesGcmTagBytes = 16;

enum class GcmImpl : uint8_t {
  kOpenSsl = 0,
  kIpsecMb = 1,  // Only where GcmImplAvailable says so.
};

// Whether this build and CPU can run `impl` (OpenSSL always can).
bool GcmImplAvailable(GcmImpl impl);
// The fastest available: kIpsecMb when available, else kOpenSsl.
GcmImpl DefaultGcmImpl();
// "ipsec-mb" or "openssl", with the instruction set ipsec-mb chose ("ipsec-mb avx512").
const char* GcmImplName(GcmImpl impl);

// One piece of a GCM pass: `n` bytes from `in` to `out` (the same buffer is allowed).
struct GcmPart {
  const std::byte* in;
  std::byte* out;
  size_t n;
};

class AesGcm {
 public:
  // `impl` must be available (checked).
  explicit AesGcm(GcmImpl impl = DefaultGcmImpl());
  ~AesGcm();
  AesGcm(const AesGcm&) = delete;
  AesGcm& operator=(const AesGcm&) = delete;

  GcmImpl impl() const { return impl_; }

  // AES-256-GCM of `parts` (one stream, in order) under `key` and the 12-byte `nonce`, with the
  // concatenation of `aad` as associated data. Encrypting writes the 16-byte tag to `tag`;
  // decrypting compares it in constant time and returns false on a mismatch. False on any
  // failure: the caller must not use what was written to the parts' outputs. The key schedule is
  // kept and reused while the key stays the same.
  bool Run(bool encrypt, std::span<const uint8_t, kAesGcmKeyBytes> key, const std::byte* nonce,
           std::span<const std::span<const std::byte>> aad, std::span<const GcmPart> parts,
           std::byte* tag);

 private:
  struct OpenSslState;
  struct IpsecMbState;
  GcmImpl impl_;
  std::unique_ptr<OpenSslState> openssl_;
  std::unique_ptr<IpsecMbState> ipsec_;
};

}  // namespace kvtier
