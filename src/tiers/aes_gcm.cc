// See aes_gcm.h.
#include "tiers/aes_gcm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <climits>
#include <cstring>
#include <vector>

#include "core/assert.h"

#ifdef KVTIER_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

namespace kvtier {

// ---- OpenSSL ----

namespace {

class EvpGcm {
 public:
  EvpGcm() = default;
  ~EvpGcm() {
    EVP_CIPHER_CTX_free(ctx_);  // Frees nullptr quietly; cleanses the key schedule.
    OPENSSL_cleanse(key_.data(), key_.size());
  }
  EvpGcm(const EvpGcm&) = delete;
  EvpGcm& operator=(const EvpGcm&) = delete;

  bool Run(bool encrypt, std::span<const uint8_t, kAesGcmKeyBytes> key, const std::byte* nonce,
           std::span<const std::span<const std::byte>> aad, std::span<const GcmPart> parts,
           std::byte* tag) {
    if (ctx_ == nullptr) ctx_ = EVP_CIPHER_CTX_new();
    if (ctx_ == nullptr) return false;
    const bool ok = Key(encrypt, key, nonce) && Pass(encrypt, aad, parts, tag);
    // After a failure the schedule is dropped, so a half-initialized context is never reused.
    if (!ok) keyed_ = false;
    return ok;
  }

 private:
  bool Key(bool encrypt, std::span<const uint8_t, kAesGcmKeyBytes> key, const std::byte* nonce) {
    const auto* iv = reinterpret_cast<const uint8_t*>(nonce);
    if (keyed_ && encrypt_ == encrypt && CRYPTO_memcmp(key_.data(), key.data(), key.size()) == 0) {
      // Same key, same direction: only the nonce changes (OpenSSL keeps the key schedule).
      return EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, iv, encrypt ? 1 : 0) == 1;
    }
    keyed_ = false;
    if (EVP_CipherInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key.data(), iv, encrypt ? 1 : 0) !=
        1) {
      return false;
    }
    std::memcpy(key_.data(), key.data(), key.size());
    encrypt_ = encrypt;
    keyed_ = true;
    return true;
  }

  bool Pass(bool encrypt, std::span<const std::span<const std::byte>> aad,
            std::span<const GcmPart> parts, std::byte* tag) {
    int len = 0;
    for (const std::span<const std::byte> a : aad) {
      if (a.size() > INT_MAX) return false;
      if (!a.empty() && EVP_CipherUpdate(ctx_, nullptr, &len,
                                         reinterpret_cast<const uint8_t*>(a.data()),
                                         static_cast<int>(a.size())) != 1) {
        return false;
      }
    }
    for (const GcmPart& p : parts) {
      if (p.n == 0) continue;
      if (p.n > INT_MAX) return false;
      if (EVP_CipherUpdate(ctx_, reinterpret_cast<uint8_t*>(p.out), &len,
                           reinterpret_cast<const uint8_t*>(p.in), static_cast<int>(p.n)) != 1 ||
          static_cast<size_t>(len) != p.n) {
        return false;
      }
    }
    if (!encrypt && EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG,
                                        static_cast<int>(kAesGcmTagBytes), tag) != 1) {
      return false;
    }
    if (EVP_CipherFinal_ex(ctx_, nullptr, &len) != 1) return false;
    return !encrypt || EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG,
                                           static_cast<int>(kAesGcmTagBytes), tag) == 1;
  }

  EVP_CIPHER_CTX* ctx_ = nullptr;
  bool keyed_ = false;  // ctx_ holds key_'s schedule for direction encrypt_.
  bool encrypt_ = false;
  std::array<uint8_t, kAesGcmKeyBytes> key_{};
};

}  // namespace

struct AesGcm::OpenSslState : EvpGcm {};

// ---- ipsec-mb ----

#ifdef KVTIER_HAVE_IPSEC_MB

namespace {

// The library's function table for this CPU, made once. Its GCM functions take the key schedule
// and context as arguments and only read the table, so one table serves every thread.
struct IpsecMb {
  IMB_MGR* mgr = nullptr;
  IMB_ARCH arch = IMB_ARCH_NONE;
};

const IpsecMb& Library() {
  static const IpsecMb lib = [] {
    IpsecMb l;
    IMB_MGR* mgr = alloc_mb_mgr(0);
    if (mgr == nullptr) return l;
    init_mb_mgr_auto(mgr, &l.arch);
    // AES-NI is the floor: below AVX the library would run its table-based code, slower than
    // OpenSSL's.
    if (imb_get_errno(mgr) != 0 || l.arch < IMB_ARCH_AVX) {
      free_mb_mgr(mgr);
      l.arch = IMB_ARCH_NONE;
      return l;
    }
    l.mgr = mgr;  // Kept for the process's lifetime.
    return l;
  }();
  return lib;
}

}  // namespace

