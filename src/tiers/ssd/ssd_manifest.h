// The SSD tier's MANIFEST: one small file per cache directory saying which cache it belongs to
// and where in the set it stands (docs/ssd_format.md §8 specifies every byte).
//
// Why: a set of directories is one cache only in the order and count it was created with; without
// a record of that, opening directories from different caches, or the right ones in another order,
// would silently mix or misplace blocks. The manifest turns that into an InvalidArgument naming the
// mismatch, and its cache id binds the checkpoint to the set (checkpoint version 3).
//
// Thread safety: pure functions and a value type; the file functions may run concurrently on
// different directories. Ownership: nothing is retained after a call.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "env/env.h"
#include "kvtier/result.h"
#include "tiers/ssd_format.h"

namespace kvtier::ssd {

inline constexpr const char* kManifestName = "MANIFEST";

struct Manifest {
  uint16_t format_version = 0;
  std::array<uint8_t, 16> cache_id{};  // Random; the same in every directory of one cache.
  uint32_t stripe_index = 0;           // This directory's position in the set.
  uint32_t stripe_count = 0;           // Directories in the set.
  uint64_t segment_bytes = 0;
  // CRC32C of the format constants a reader must share (ManifestFormatDigest()).
  uint32_t format_digest = 0;
  uint32_t flags = 0;  // kManifestFlag*; version 2 only (0 in version 1).

  bool sealed() const { return (flags & kManifestFlagSealed) != 0; }
  // The version a manifest with these flags is written as.
  static uint16_t VersionFor(uint32_t flags) {
    return flags == 0 ? kManifestVersion : kManifestVersionFlags;
  }
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

// 32 lowercase hex digits.
std::string CacheIdHex(const Manifest&);
std::string CacheIdHex(const std::array<uint8_t, 16>& cache_id);

// The digest this build writes and expects (docs/ssd_format.md §8).
uint32_t ManifestFormatDigest();

// The whole file, CRC included, as `format_version` says (writers use VersionFor(flags); a
// version 1 manifest has no flags).
std::string EncodeManifest(const Manifest& manifest);
// Checks size, magic, CRC, version (1 or 2), reserved fields and flags, stripe_index <
// stripe_count, the segment size and the format digest. Corruption naming the first problem.
Result<Manifest> DecodeManifest(std::span<const std::byte> bytes);

// NotFound when the dir has no MANIFEST; Corruption naming the problem when it is damaged.
Result<Manifest> ReadManifest(Env* env, const std::string& dir);
// Writes `bytes` to <dir>/<name> the way every metadata file of a cache is written: into a fresh
// temporary "<dir>/<temp_base>.<16 random hex digits>" created O_EXCL|O_NOFOLLOW with `file_mode`
// (so no planted link or leftover is followed or truncated), fdatasync, rename over <dir>/<name>,
// fsync of the directory. The temporary is removed when a step before the rename fails.
Status ReplaceFileDurably(Env* env, const std::string& dir, std::string_view name,
                          std::string_view temp_base, std::string_view bytes, uint32_t file_mode);

// Writes <dir>/MANIFEST through a temporary and a rename, syncing both the file and the directory.
Status WriteManifest(Env* env, const std::string& dir, const Manifest& manifest,
                     uint32_t file_mode = 0600);

// OK when the dirs (in this order) form one cache: every manifest present and from one cache id,
// stripe i at position i, stripe_count == dirs.size(); dirs with no manifest and no segments are
// allowed (empty). InvalidArgument naming the first mismatch otherwise.
Status CheckManifestSet(Env* env, const std::vector<std::string>& dirs);

// What SsdTier::Open does: checks the set as CheckManifestSet does and also that every manifest
// has `segment_bytes`, then writes a manifest into every directory that has none (a new cache, or
// one made before manifests existed) with the cache id of the others or a fresh random one.
// `sealed`: the opener seals records (it has keys). A set in which any manifest says sealed is
// refused without keys (InvalidArgument naming the directory, before anything is written); with
// keys, every manifest of the set is made to say sealed (a cache once opened with keys stays
// sealed). Returns the set's manifests in directory order.
Result<std::vector<Manifest>> EnsureManifestSet(Env* env, const std::vector<std::string>& dirs,
                                                uint64_t segment_bytes, uint32_t file_mode,
                                                bool sealed = false);

}  // namespace kvtier::ssd
