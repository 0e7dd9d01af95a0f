// Remote-tier secrecy and authenticity (docs/security.md, docs/remote_tier.md "Encrypted
// values"): what a shared Redis holds must be useless to anyone without the deployment key, and
// nothing it returns may be used unless a holder of that key wrote it for that very key name.
//
// - RemoteKeyring: the deployment keys (256-bit), each with a key id. The highest id encrypts new
//   values; every listed key decrypts, so keys rotate by adding a higher id, waiting for old
//   values to expire, then dropping the old one. Key names are derived from the lowest id (see
//   NameKey), so adding a key keeps every name; dropping the lowest one changes them (the cache
//   starts cold, it is never wrong).
// - Sealed values: AES-256-GCM (aes_gcm.h: libipsec-mb's VAES code, else OpenSSL) of the plain
//   remote value, with a fresh random 96-bit nonce per value and the sealed header plus the
//   Redis key name as associated data, so a value moved to another key, or forged by anyone
//   without the key (CRCs are no proof), fails authentication and is a miss.
// - Key names: a keyed hash (HMAC-SHA256 under NameKey) of the chunk hash and the layer, so
//   listing the store reveals neither prefixes nor which tenants share them.
// - DeriveTenantSalt: a salt from a tenant id and a secret, for deployments that want tenant
//   separation without distributing one random salt per tenant.
//
// Thread safety: a RemoteKeyring is immutable after Parse (safe to share); the functions are
// pure apart from the RemoteCipher they may be given, which is one thread's at a time.
// Ownership: value type; keys are held in memory only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_key.h"
#include "kvtier/result.h"
#include "tiers/aes_gcm.h"

namespace kvtier {

inline constexpr size_t kRemoteKeyBytes = 32;  // AES-256 and HMAC-SHA256 keys.
inline constexpr size_t kRemoteKeysMax = 16;   // Keys one keyring holds.
inline constexpr size_t kRemoteKeyFileBytesMax = 64 * 1024;

// Sealed value layout (little-endian; docs/remote_tier.md):
//   0  4  magic      u32 = 0x5653564B ("KVSV")
//   4  2  version    u16 = 1
//   6  1  algorithm  u8  = 1 (AES-256-GCM)
//   7  1  reserved   u8  = 0
//   8  4  key_id     u32
//   12 12 nonce
//   24 n  ciphertext of the plain remote value (n = its length)
//   24+n 16 GCM tag over ciphertext, with AAD = bytes [0, 24) + the key name
inline constexpr uint32_t kSealedMagic = 0x5653564B;
inline constexpr uint16_t kSealedVersion = 1;
inline constexpr uint8_t kSealedAesGcm = 1;
inline constexpr size_t kSealedHeaderBytes = 24;
inline constexpr size_t kSealedTagBytes = 16;
inline constexpr size_t kSealedOverheadBytes = kSealedHeaderBytes + kSealedTagBytes;

struct RemoteKey {
  uint32_t id = 0;
  std::array<uint8_t, kRemoteKeyBytes> bytes{};
};

class RemoteKeyring {
 public:
  RemoteKeyring() = default;

  // Text: one key per line, "<id> <64 hex digits>" (id a decimal in [1, 2^32 - 1]); blank lines
  // and lines starting with '#' are ignored. At least one key, at most kRemoteKeysMax, ids
  // distinct. InvalidArgument naming the line otherwise (the key bytes are never echoed).
  static Result<RemoteKeyring> Parse(std::string_view text);
  // Reads and parses a key file, refusing one that other users could read or write (any of the
  // group/other permission bits set, 0600 or stricter required) or that is not a regular file.
  // Errors read "<what> <path> ...": `what` names the option that gave the path
  // ("--ssd-key-file"), "key file" where none did.
  static Result<RemoteKeyring> LoadFile(const std::string& path,
                                        std::string_view what = "key file");
  // One freshly generated key with id `id`, in Parse's text form (for `kvtier` and tests).
  static Result<std::string> GenerateText(uint32_t id);

  bool empty() const { return keys_.empty(); }
  const RemoteKey& write_key() const;        // The highest id. Requires !empty().
  const RemoteKey* Find(uint32_t id) const;  // nullptr when not listed.
  const std::vector<RemoteKey>& keys() const { return keys_; }
  // HMAC key for key names: HMAC-SHA256(lowest id key, "kvtier remote key names v1").
  const std::array<uint8_t, kRemoteKeyBytes>& name_key() const { return name_key_; }