struct AesGcm::IpsecMbState {
  ~IpsecMbState() {
    OPENSSL_cleanse(&schedule, sizeof(schedule));
    OPENSSL_cleanse(&context, sizeof(context));
    OPENSSL_cleanse(key.data(), key.size());
  }
  struct alignas(64) Schedule {  // The library's assembly wants it 64-byte aligned.
    gcm_key_data data;
  };
  Schedule schedule{};
  gcm_context_data context{};
  bool keyed = false;
  std::array<uint8_t, kAesGcmKeyBytes> key{};
  std::vector<uint8_t> aad;  // The associated data made contiguous, as the library takes it.
};

#else

struct AesGcm::IpsecMbState {};

#endif  // KVTIER_HAVE_IPSEC_MB

bool GcmImplAvailable(GcmImpl impl) {
  if (impl == GcmImpl::kOpenSsl) return true;
#ifdef KVTIER_HAVE_IPSEC_MB
  return Library().mgr != nullptr;
#else
  return false;
#endif
}

GcmImpl DefaultGcmImpl() {
  return GcmImplAvailable(GcmImpl::kIpsecMb) ? GcmImpl::kIpsecMb : GcmImpl::kOpenSsl;
}

const char* GcmImplName(GcmImpl impl) {
  if (impl == GcmImpl::kOpenSsl) return "openssl";
#ifdef KVTIER_HAVE_IPSEC_MB
  switch (Library().arch) {
    case IMB_ARCH_AVX512:
      return "ipsec-mb avx512";
    case IMB_ARCH_AVX2:
      return "ipsec-mb avx2";
    case IMB_ARCH_AVX:
      return "ipsec-mb avx";
    default:
      break;
  }
#endif
  return "ipsec-mb (unavailable)";
}

AesGcm::AesGcm(GcmImpl impl) : impl_(impl) {
  KV_CHECK(GcmImplAvailable(impl));
}

AesGcm::~AesGcm() = default;

bool AesGcm::Run(bool encrypt, std::span<const uint8_t, kAesGcmKeyBytes> key,
                 const std::byte* nonce, std::span<const std::span<const std::byte>> aad,
                 std::span<const GcmPart> parts, std::byte* tag) {
#ifdef KVTIER_HAVE_IPSEC_MB
  if (impl_ == GcmImpl::kIpsecMb) {
    IMB_MGR* mgr = Library().mgr;
    if (ipsec_ == nullptr) ipsec_ = std::make_unique<IpsecMbState>();
    IpsecMbState& s = *ipsec_;
    if (!s.keyed || CRYPTO_memcmp(s.key.data(), key.data(), key.size()) != 0) {
      IMB_AES256_GCM_PRE(mgr, key.data(), &s.schedule.data);
      std::memcpy(s.key.data(), key.data(), key.size());
      s.keyed = true;
    }
    s.aad.clear();
    for (const std::span<const std::byte> a : aad) {
      const auto* p = reinterpret_cast<const uint8_t*>(a.data());
      s.aad.insert(s.aad.end(), p, p + a.size());
    }
    const gcm_key_data* k = &s.schedule.data;
    IMB_AES256_GCM_INIT_VAR_IV(mgr, k, &s.context, reinterpret_cast<const uint8_t*>(nonce),
                               kAesGcmNonceBytes, s.aad.data(), s.aad.size());
    for (const GcmPart& p : parts) {
      if (p.n == 0) continue;
      auto* out = reinterpret_cast<uint8_t*>(p.out);
      const auto* in = reinterpret_cast<const uint8_t*>(p.in);
      if (encrypt) {
        IMB_AES256_GCM_ENC_UPDATE(mgr, k, &s.context, out, in, p.n);
      } else {
        IMB_AES256_GCM_DEC_UPDATE(mgr, k, &s.context, out, in, p.n);
      }
    }
    if (encrypt) {
      IMB_AES256_GCM_ENC_FINALIZE(mgr, k, &s.context, reinterpret_cast<uint8_t*>(tag),
                                  kAesGcmTagBytes);
      return true;
    }
    std::array<uint8_t, kAesGcmTagBytes> computed{};
    IMB_AES256_GCM_DEC_FINALIZE(mgr, k, &s.context, computed.data(), computed.size());
    return CRYPTO_memcmp(computed.data(), tag, computed.size()) == 0;
  }
#endif
  if (openssl_ == nullptr) openssl_ = std::make_unique<OpenSslState>();
  return openssl_->Run(encrypt, key, nonce, aad, parts, tag);
}

}  // namespace kvtier
