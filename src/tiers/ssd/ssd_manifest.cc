// Implements docs/ssd_format.md §8; see ssd_manifest.h.
#include "tiers/ssd/ssd_manifest.h"

#include <optional>
#include <random>
#include <utility>

#include "core/assert.h"
#include "core/coding.h"
#include "core/crc32c.h"
#include "tiers/ssd_format.h"
#include "tiers/ssd_record.h"

namespace kvtier::ssd {
namespace {

std::string ManifestPath(const std::string& dir) { return dir + "/" + kManifestName; }

uint32_t MaskedCrc(const std::byte* data, size_t n) { return crc32c::Mask(crc32c::Value(data, n)); }

std::array<uint8_t, 16> RandomCacheId() {
  // random_device reads the kernel's generator (getrandom) on Linux; an id only has to differ
  // from every other cache's, it is no secret.
  std::random_device rd;
  std::array<uint8_t, 16> id{};
  for (size_t i = 0; i < id.size(); i += 4) {
    const uint32_t v = rd();
    for (size_t b = 0; b < 4; ++b) id[i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  return id;
}

// Whether `dir` holds anything named like a segment (good or bad). A missing dir holds none.
Result<bool> HasSegments(Env* env, const std::string& dir) {
  if (!env->FileExists(dir)) return false;
  KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
  for (const std::string& name : names) {
    uint64_t id = 0;
    if (ParseSegmentFileName(name, &id)) return true;
  }
  return false;
}

std::string Describe(const std::string& dir, const Manifest& m) {
  return "dir " + dir + " belongs to cache " + CacheIdHex(m) + " (stripe " +
         std::to_string(m.stripe_index) + " of " + std::to_string(m.stripe_count) + ")";
}

// InvalidArgument naming how manifest `m` of dirs[i] disagrees with `ref`, the manifest of
// dirs[r]; OK when it fits.
Status Mismatch(const std::vector<std::string>& dirs, size_t i, const Manifest& m, size_t r,
                const Manifest& ref) {
  if (m.cache_id != ref.cache_id) {
    return Status::InvalidArgument(Describe(dirs[i], m) + ", not to the cache of dir " + dirs[r] +
                                   " (" + CacheIdHex(ref) + ", stripe " + std::to_string(i) +
                                   " expected)");
  }
  if (m.stripe_count != dirs.size()) {
    return Status::InvalidArgument(Describe(dirs[i], m) + ", but " + std::to_string(dirs.size()) +
                                   " directories were given");
  }
  if (m.stripe_index != i) {
    return Status::InvalidArgument(Describe(dirs[i], m) + ", but was given at position " +
                                   std::to_string(i) + " (the directories are out of order)");
  }
  if (m.segment_bytes != ref.segment_bytes) {
    return Status::InvalidArgument("dir " + dirs[i] + " has segment_bytes " +
                                   std::to_string(m.segment_bytes) + ", dir " + dirs[r] + " has " +
                                   std::to_string(ref.segment_bytes));
  }
  return Status::Ok();
}

// The manifests of `dirs` (nullopt where there is none), checked against each other.
Result<std::vector<std::optional<Manifest>>> ReadAndCheckSet(Env* env,
                                                             const std::vector<std::string>& dirs) {
  std::vector<std::optional<Manifest>> found(dirs.size());
  size_t ref = dirs.size();
  for (size_t i = 0; i < dirs.size(); ++i) {
    Result<Manifest> m = ReadManifest(env, dirs[i]);
    if (!m.ok() && !m.status().IsNotFound()) return m.status();
    if (!m.ok()) continue;
    if (ref == dirs.size()) ref = i;
    KV_RETURN_IF_ERROR(Mismatch(dirs, i, *m, ref, i == ref ? *m : *found[ref]));
    found[i] = *m;
  }
  return found;
}

}  // namespace

std::string CacheIdHex(const std::array<uint8_t, 16>& cache_id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * cache_id.size());
  for (uint8_t b : cache_id) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xF]);
  }
  return out;
}

std::string CacheIdHex(const Manifest& m) { return CacheIdHex(m.cache_id); }

uint32_t ManifestFormatDigest() {
  std::string b;
  PutFixed16(&b, kFormatVersion);
  PutFixed16(&b, 0);
  PutFixed32(&b, kSegmentMagic);
  PutFixed32(&b, kRecordMagic);
  PutFixed32(&b, static_cast<uint32_t>(kSegmentHeaderBytes));
  PutFixed32(&b, static_cast<uint32_t>(kRecordHeaderBytes));
  return crc32c::Value(b);
}