 private:
  std::vector<RemoteKey> keys_;  // Sorted by id.
  std::array<uint8_t, kRemoteKeyBytes> name_key_{};
};

// An AES-256-GCM context kept across values: sealing or opening many values through one costs one
// context and one key schedule per key instead of a context and a key schedule per value (a few
// microseconds each, which is most of the cost of a small value). The functions below take one
// optionally; without it they use a fresh context per call.
// Thread safety: none; one thread uses a RemoteCipher at a time (give each worker its own).
// Ownership: owns its context and the schedule of the last key it was keyed with (both wiped
// when it is destroyed).
class RemoteCipher {
 public:
  // Allocates nothing until first used. `impl` must be available (GcmImplAvailable).
  explicit RemoteCipher(GcmImpl impl = DefaultGcmImpl());
  ~RemoteCipher();
  RemoteCipher(const RemoteCipher&) = delete;
  RemoteCipher& operator=(const RemoteCipher&) = delete;

 private:
  friend struct RemoteCipherAccess;  // remote_crypto.cc: makes the context on first use.
  GcmImpl impl_;
  std::unique_ptr<AesGcm> gcm_;  // Its key schedule, reused while the key stays the same.
};

// "<prefix>:{<32 hex>}:<32 hex>": the first part is HMAC(name_key, "chunk" + chunk_hash) cut to
// 16 bytes (the Redis Cluster hash tag, so one chunk's layers share a slot), the second
// HMAC(name_key, "block" + chunk_hash + layer) cut to 16 bytes.
std::string SealedKeyName(std::string_view prefix, const RemoteKeyring& keyring,
                          const BlockKey& key);

// Seals `plain` for `key_name` with the keyring's write key into *out (resized).
Status SealRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> plain, std::vector<std::byte>* out);
// The same for a plaintext given in two parts (a record header and its payload), so that the
// payload is encrypted straight from the caller's buffer; through `cipher` when one is given.
Status SealRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> head, std::span<const std::byte> body,
                       std::vector<std::byte>* out, RemoteCipher* cipher = nullptr);

// Opens a sealed value read from `key_name`. Corruption when it is malformed or fails
// authentication; NotFound (with *key_id set) when its key id is not in the keyring. *plain is
// resized to the plaintext and must not be used unless OK.
Status OpenRemoteValue(const RemoteKeyring& keyring, std::string_view key_name,
                       std::span<const std::byte> sealed, std::vector<std::byte>* plain,
                       uint32_t* key_id);

// Opens a sealed value whose plaintext is head.size() bytes of header and then a body, straight
// into the caller's buffers (no copy of the body through a temporary): *body_bytes is the body's
// length. InvalidArgument when the plaintext is shorter than `head` or its body longer than
// `body`; otherwise as OpenRemoteValue. On any failure nothing decrypted is left in the buffers.
// Through `cipher` when one is given.
Status OpenRemoteValueInto(const RemoteKeyring& keyring, std::string_view key_name,
                           std::span<const std::byte> sealed, std::span<std::byte> head,
                           std::span<std::byte> body, size_t* body_bytes, uint32_t* key_id,
                           RemoteCipher* cipher = nullptr);

// The same for a sealed value received in three parts, its body opened in place: `front` holds
// its seal header and the first head.size() bytes of ciphertext (decrypted into `head`), `body`
// the rest of the ciphertext (decrypted where it is), `tag` its GCM tag. Corruption when it is
// malformed or fails authentication (head and body are then wiped: neither the ciphertext nor
// anything decrypted stays), NotFound (with *key_id set) when its key id is not in the keyring.
Status OpenRemoteValueInPlace(const RemoteKeyring& keyring, std::string_view key_name,
                              std::span<const std::byte> front, std::span<std::byte> head,
                              std::span<std::byte> body,
                              std::span<const std::byte, kSealedTagBytes> tag, uint32_t* key_id,
                              RemoteCipher* cipher = nullptr);

// SSD records at rest (docs/ssd_format.md §3, "Sealed records"): seals `plain` with the
// keyring's write key into `out` (plain.size() + 32 bytes: ciphertext, 16-byte tag, key id u32,
// 12-byte nonce), binding it to `aad`.
Status SealRecordPayload(const RemoteKeyring& keyring, std::span<const std::byte> aad,
                         std::span<const std::byte> plain, std::span<std::byte> out);
// Opens such a region in place: on success its first *plain_bytes bytes are the plaintext.
// Corruption when authentication fails (the region is then wiped), NotFound (with *key_id set)
// when its key id is not in the keyring.
Status OpenRecordPayload(const RemoteKeyring& keyring, std::span<const std::byte> aad,
                         std::span<std::byte> region, size_t* plain_bytes, uint32_t* key_id);

// A tenant salt: 64 hex digits of HMAC-SHA256(secret, "kvtier tenant salt v1" + 0 + tenant_id).
// The salt separates tenants only while the secret stays secret (docs/security.md).
// InvalidArgument when the secret is shorter than 16 bytes or the tenant id is empty.
Result<std::string> DeriveTenantSalt(std::string_view tenant_id, std::span<const std::byte> secret);

}  // namespace kvtier
