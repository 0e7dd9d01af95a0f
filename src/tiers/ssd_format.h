// Constants of the SSD tier's on-disk format, specified in docs/ssd_format.md (records and
// segments at version 1, the checkpoint at version 2). The document is the source of truth:
// change it first, then these values, and only ever append enum values or give meaning to
// reserved fields.
//
// Thread safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/limits.h"

namespace kvtier::ssd {

inline constexpr uint16_t kFormatVersion = 1;

// Segment header block (docs/ssd_format.md §2).
inline constexpr uint32_t kSegmentMagic = 0x4753564Bu;  // "KVSG" in file order.
inline constexpr size_t kSegmentHeaderBytes = 4096;     // The whole first block.
inline constexpr size_t kSegmentHeaderCrcOffset = 32;   // CRC covers [0, 32).
inline constexpr size_t kSegmentHeaderEncodedBytes = 36;

// Record header (docs/ssd_format.md §3).
inline constexpr uint32_t kRecordMagic = 0x4352564Bu;  // "KVRC".
inline constexpr size_t kRecordHeaderBytes = 128;
inline constexpr size_t kRecordHeaderCrcOffset = 124;  // CRC covers [0, 124).
// Where the payload starts in a record, and so in a caller's read buffer.
inline constexpr size_t kRecordPayloadOffset = kRecordHeaderBytes;
inline constexpr uint8_t kRecordFlagTombstone = 0x01;
// The payload is sealed (AES-256-GCM): ciphertext, then a 16-byte tag, the key id (u32) and the
// 12-byte nonce; payload_bytes counts all of it (docs/ssd_format.md §3, "Sealed records").
inline constexpr uint8_t kRecordFlagSealed = 0x02;
// Set with kRecordFlagSealed: the seal's associated data includes expiry_wall_us (label
// "kvtier-ssd-rec-2"), so an expiry changed without the key fails authentication. Records sealed
// before it existed have bit 1 alone (label "kvtier-ssd-rec-1", expiry not authenticated).
inline constexpr uint8_t kRecordFlagSealedExpiry = 0x04;
inline constexpr uint8_t kRecordFlagsKnown =
    kRecordFlagTombstone | kRecordFlagSealed | kRecordFlagSealedExpiry;
inline constexpr size_t kSealedRecordOverheadBytes = 32;
// Associated data of a sealed record: a label, the chunk hash, the layer, the layout digest, the
// codec id and raw_bytes (the record's identity; not its place, so reclaim can move it as is),
// then with kRecordFlagSealedExpiry the expiry (reclaim keeps it).
inline constexpr size_t kSealedRecordAadBytesV1 = 16 + 32 + 4 + 32 + 1 + 4;
inline constexpr size_t kSealedRecordAadBytes = kSealedRecordAadBytesV1 + 8;

// Checkpoint (docs/ssd_format.md §4).
inline constexpr uint32_t kCheckpointMagic = 0x4B43564Bu;  // "KVCK".
inline constexpr size_t kCheckpointHeaderBytes = 64;
inline constexpr size_t kCheckpointSegmentEntryBytes = 24;
inline constexpr size_t kCheckpointBlockEntryBytes = 80;
inline constexpr size_t kCheckpointTrailerBytes = 4;
inline constexpr uint8_t kCheckpointFlagReferenced = 0x01;
// The checkpoint has its own version (records and segment headers stay at kFormatVersion).
// Version 2 added the live tombstones (§4), version 3 the cache id after the header (binding the
// checkpoint to the MANIFEST of its directory set); versions 1 and 2 are still read.
inline constexpr uint16_t kCheckpointVersion = 3;
inline constexpr uint16_t kCheckpointVersionMin = 1;
inline constexpr uint16_t kCheckpointVersionCacheId = 3;  // The first with a cache id.
inline constexpr size_t kCheckpointCacheIdBytes = 16;     // Right after the 64-byte header.
inline constexpr size_t kCheckpointTombstoneEntryBytes = 56;

// Manifest (docs/ssd_format.md §8): one 64-byte file per directory. Version 2 gave the first 4
// reserved bytes (offset 44) a meaning: flags, bit 0 = the cache is sealed. A manifest without
// flags is written as version 1 (so a build that knows only version 1 still opens the cache), one
// with flags as version 2 (so such a build refuses a sealed cache instead of writing plain
// records into it); both versions are read.
inline constexpr uint32_t kManifestMagic = 0x464D564Bu;  // "KVMF".
inline constexpr uint16_t kManifestVersion = 1;       // Written when flags are 0.
inline constexpr uint16_t kManifestVersionFlags = 2;  // Written when a flag is set.
inline constexpr uint32_t kManifestFlagSealed = 0x1;  // Records are sealed (SsdTierOptions::keyring)
inline constexpr uint32_t kManifestFlagsKnown = kManifestFlagSealed;
inline constexpr size_t kManifestFlagsOffset = 44;
inline constexpr size_t kManifestBytes = 64;
inline constexpr size_t kManifestCrcOffset = 60;  // CRC covers [0, 60).
inline constexpr size_t kCacheIdBytes = 16;

// Segment sizes (docs/ssd_format.md §2).
inline constexpr uint64_t kSegmentBytesDefault = 64 * kMiB;
inline constexpr uint64_t kSegmentBytesMin = 1 * kMiB;
inline constexpr uint64_t kSegmentBytesMax = 1 * kGiB;  // Offsets fit in u32.

// Segment ids (docs/ssd_format.md §1): from 1 to kSegmentIdMax. A file named like a segment with
// an id outside that range is a bad segment (never read, never counted into the next id), and the
// tier never gives out an id above it, so the counter cannot wrap: at one segment per microsecond
// the range lasts 292,000 years.
inline constexpr uint64_t kSegmentIdMin = 1;
inline constexpr uint64_t kSegmentIdMax = (uint64_t{1} << 63) - 1;

// File names.
inline constexpr const char* kSegmentPrefix = "seg-";
inline constexpr const char* kSegmentSuffix = ".kvs";
inline constexpr const char* kCheckpointName = "index.ckpt";
inline constexpr const char* kCheckpointTempName = "index.ckpt.tmp";
inline constexpr const char* kManifestTempName = "MANIFEST.tmp";
// Kept in the first directory by the node service (`kvtier serve`: its cleared tenants), with the
// temporaries it is written through; not part of the cache, left alone by every SSD tool.
inline constexpr const char* kServeStateName = "serve-namespaces";
inline constexpr const char* kServeStateTempName = ".serve-namespaces.tmp";

static_assert(kSegmentHeaderBytes == kDirectIoAlignment);
static_assert(kRecordHeaderBytes < kDirectIoAlignment);
static_assert(kRecordHeaderCrcOffset + 4 == kRecordHeaderBytes);
static_assert(kSegmentHeaderCrcOffset + 4 == kSegmentHeaderEncodedBytes);
static_assert(kSegmentBytesMin % kDirectIoAlignment == 0);
static_assert(kSegmentBytesMax % kDirectIoAlignment == 0);
static_assert(kSegmentBytesMax <= UINT32_MAX);
static_assert(kManifestCrcOffset + 4 == kManifestBytes);
static_assert(kSegmentBytesDefault >= kSegmentBytesMin && kSegmentBytesDefault <= kSegmentBytesMax);

}  // namespace kvtier::ssd