std::string EncodeManifest(const Manifest& m) {
  std::string out;
  out.reserve(kManifestBytes);
  PutFixed32(&out, kManifestMagic);
  PutFixed16(&out, m.format_version);
  PutFixed16(&out, 0);
  out.append(reinterpret_cast<const char*>(m.cache_id.data()), m.cache_id.size());
  PutFixed32(&out, m.stripe_index);
  PutFixed32(&out, m.stripe_count);
  PutFixed64(&out, m.segment_bytes);
  PutFixed32(&out, m.format_digest);
  // Version 1 has no flags; a version 2 file without one (no writer makes it) is kept as read.
  KV_DCHECK(m.format_version == kManifestVersionFlags || m.flags == 0);
  PutFixed32(&out, m.flags);  // Version 1: reserved, 0.
  out.append(kManifestCrcOffset - out.size(), '\0');  // Reserved.
  const auto* p = reinterpret_cast<const std::byte*>(out.data());
  PutFixed32(&out, MaskedCrc(p, kManifestCrcOffset));
  KV_DCHECK(out.size() == kManifestBytes);
#ifndef NDEBUG
  // Pair assertion: what is written decodes to what was meant.
  Result<Manifest> back = DecodeManifest(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(out.data()), out.size()));
  KV_DCHECK(back.ok() && *back == m);
#endif
  return out;
}

Result<Manifest> DecodeManifest(std::span<const std::byte> bytes) {
  if (bytes.size() != kManifestBytes) return Status::Corruption("manifest: not 64 bytes");
  const std::byte* p = bytes.data();
  if (DecodeFixed32(p) != kManifestMagic) return Status::Corruption("manifest: bad magic");
  if (DecodeFixed32(p + kManifestCrcOffset) != MaskedCrc(p, kManifestCrcOffset)) {
    return Status::Corruption("manifest: crc mismatch");
  }
  Manifest m;
  m.format_version = DecodeFixed16(p + 4);
  if (m.format_version != kManifestVersion && m.format_version != kManifestVersionFlags) {
    return Status::Corruption("manifest: unknown version " + std::to_string(m.format_version));
  }
  // Version 1 has no flags: its bytes at 44 are reserved like the rest.
  const size_t reserved_from =
      m.format_version == kManifestVersion ? kManifestFlagsOffset : kManifestFlagsOffset + 4;
  bool reserved_zero = DecodeFixed16(p + 6) == 0;
  for (size_t i = reserved_from; i < kManifestCrcOffset; ++i) reserved_zero &= p[i] == std::byte{0};
  if (!reserved_zero) return Status::Corruption("manifest: reserved field set");
  if (m.format_version == kManifestVersionFlags) {
    m.flags = DecodeFixed32(p + kManifestFlagsOffset);
    if ((m.flags & ~kManifestFlagsKnown) != 0) return Status::Corruption("manifest: unknown flags");
  }
  for (size_t i = 0; i < kCacheIdBytes; ++i) m.cache_id[i] = DecodeFixed8(p + 8 + i);
  m.stripe_index = DecodeFixed32(p + 24);
  m.stripe_count = DecodeFixed32(p + 28);
  m.segment_bytes = DecodeFixed64(p + 32);
  m.format_digest = DecodeFixed32(p + 40);
  if (m.stripe_count == 0 || m.stripe_index >= m.stripe_count) {
    return Status::Corruption("manifest: stripe index out of range");
  }
  if (m.segment_bytes < kSegmentBytesMin || m.segment_bytes > kSegmentBytesMax ||
      m.segment_bytes % kDirectIoAlignment != 0) {
    return Status::Corruption("manifest: bad segment size");
  }
  if (m.format_digest != ManifestFormatDigest()) {
    return Status::Corruption("manifest: written for another record/segment format");
  }
  return m;
}

