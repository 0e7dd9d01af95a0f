// Every bound in kvtier lives here, so the worst case is designed up front and related bounds
// are tied together by static_assert. Units are in the names.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// O_DIRECT needs 512-byte alignment on this class of disks; 4 KiB is safe on every NVMe drive and
// matches the page size, so buffers, offsets and lengths are multiples of it.
inline constexpr size_t kDirectIoAlignment = 4096;

// Keys and layouts.
inline constexpr uint32_t kBlockTokensMin = 16;
inline constexpr uint32_t kBlockTokensMax = 1024;
inline constexpr uint32_t kBlockTokensMultiple = 16;
inline constexpr uint32_t kLayersMax = 1024;
inline constexpr uint32_t kKvHeadsMax = 1024;
inline constexpr uint32_t kHeadDimMax = 4096;
inline constexpr size_t kSaltBytesMax = 4096;
inline constexpr size_t kModelNameBytesMax = 1024;
inline constexpr size_t kExtraKeysMax = 64;
inline constexpr size_t kExtraKeyBytesMax = 4096;
// A single block (K and V of one chunk for one layer) never exceeds this; larger geometries are
// rejected at layout validation instead of failing deep in an allocator.
inline constexpr uint64_t kBlockBytesMax = 256 * kMiB;
// Tokens per Lookup/Store call: 4M tokens is far beyond any context window in use.
inline constexpr size_t kTokensPerCallMax = size_t{1} << 22;

// I/O queue.
inline constexpr uint32_t kIoDepthMax = 256;
inline constexpr uint32_t kIoDepthDefault = 32;
inline constexpr uint32_t kIoBatchMax = 256;
inline constexpr uint64_t kIoRequestBytesMax = 64 * kMiB;
inline constexpr uint32_t kIoFallbackThreadsMax = 64;

// SSD tier index checkpoint: the file is size-checked before any of it is read, and reopen
// derives a tighter bound from the configured capacity (one entry per 4 KiB record at most).
inline constexpr uint64_t kSsdCheckpointBytesMax = 4 * kGiB;

// Thread pools.
inline constexpr uint32_t kThreadPoolThreadsMax = 256;
inline constexpr uint32_t kThreadPoolQueueMax = 1u << 16;
// The remote tier's I/O threads (RemoteTierAdapter): each keeps one store connection busy.
inline constexpr uint32_t kRemoteIoThreadsDefault = 2;
inline constexpr uint32_t kRemoteIoThreadsMax = 64;
// Connections per server the remote tier's reads use by default (its puts have one more).
inline constexpr uint32_t kRemoteConnectionsDefault = 1;
inline constexpr uint32_t kRemoteConnectionsMax = 64;
// The default nice increment of the engine's background write threads (EngineOptions).
inline constexpr int kBackgroundNiceDefault = 10;

static_assert(kBlockTokensMax % kBlockTokensMultiple == 0);
static_assert(kBlockTokensMin % kBlockTokensMultiple == 0);
static_assert(kIoBatchMax <= kIoDepthMax);
static_assert(kRemoteIoThreadsDefault >= 1 && kRemoteIoThreadsDefault <= kRemoteIoThreadsMax);
static_assert(kRemoteIoThreadsMax <= kThreadPoolThreadsMax);
static_assert(kIoRequestBytesMax % kDirectIoAlignment == 0);

}  // namespace kvtier
