// See remote_crypto.h. AES-256-GCM runs through aes_gcm.h (libipsec-mb or OpenSSL); OpenSSL
// does HMAC-SHA256 and the random nonces. Nothing here is hand-written cryptography, only the
// framing around it.
#include "tiers/remote_crypto.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "core/assert.h"
#include "core/coding.h"
#include "core/sha256.h"
#include "tiers/ssd_format.h"

namespace kvtier {
namespace {

using Mac = std::array<uint8_t, 32>;

Mac Hmac(std::span<const uint8_t> key, std::span<const std::span<const uint8_t>> parts) {
  // One contiguous message: the parts are small (names, ids).
  std::vector<uint8_t> msg;
  for (const auto& p : parts) msg.insert(msg.end(), p.begin(), p.end());
  Mac out{};
  unsigned int len = 0;
  KV_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(),
                out.data(), &len) != nullptr);
  KV_CHECK(len == out.size());
  return out;
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Status ParseLine(std::string_view line, size_t number, RemoteKey* key) {
  const std::string where = "key line " + std::to_string(number);
  const size_t space = line.find_first_of(" \t");
  if (space == std::string_view::npos) {
    return Status::InvalidArgument(where + ": expected '<id> <64 hex digits>'");
  }
  const std::string_view id_text = line.substr(0, space);
  const std::string_view hex = Trim(line.substr(space + 1));
  uint64_t id = 0;
  if (id_text.empty() || id_text.size() > 10) {
    return Status::InvalidArgument(where + ": the key id must be a decimal number");
  }
  for (const char c : id_text) {
    if (c < '0' || c > '9') {
      return Status::InvalidArgument(where + ": the key id must be a decimal number");
    }
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  if (id == 0 || id > UINT32_MAX) {
    return Status::InvalidArgument(where + ": the key id must be in [1, 4294967295]");
  }
  Hash256 bytes;
  if (hex.size() != 2 * kRemoteKeyBytes || !FromHex(hex, &bytes)) {
    return Status::InvalidArgument(where + ": the key must be 64 hex digits (256 bits)");
  }
  key->id = static_cast<uint32_t>(id);
  std::copy(bytes.begin(), bytes.end(), key->bytes.begin());
  return Status::Ok();
}

void EncodeSealedHeader(uint32_t key_id, std::span<const uint8_t, 12> nonce, std::byte* out) {
  EncodeFixed32(out, kSealedMagic);
  EncodeFixed16(out + 4, kSealedVersion);
  out[6] = std::byte{kSealedAesGcm};
  out[7] = std::byte{0};
  EncodeFixed32(out + 8, key_id);
  std::memcpy(out + 12, nonce.data(), nonce.size());
}

}  // namespace

RemoteCipher::RemoteCipher(GcmImpl impl) : impl_(impl) { KV_CHECK(GcmImplAvailable(impl)); }
RemoteCipher::~RemoteCipher() = default;

struct RemoteCipherAccess {
  static AesGcm* Context(RemoteCipher& c) {
    if (c.gcm_ == nullptr) c.gcm_ = std::make_unique<AesGcm>(c.impl_);
    return c.gcm_.get();
  }
};

namespace {

// GCM through `cipher`'s context, or through this thread's when there is none (the SSD tier's
// records: one key schedule per thread and key instead of one per record).
bool Gcm(RemoteCipher* cipher, bool encrypt, const RemoteKey& key, const std::byte* nonce,
         std::span<const std::span<const std::byte>> aad, std::span<const GcmPart> parts,
         std::byte* tag) {
  thread_local RemoteCipher this_thread;
  AesGcm* gcm = RemoteCipherAccess::Context(cipher != nullptr ? *cipher : this_thread);
  return gcm->Run(encrypt, key.bytes, nonce, aad, parts, tag);
}

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace

Result<RemoteKeyring> RemoteKeyring::Parse(std::string_view text) {
  if (text.size() > kRemoteKeyFileBytesMax) {
    return Status::InvalidArgument("remote keys: more than " +
                                   std::to_string(kRemoteKeyFileBytesMax) + " bytes");
  }
  RemoteKeyring ring;
  size_t number = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++number;
    if (line.empty() || line.front() == '#') continue;
    if (ring.keys_.size() == kRemoteKeysMax) {
      return Status::InvalidArgument("remote keys: more than " + std::to_string(kRemoteKeysMax));
    }
    RemoteKey key;
    KV_RETURN_IF_ERROR(ParseLine(line, number, &key));
    if (ring.Find(key.id) != nullptr) {
      return Status::InvalidArgument("key line " + std::to_string(number) + ": key id " +
                                     std::to_string(key.id) + " is listed twice");
    }
    ring.keys_.push_back(key);
    std::sort(ring.keys_.begin(), ring.keys_.end(),
              [](const RemoteKey& a, const RemoteKey& b) { return a.id < b.id; });
  }
  if (ring.keys_.empty()) return Status::InvalidArgument("keys: no key given");
  const std::span<const uint8_t> label = Bytes("kvtier remote key names v1");
  ring.name_key_ = Hmac(ring.keys_.front().bytes, std::array{label});
  return ring;
}

Result<RemoteKeyring> RemoteKeyring::LoadFile(const std::string& path, std::string_view what) {
  const std::string named = std::string(what) + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Status::FromErrno(errno, named);
  struct stat st {};
  std::string text;
  Status s;
  if (::fstat(fd, &st) != 0) {
    s = Status::FromErrno(errno, named);
  } else if (!S_ISREG(st.st_mode)) {
    s = Status::InvalidArgument(named + " is not a regular file");
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    s = Status::InvalidArgument(named + " has mode " + mode +
                                ": other users may read or change it; chmod 600 it");
  } else if (static_cast<uint64_t>(st.st_size) > kRemoteKeyFileBytesMax) {
    s = Status::InvalidArgument(named + " is larger than " +
                                std::to_string(kRemoteKeyFileBytesMax) + " bytes");
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
  }
  ::close(fd);
  KV_RETURN_IF_ERROR(s);
  Result<RemoteKeyring> ring = Parse(text);
  if (!ring.ok()) return ring.status().WithContext(named);
  return ring;
}

Result<std::string> RemoteKeyring::GenerateText(uint32_t id) {
  if (id == 0) return Status::InvalidArgument("remote key id must be at least 1");
  std::array<uint8_t, kRemoteKeyBytes> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return Status::IoError("remote key: the random generator failed");
  }
  return std::to_string(id) + " " + Hex(bytes) + "\n";
}

