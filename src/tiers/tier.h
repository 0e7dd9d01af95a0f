// Tier: the one interface of the block stores below memory (the SSD tier, the remote tier). A
// tier keeps encoded records by block key: a record is a codec payload with the codec id and the
// block's size before encoding (codecs/codec.h encodes and decodes; a tier never looks inside).
// The engine keeps an ordered list of tiers and walks it; it knows a tier only through this
// interface, its capabilities and its name. docs/architecture.md ("The tier list") says how the
// engine uses it and how to add a tier.
//
// Batch-first: every call takes a batch and reports a status per item, so one bad block (or one
// dead node of a remote tier) turns only its own items into misses or failures.
//
// Read statuses: OK; NotFound for a miss (absent, expired, erased, or a record that failed
// verification: then `corrupt` is set and the record is never returned); InvalidArgument when the
// buffer cannot hold the record; Unavailable, TimedOut or IoError when the tier could not answer.
// Write statuses: OK; Aborted (not admitted) or Busy (over the write budget) with `skipped` set,
// which are refusals and not errors; anything else is an error.
//
// Thread safety: implementations are safe for concurrent calls. ReadBatch and WriteBatch only
// queue the batch (waiting at most for back-pressure) and return; their completion callbacks run
// on an internal I/O thread of the tier (the SSD tier's, the remote tier's pool), so no caller
// waits for a device or the network. A tier whose client is synchronous runs it on threads of its
// own (RemoteTierAdapter). Callbacks must be short and must not call back into the tier. Contains
// and Erase are synchronous: they answer on the calling thread. A tier that is closed (or
// closing) completes the batches still queued without running them, each item Unavailable; a
// batch given after Close may complete that way on the calling thread.
//
// Ownership: items and the buffers they point to are borrowed until the batch's callback has
// run; write payloads may be reused once the callback has run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "core/block_key.h"
#include "core/mutex.h"
#include "kvtier/result.h"

namespace kvtier {

// What the engine may assume about a tier; it decides its policies from these, never from the
// tier's name.
struct TierCapabilities {
  bool persistent = false;  // Its records survive a restart of the process.
  bool shared = false;      // Other processes (engines on other hosts) read and write it too.
  // Contains is a lookup in local memory (cheap, per key); otherwise it is a batched call over
  // the network that may fail or time out, made once per Lookup for the keys no faster tier has.
  bool local_contains = false;
  // A block may be written to it later than its Store (write-back from memory); without it a
  // tier is written through at Store only.
  bool write_back = false;
};

// One record to write. `status` and `skipped` are set by the call.
struct TierWrite {
  BlockKey key;
  uint8_t codec_id = 0;                // The codec of the payload (stored with it).
  uint32_t raw_bytes = 0;              // The block's size before encoding (stored with it).
  std::span<const std::byte> payload;  // Borrowed until the callback has run.
  uint64_t ttl_us = 0;                 // 0: no expiry.
  // Optional: the writer's buffer that `payload` was encoded into at PayloadOffset(), 4 KiB-aligned
  // and of at least ReadBufferBytes(payload.size()) bytes, borrowed until the callback has run. A
  // tier that writes whole records may lay its record out around the payload in place (its bytes
  // outside the payload may be overwritten) and write it from there, so the block is copied once
  // before the disk, by its encoder (the SSD tier; TierStoreStats::staged_write_bytes counts the
  // records it copied instead).
  std::span<std::byte> record;
  Status status;
  bool skipped = false;  // Refused by the tier's admission filter or write budget.
};

// One record to read into `buffer` (at least ReadBufferBytes(payload) bytes, 4 KiB-aligned).
// On OK, `payload` spans the record's payload inside `buffer`.
struct TierRead {
  BlockKey key;
  std::span<std::byte> buffer;
  Status status;
  std::span<const std::byte> payload;
  uint8_t codec_id = 0;
  uint32_t raw_bytes = 0;
  bool corrupt = false;  // The tier held a record for the key and refused it (status NotFound).
};

// One key to look for: `present` is meaningful only when `status` is OK.
struct TierContains {
  BlockKey key;
  bool present = false;
  Status status;
  uint64_t expiry_wall_us = 0;  // When present: its absolute expiry, 0 for none or not known.
};

// What every tier counts, since it opened. A tier that cannot count its blocks (a shared store)
// reports blocks_known false.
struct TierStoreStats {
  bool blocks_known = false;
  uint64_t blocks = 0;
  uint64_t capacity_bytes = 0, used_bytes = 0;  // 0 when not known.
  uint64_t dropped = 0;  // Blocks the tier removed to make room (or because they expired).
  uint64_t reads = 0, read_hits = 0, read_misses = 0;
  uint64_t corrupt = 0;  // Records refused on read (failed verification, foreign key or layout).
  uint64_t writes = 0;   // Records written.
  // Bytes of those records as the tier wrote them (headers and padding included), and of those
  // the bytes it first copied into buffers of its own; 0 where the tier does not count them.
  uint64_t write_bytes = 0, staged_write_bytes = 0;
  uint64_t write_errors = 0;
  uint64_t not_admitted = 0, over_budget = 0;  // Writes skipped by the tier's policies.
};

class Tier {
 public:
  using Callback = std::function<void(Status)>;