Result<Manifest> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = ManifestPath(dir);
  if (!env->FileExists(path)) return Status::NotFound(path);
  Result<std::unique_ptr<File>> f =
      env->OpenFile(path, {.mode = OpenMode::kReadOnly,
                           .kind = FileKind::kRegular,
                           .links = Links::kRefuse});
  if (!f.ok() && f.status().IsInvalidArgument()) return Status::Corruption(f.status().message());
  if (!f.ok()) return f.status();
  KV_ASSIGN_OR_RETURN(const uint64_t size, (*f)->Size());
  if (size != kManifestBytes) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, a manifest has 64");
  }
  std::array<std::byte, kManifestBytes> bytes{};
  size_t got = 0;
  KV_RETURN_IF_ERROR((*f)->ReadAt(0, bytes, &got));
  if (got != bytes.size()) return Status::Corruption(path + ": short read");
  Result<Manifest> m = DecodeManifest(bytes);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

Status ReplaceFileDurably(Env* env, const std::string& dir, std::string_view name,
                          std::string_view temp_base, std::string_view bytes, uint32_t file_mode) {
  KV_ASSIGN_OR_RETURN(const std::string tmp, UniqueTempPath(dir + "/" + std::string(temp_base)));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                      env->OpenFile(tmp, {.mode = OpenMode::kCreateExclusive,
                                          .create_mode = file_mode,
                                          .links = Links::kRefuse}));
  Status s =
      f->WriteAt(0, std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  if (s.ok()) s = f->Sync();
  if (s.ok()) s = f->Close();
  if (s.ok()) s = env->RenameFile(tmp, dir + "/" + std::string(name));
  if (!s.ok()) {
    f.reset();
    env->RemoveFile(tmp).IgnoreError();  // Best effort: a leftover is removed at the next open.
    return s;
  }
  return env->SyncDir(dir);
}

Status WriteManifest(Env* env, const std::string& dir, const Manifest& manifest,
                     uint32_t file_mode) {
  return ReplaceFileDurably(env, dir, kManifestName, kManifestTempName, EncodeManifest(manifest),
                            file_mode);
}

Status CheckManifestSet(Env* env, const std::vector<std::string>& dirs) {
  KV_ASSIGN_OR_RETURN(std::vector<std::optional<Manifest>> found, ReadAndCheckSet(env, dirs));
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (found[i].has_value()) continue;
    KV_ASSIGN_OR_RETURN(const bool has_segments, HasSegments(env, dirs[i]));
    if (has_segments) {
      return Status::InvalidArgument("dir " + dirs[i] +
                                     " has segments but no MANIFEST (made before manifests "
                                     "existed; opening the cache writes one)");
    }
  }
  return Status::Ok();
}

Result<std::vector<Manifest>> EnsureManifestSet(Env* env, const std::vector<std::string>& dirs,
                                                uint64_t segment_bytes, uint32_t file_mode,
                                                bool sealed) {
  KV_ASSIGN_OR_RETURN(std::vector<std::optional<Manifest>> found, ReadAndCheckSet(env, dirs));
  std::array<uint8_t, 16> cache_id = RandomCacheId();
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (!found[i].has_value()) continue;
    cache_id = found[i]->cache_id;
    if (found[i]->segment_bytes != segment_bytes) {
      return Status::InvalidArgument("dir " + dirs[i] + " was created with segment_bytes " +
                                     std::to_string(found[i]->segment_bytes) +
                                     ", the options say " + std::to_string(segment_bytes));
    }
    if (found[i]->sealed() && !sealed) {
      return Status::InvalidArgument(
          "dir " + dirs[i] + " holds a sealed cache (its MANIFEST says its records are encrypted " +
          "at rest) and no key is configured: give the cache's keys (ssd_key_file or " +
          "ssd_key_env), or use another directory");
    }
  }
  const uint32_t flags = sealed ? kManifestFlagSealed : 0;
  std::vector<Manifest> out;
  out.reserve(dirs.size());
  for (size_t i = 0; i < dirs.size(); ++i) {
    // A new directory, one whose creation was cut short, or one made before manifests; or (with
    // keys) one not yet marked sealed.
    if (!found[i].has_value() || (sealed && !found[i]->sealed())) {
      const Manifest m{.format_version = Manifest::VersionFor(flags),
                       .cache_id = cache_id,
                       .stripe_index = static_cast<uint32_t>(i),
                       .stripe_count = static_cast<uint32_t>(dirs.size()),
                       .segment_bytes = segment_bytes,
                       .format_digest = ManifestFormatDigest(),
                       .flags = flags};
      KV_RETURN_IF_ERROR(WriteManifest(env, dirs[i], m, file_mode));
      found[i] = m;
    }
    out.push_back(*found[i]);
  }
  return out;
}

}  // namespace kvtier::ssd