const RemoteKey& RemoteKeyring::write_key() const {
  KV_CHECK(!keys_.empty());
  return keys_.back();
}

const RemoteKey* RemoteKeyring::Find(uint32_t id) const {
  for (const RemoteKey& k : keys_) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

std::string SealedKeyName(std::string_view prefix, const RemoteKeyring& keyring,
                          const BlockKey& key) {
  std::array<uint8_t, 4> layer{};
  EncodeFixed32(reinterpret_cast<std::byte*>(layer.data()), key.layer);
  const std::span<const uint8_t> chunk(key.chunk_hash.data(), key.chunk_hash.size());
  const Mac tag = Hmac(keyring.name_key(), std::array{Bytes("chunk"), chunk});
  const Mac block =
      Hmac(keyring.name_key(), std::array{Bytes("block"), chunk, std::span<const uint8_t>(layer)});
  std::string name;
  name.reserve(prefix.size() + 70);
  name.append(prefix);
  name.append(":{");
  name.append(Hex(std::span(tag).first(16)));
  name.append("}:");
  name.append(Hex(std::span(block).first(16)));
  return name;
}

Status SealRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> plain, std::vector<std::byte>* out) {
  return SealRemoteValue(keyring, key_name, plain, {}, out);
}

Status SealRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> head, std::span<const std::byte> body,
                       std::vector<std::byte>* out, RemoteCipher* cipher) {
  KV_CHECK(!keyring.empty());
  const size_t plain_bytes = head.size() + body.size();
  KV_CHECK(plain_bytes <= INT32_MAX - kSealedOverheadBytes);
  const RemoteKey& key = keyring.write_key();
  std::array<uint8_t, 12> nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return Status::IoError("remote value: the random generator failed");
  }
  out->resize(kSealedOverheadBytes + plain_bytes);
  std::byte* header = out->data();
  EncodeSealedHeader(key.id, nonce, header);
  std::byte* dst = header + kSealedHeaderBytes;
  // GCM is a stream mode: header and body are encrypted one after the other into one ciphertext.
  const GcmPart parts[] = {{head.data(), dst, head.size()},
                           {body.data(), dst + head.size(), body.size()}};
  const std::span<const std::byte> aad[] = {{header, kSealedHeaderBytes}, AsBytes(key_name)};
  const bool ok = Gcm(cipher, true, key, header + 12, aad, parts, dst + plain_bytes);
  if (!ok) return Status::IoError("remote value: encryption failed");
  return Status::Ok();
}