  virtual ~Tier() = default;

  // "ssd", "remote": the name in statistics, logs and JSON.
  virtual std::string_view name() const = 0;
  virtual TierCapabilities capabilities() const = 0;
  // Items per ReadBatch, WriteBatch or Contains call at most.
  virtual size_t batch_max() const = 0;
  // The read buffer a record with a payload of `payload_bytes` needs.
  virtual uint64_t ReadBufferBytes(uint64_t payload_bytes) const = 0;
  // Where a read places every record's payload in its buffer (TierRead::payload starts there):
  // a reader that keeps whole records in its own memory and wants the payload at a fixed place
  // (the offloaded sequence's host slots) leaves this many bytes before it. The tier's record
  // layout stays the tier's own. ReadBufferBytes(p) >= PayloadOffset() + p.
  virtual uint64_t PayloadOffset() const = 0;

  // Reads a batch into the callers' buffers. `done` receives OK unless the whole call failed
  // (more than batch_max() items, an I/O error); the outcome of each item is in its status.
  virtual void ReadBatch(std::span<TierRead> reads, Callback done) = 0;
  // Writes a batch. Blocks only for back-pressure. `done` receives OK when every item was written
  // or skipped, else the first item error.
  virtual void WriteBatch(std::span<TierWrite> writes, Callback done) = 0;
  // Whether each key is held. A remote tier's failure to answer is a per-item status; a miss may
  // count as a request for the tier's admission filter.
  virtual Status Contains(std::span<TierContains> items) = 0;
  // Removes the keys (absent ones are fine).
  virtual Status Erase(std::span<const BlockKey> keys) = 0;
  // Makes every write completed before the call durable (as durable as the tier can make it).
  virtual Status Flush() = 0;
  virtual TierStoreStats Stats() = 0;
  // Stops the tier's threads after in-flight work and makes it durable; later calls fail. The
  // destructor closes quietly a tier not closed.
  virtual Status Close() { return Status::Ok(); }

  // ReadBatch and WriteBatch, waiting for the callback. For callers that may block on the tier's
  // I/O threads: never from a completion callback, nor from a worker whose pool those callbacks
  // need.
  Status ReadBatchSync(std::span<TierRead> reads);
  Status WriteBatchSync(std::span<TierWrite> writes);
};

// Runs an asynchronous batch call `start(done)` and waits for `done`: the body of the *Sync
// wrappers.
template <typename StartFn>
Status WaitForCallback(StartFn start) {
  Mutex mu;
  CondVar cv;
  bool finished = false;
  Status result;
  start([&](Status s) {
    MutexLock lock(&mu);
    result = std::move(s);
    finished = true;
    cv.SignalAll();
  });
  MutexLock lock(&mu);
  while (!finished) cv.Wait(&mu);
  return result;
}

}  // namespace kvtier
