// Internals shared by offload_sequence.cc and offload_sequence_io.cc (only they include this):
// the block-table entry, the SSD read batches, the codec thread pool and small helpers.
//
// Thread safety: as OffloadedSequence (the caller's thread), except CodecPool, whose Submit may
// be called from the caller's thread while its tasks run on its own threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "codecs/codec.h"
#include "core/mutex.h"
#include "core/thread_pool.h"
#include "engine/offload_sequence.h"

namespace kvtier {
namespace offload_internal {

inline constexpr uint32_t kNoSlot = UINT32_MAX;
inline constexpr uint32_t kNoPos = UINT32_MAX;
inline constexpr int32_t kNoRead = -1;

inline uint64_t NowUs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// How lossy a stored representation is: 0 lossless (raw, identity, shuffle-zstd), 1 8-bit codes
// (int8, int8-rot), 2 codes with a 4-bit half (int4, int4-rot, k8v4, k8v4-rot). Precision only
// ever goes down (a block is re-encoded to a higher rank only).
inline uint32_t Rank(uint8_t codec_id) {
  const codecs::QuantScheme s = codecs::SchemeOf(static_cast<codecs::CodecId>(codec_id));
  if (s.key_bits == 0) return 0;
  return std::min(s.key_bits, s.value_bits) == 8 ? 1 : 2;
}
inline uint32_t Rank(const codecs::CodecParams& p) {
  return p.lossless() ? 0 : (p.bits() == 8 ? 1 : 2);
}

inline codecs::BlockGeometry GeometryOf(const KvLayout& l) {
  return {
      .tokens = l.block_tokens, .kv_heads = l.kv_heads, .head_dim = l.head_dim, .dtype = l.dtype,
      .kind = l.kind};
}

// Adds `index` to or removes it from `list` in O(1), keeping `*pos` (its position) and the
// position of the element moved into its place (through `moved`) right.
inline void Track(std::vector<size_t>* list, uint32_t* pos, size_t index, bool resident,
                  const std::function<void(size_t, uint32_t)>& moved) {
  if (resident) {
    if (*pos != kNoPos) return;
    *pos = static_cast<uint32_t>(list->size());
    list->push_back(index);
    return;
  }
  if (*pos == kNoPos) return;
  const uint32_t at = *pos;
  const size_t last = list->back();
  (*list)[at] = last;
  list->pop_back();
  if (last != index) moved(last, at);
  *pos = kNoPos;
}

}  // namespace offload_internal

// One (layer, chunk) of the block table. A slot index is set while the tier holds it; the
// *_current flags say whether that copy holds the latest bytes. host_codec / ssd_codec say how
// those copies are encoded (0 raw, else a codecs::CodecId).
struct OffloadedSequence::Entry {
  uint32_t device_slot = offload_internal::kNoSlot;
  uint32_t host_slot = offload_internal::kNoSlot;
  uint32_t device_pos = offload_internal::kNoPos;  // In device_list_.
  uint32_t host_pos = offload_internal::kNoPos;    // In host_list_.
  CopyEvent device_event;  // Last transfer into or out of the device slot (copy or decode).
  CopyEvent host_event;    // Last copy into the host slot.
  int32_t read = offload_internal::kNoRead;  // ReadBatch in flight into the host slot.
  uint32_t ssd_generation = 0;
  uint32_t host_bytes = 0;    // Payload bytes of the host copy.
  uint32_t device_bytes = 0;  // Bytes of the device copy (the block size when raw).
  uint64_t last_use = 0;
  uint64_t heat_step = 0;
  float heat = 0.0f;
  uint8_t host_codec = 0;
  uint8_t ssd_codec = 0;
  uint8_t device_codec = 0;  // 0 raw; int8/int4 when promoted encoded (LadderAttention).
  bool written = false;
  bool host_current = false;
  bool ssd_current = false;
  bool pinned = false;
  bool loading = false;  // In a host -> device batch being formed: its host slot stays.
  bool fresh = false;    // Written through MutableBlock since it came to the device.
};

// Up to kOffloadReadBatchBlocks SSD -> host reads submitted as one batch with one completion.
struct OffloadedSequence::ReadBatch {
  std::vector<TierRead> reads;  // Each reads straight into its block's host slot.
  std::vector<size_t> indexes;
};

// Decodes host copies into device slots on its own threads (one CodecContext each).
class OffloadedSequence::CodecPool {
 public:
  static Result<std::unique_ptr<CodecPool>> Create(uint32_t threads,
                                                   const codecs::BlockGeometry& geometry);
  // Runs `work` with a free context on a pool thread. Busy when the queue is full.
  Status Submit(std::function<void(codecs::CodecContext*)> work) KV_EXCLUDES(mu_);

 private:
  CodecPool() = default;
  Mutex mu_;
  std::vector<std::unique_ptr<codecs::CodecContext>> free_ KV_GUARDED_BY(mu_);
  // Declared last: destroyed (joined, after running what is queued) before the contexts.
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace kvtier