Status OpenRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> sealed, std::vector<std::byte>* plain,
                       uint32_t* key_id) {
  plain->resize(sealed.size() >= kSealedOverheadBytes ? sealed.size() - kSealedOverheadBytes : 0);
  size_t body_bytes = 0;
  const Status s = OpenRemoteValueInto(keyring, key_name, sealed, {}, *plain, &body_bytes, key_id);
  if (!s.ok()) plain->clear();
  return s;
}

namespace {

// The checks of a sealed value that precede its GCM pass: `seal` is its first
// kSealedHeaderBytes bytes, `sealed_bytes` its whole length. Sets *key_id, *key and the
// ciphertext's length *n.
Status CheckSealedHeader(const RemoteKeyring& keyring, std::span<const std::byte> seal,
                         size_t sealed_bytes, uint32_t* key_id, const RemoteKey** key, size_t* n) {
  if (sealed_bytes < kSealedOverheadBytes || sealed_bytes > INT32_MAX) {
    return Status::Corruption("sealed remote value: too short");
  }
  KV_CHECK(seal.size() >= kSealedHeaderBytes);
  if (DecodeFixed32(seal.data()) != kSealedMagic) {
    return Status::Corruption("sealed remote value: bad magic (a plaintext value?)");
  }
  if (DecodeFixed16(seal.data() + 4) != kSealedVersion || seal[6] != std::byte{kSealedAesGcm} ||
      seal[7] != std::byte{0}) {
    return Status::Corruption("sealed remote value: unknown version or algorithm");
  }
  *key_id = DecodeFixed32(seal.data() + 8);
  *key = keyring.Find(*key_id);
  if (*key == nullptr) {
    return Status::NotFound("sealed remote value: key id " + std::to_string(*key_id) +
                            " is not in the keyring");
  }
  *n = sealed_bytes - kSealedOverheadBytes;
  return Status::Ok();
}

Status AuthenticationFailed(uint32_t key_id) {
  return Status::Corruption("sealed remote value: authentication failed (key id " +
                            std::to_string(key_id) + ")");
}

}  // namespace

Status OpenRemoteValueInto(const RemoteKeyring& keyring, std::string_view key_name,
                           std::span<const std::byte> sealed, std::span<std::byte> head,
                           std::span<std::byte> body, size_t* body_bytes, uint32_t* key_id,
                           RemoteCipher* cipher) {
  *key_id = 0;
  *body_bytes = 0;
  const RemoteKey* key = nullptr;
  size_t n = 0;
  KV_RETURN_IF_ERROR(CheckSealedHeader(keyring,
                                       sealed.first(std::min(sealed.size(), kSealedHeaderBytes)),
                                       sealed.size(), key_id, &key, &n));
  if (n < head.size()) return Status::Corruption("sealed remote value: shorter than a header");
  const size_t body_n = n - head.size();
  if (body_n > body.size()) {
    return Status::InvalidArgument("sealed remote value: destination smaller than the value");
  }
  std::array<std::byte, kSealedTagBytes> tag{};
  std::memcpy(tag.data(), sealed.data() + kSealedHeaderBytes + n, tag.size());
  const std::byte* src = sealed.data() + kSealedHeaderBytes;
  const GcmPart parts[] = {{src, head.data(), head.size()},
                           {src + head.size(), body.data(), body_n}};
  const std::span<const std::byte> aad[] = {sealed.first(kSealedHeaderBytes), AsBytes(key_name)};
  const bool ok = Gcm(cipher, false, *key, sealed.data() + 12, aad, parts, tag.data());
  if (!ok) {
    // Unauthenticated bytes never stay in the caller's buffers.
    if (!head.empty()) std::memset(head.data(), 0, head.size());
    if (body_n != 0) std::memset(body.data(), 0, body_n);
    return AuthenticationFailed(*key_id);
  }
  *body_bytes = body_n;
  return Status::Ok();
}

Status OpenRemoteValueInPlace(const RemoteKeyring& keyring, std::string_view key_name,
                              std::span<const std::byte> front, std::span<std::byte> head,
                              std::span<std::byte> body,
                              std::span<const std::byte, kSealedTagBytes> tag, uint32_t* key_id,
                              RemoteCipher* cipher) {
  *key_id = 0;
  KV_CHECK(front.size() == kSealedHeaderBytes + head.size());
  const RemoteKey* key = nullptr;
  size_t n = 0;
  KV_RETURN_IF_ERROR(CheckSealedHeader(keyring, front, front.size() + body.size() + kSealedTagBytes,
                                       key_id, &key, &n));
  KV_CHECK(n == head.size() + body.size());
  std::array<std::byte, kSealedTagBytes> expected{};  // Run takes a writable tag.
  std::memcpy(expected.data(), tag.data(), expected.size());
  const GcmPart parts[] = {{front.data() + kSealedHeaderBytes, head.data(), head.size()},
                           {body.data(), body.data(), body.size()}};  // The body in place.
  const std::span<const std::byte> aad[] = {front.first(kSealedHeaderBytes), AsBytes(key_name)};
  const bool ok = Gcm(cipher, false, *key, front.data() + 12, aad, parts, expected.data());
  if (!ok) {
    // Neither the ciphertext nor anything decrypted stays in the caller's buffers.
    if (!head.empty()) std::memset(head.data(), 0, head.size());
    if (!body.empty()) std::memset(body.data(), 0, body.size());
    return AuthenticationFailed(*key_id);
  }
  return Status::Ok();
}

Status SealRecordPayload(const RemoteKeyring& keyring, std::span<const std::byte> aad,
                         std::span<const std::byte> plain, std::span<std::byte> out) {
  KV_CHECK(!keyring.empty());
  KV_CHECK(out.size() == plain.size() + ssd::kSealedRecordOverheadBytes);
  KV_CHECK(plain.size() <= INT32_MAX);
  const RemoteKey& key = keyring.write_key();
  std::byte* tag = out.data() + plain.size();
  std::byte* trailer = tag + kSealedTagBytes;  // key id, then the nonce.
  EncodeFixed32(trailer, key.id);
  std::byte* nonce = trailer + 4;
  if (RAND_bytes(reinterpret_cast<uint8_t*>(nonce), 12) != 1) {
    return Status::IoError("ssd record: the random generator failed");
  }
  const GcmPart parts[] = {{plain.data(), out.data(), plain.size()}};
  const std::span<const std::byte> aads[] = {aad};
  const bool ok = Gcm(nullptr, true, key, nonce, aads, parts, tag);
  if (!ok) return Status::IoError("ssd record: encryption failed");
  return Status::Ok();
}

Status OpenRecordPayload(const RemoteKeyring& keyring, std::span<const std::byte> aad,
                         std::span<std::byte> region, size_t* plain_bytes, uint32_t* key_id) {
  constexpr size_t kOverhead = ssd::kSealedRecordOverheadBytes;
  static_assert(kOverhead == kSealedTagBytes + 4 + 12);  // Tag, key id, nonce.
  *plain_bytes = 0;
  *key_id = 0;
  if (region.size() < kOverhead || region.size() > INT32_MAX) {
    return Status::Corruption("sealed ssd record: shorter than its seal");
  }
  const size_t n = region.size() - kOverhead;
  std::byte* tag = region.data() + n;
  const std::byte* trailer = tag + kSealedTagBytes;
  *key_id = DecodeFixed32(trailer);
  const RemoteKey* key = keyring.Find(*key_id);
  if (key == nullptr) {
    return Status::NotFound("sealed ssd record: key id " + std::to_string(*key_id) +
                            " is not in the keyring");
  }
  const GcmPart parts[] = {{region.data(), region.data(), n}};  // In place.
  const std::span<const std::byte> aads[] = {aad};
  const bool ok = Gcm(nullptr, false, *key, trailer + 4, aads, parts, tag);
  if (!ok) {
    std::memset(region.data(), 0, region.size());  // Nothing unauthenticated stays readable.
    return Status::Corruption("sealed ssd record: authentication failed (key id " +
                              std::to_string(*key_id) + ")");
  }
  *plain_bytes = n;
  return Status::Ok();
}

Result<std::string> DeriveTenantSalt(std::string_view tenant_id,
                                     std::span<const std::byte> secret) {
  if (tenant_id.empty()) return Status::InvalidArgument("tenant salt: empty tenant id");
  if (secret.size() < 16) {
    return Status::InvalidArgument("tenant salt: the secret must be at least 16 bytes");
  }
  const std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()),
                                     secret.size());
  const std::array<uint8_t, 1> zero{0};
  const Mac mac = Hmac(key, std::array{Bytes("kvtier tenant salt v1"),
                                       std::span<const uint8_t>(zero), Bytes(tenant_id)});
  return Hex(mac);
}

}  // namespace kvtier
