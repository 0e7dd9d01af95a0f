// See ssd_tools.h.
#include "tiers/ssd/ssd_tools.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <unordered_map>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/crc32c.h"
#include "core/huge_page_buffer.h"
#include "core/mutex.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_tier.h"
#include "tiers/ssd/ssd_tools_scan.h"

namespace kvtier::ssd {

Status CheckCacheDirs(Env* env, const std::vector<std::string>& dirs) {
  if (dirs.empty()) return Status::InvalidArgument("no directory given");
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return Status::NotFound(dir + ": no such directory");
    }
    KV_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
    const bool ours = std::any_of(names.begin(), names.end(), [](const std::string& name) {
      return IsCacheFileName(name) || name == kManifestName;
    });
    if (!ours) {
      return Status::InvalidArgument(dir + ": not a kvtier cache directory (no " + kSegmentPrefix +
                                     "*" + kSegmentSuffix + " segment, " + kCheckpointName +
                                     " or " + kManifestName + ")");
    }
  }
  return Status::Ok();
}

namespace {

// Whether dirs[0]'s checkpoint is there and usable; never opens anything but a regular file.
void InspectCheckpoint(Env* env, const ToolListing& listing, size_t dir_count, InspectReport* r) {
  r->checkpoint_present = listing.checkpoint_present;
  if (!listing.checkpoint_present) return;
  Status s = CheckRegularFile(env, listing.checkpoint_path);
  if (s.ok()) {
    Result<Checkpoint> ck = ReadCheckpointFile(env, listing.checkpoint_path);
    s = ck.ok() && ck->dir_count != dir_count
            ? Status::Corruption("written for " + std::to_string(ck->dir_count) + " directories")
            : ck.status();
  }
  r->checkpoint_valid = s.ok();
  if (!s.ok()) r->checkpoint_problem = s.message();
}

}  // namespace

Result<InspectReport> InspectDir(Env* env, const std::vector<std::string>& dirs) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  InspectReport report;
  // A shared lock when it can be had; a tier holding the directories leaves a snapshot to read.
  Result<std::vector<DirLock>> locks = AcquireAll(env, dirs, DirLockMode::kShared);
  if (!locks.ok() && !locks.status().IsBusy()) return locks.status();
  if (!locks.ok()) report.in_use = locks.status().message();
  KV_ASSIGN_OR_RETURN(ToolListing listing, ListCache(env, dirs));
  report.other_files = listing.other_files;
  InspectCheckpoint(env, listing, dirs.size(), &report);
  NewestRecords newest;
  uint64_t total_bytes = 0;
  for (SegmentFile& seg : listing.segments) {
    InspectSegment is{.path = seg.path,
                      .segment_id = seg.segment_id,
                      .file_bytes = seg.file_bytes,
                      .bad = !seg.bad.ok()};
    if (seg.bad.ok()) {
      KV_ASSIGN_OR_RETURN(SegmentScan scan,
                          ScanSegment(*seg.file, seg.segment_id, seg.segment_bytes,
                                      kSegmentHeaderBytes, [&](const RecordHeader& h, uint64_t) {
                                        const uint64_t rb = RecordBytesForPayload(h.payload_bytes);
                                        ++is.records;
                                        is.tombstones += h.tombstone() ? 1u : 0u;
                                        total_bytes += rb;
                                        ++report.records_per_layout[ToHex(h.layout_digest)];
                                        KeepNewest(SummarizeRecord(h), seg.segment_id, &newest);
                                      }));
      is.valid_bytes = scan.end_offset;
      if (scan.stop == ScanStop::kInvalid) is.stop_reason = scan.reason.ToString();
    } else {
      is.stop_reason = seg.bad.ToString();
    }
    report.dead_bytes += is.file_bytes > is.valid_bytes ? is.file_bytes - is.valid_bytes : 0;
    report.segments.push_back(std::move(is));
  }
  for (const auto& [key, n] : newest) {
    if (n.record.tombstone) continue;
    ++report.blocks;
    report.live_bytes += RecordBytesForPayload(n.record.payload_bytes);
  }
  report.dead_bytes += total_bytes - report.live_bytes;
  return report;
}

}  // namespace kvtier::ssd

// ---------------------------------------------------------------------------------------------
// Benchmarks.

namespace kvtier::ssd {
namespace {

const Hash256 kBenchLayout = [] {
  Hash256 h;
  h.fill(0xB5);
  return h;
}();

// Distinct, well-spread keys: the block index in the first 8 bytes, a mix of it in the rest.
BlockKey BenchKey(uint64_t index) {
  BlockKey key;
  uint64_t x = index * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (size_t b = 0; b < key.chunk_hash.size(); ++b) {
    if (b % 8 == 0) x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ull;
    key.chunk_hash[b] = b < 8 ? static_cast<uint8_t>(index >> (b * 8)) : static_cast<uint8_t>(x);
    x = (x << 8) | (x >> 56);
  }
  key.layer = static_cast<uint32_t>(index & 0xFF);
  return key;
}

double Seconds(uint64_t begin_us, uint64_t end_us) {
  return static_cast<double>(end_us - begin_us) / 1e6;
}

void RemoveBenchDirs(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);  // Best effort: a leftover temp dir is not a failure.
  }
}

// Makes a fresh kvtier-bench-XXXXXX subdirectory in each of `parents`, which must exist.
Result<std::vector<std::string>> MakeBenchDirs(const std::vector<std::string>& parents) {
  std::vector<std::string> made;
  for (const std::string& parent : parents) {
    std::error_code ec;
    Status s = std::filesystem::is_directory(parent, ec)
                   ? Status::Ok()
                   : Status::NotFound("bench: " + parent + " is not a directory");
    std::string pattern = parent + "/kvtier-bench-XXXXXX";
    if (s.ok() && ::mkdtemp(pattern.data()) == nullptr) {
      s = Status::FromErrno(errno, "mkdtemp in " + parent);
    }
    if (!s.ok()) {
      RemoveBenchDirs(made);
      return s;
    }
    made.push_back(pattern);
  }
  return made;
}

// Whether O_DIRECT works in `dir` (a probe file, removed again).
Result<bool> ProbeDirectIo(Env* env, const std::string& dir) {
  KV_ASSIGN_OR_RETURN(const std::string probe, UniqueTempPath(dir + "/direct-probe"));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                      env->OpenFile(probe, {.mode = OpenMode::kCreateExclusive,
                                            .direct = DirectIo::kPreferred,
                                            .links = Links::kRefuse}));
  const bool direct = file->direct();
  KV_RETURN_IF_ERROR(file->Close());
  KV_RETURN_IF_ERROR(env->RemoveFile(probe));
  return direct;
}

// Runs `count` operations with at most `depth` in flight on the calling thread's behalf.
// submit(slot, index, done) starts operation `index` using per-slot state `slot`; `done` may run
// on any thread. finish(slot, index, status, latency_us) runs on the calling thread once the
// operation completed. Submission stops at the first error, or once `cancelled` (when set)
// returns true (Aborted); in-flight operations are awaited.
class Pipeline {
 public:
  using SubmitFn = std::function<void(uint32_t slot, uint64_t index, SsdTier::Callback done)>;
  using FinishFn = std::function<Status(uint32_t slot, uint64_t index, Status s, uint64_t us)>;

  Pipeline(Clock* clock, const std::function<bool()>& cancelled)
      : clock_(clock), cancelled_(cancelled) {}
  Status Run(uint64_t count, uint32_t depth, const SubmitFn& submit, const FinishFn& finish);

 private:
  struct Completion {
    uint32_t slot = 0;
    uint64_t index = 0;
    Status status;
    uint64_t end_us = 0;
  };
  void Push(Completion c) {
    MutexLock lock(&mu_);
    done_.push_back(std::move(c));
    cv_.Signal();
  }
  std::vector<Completion> WaitSome() {
    MutexLock lock(&mu_);
    while (done_.empty()) cv_.Wait();
    return std::exchange(done_, {});
  }

  Clock* const clock_;
  const std::function<bool()>& cancelled_;
  Mutex mu_;
  CondVar cv_{&mu_};
  std::vector<Completion> done_ KV_GUARDED_BY(mu_);
};

Status Pipeline::Run(uint64_t count, uint32_t depth, const SubmitFn& submit,
                     const FinishFn& finish) {
  KV_CHECK(depth >= 1 && depth <= kBenchQueueDepthMax);
  std::vector<uint32_t> free_slots;
  for (uint32_t s = depth; s > 0; --s) free_slots.push_back(s - 1);
  std::vector<uint64_t> start_us(depth, 0);
  uint64_t next = 0, finished = 0;
  Status first = Status::Ok();
  while (finished < next || (first.ok() && next < count)) {
    if (first.ok() && next < count && cancelled_ && cancelled_()) {
      first = Status::Aborted("bench: cancelled");
      continue;
    }
    while (first.ok() && next < count && !free_slots.empty()) {
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      const uint64_t index = next++;
      start_us[slot] = clock_->NowMicros();
      submit(slot, index, [this, slot, index](Status s) {
        Push({slot, index, std::move(s), clock_->NowMicros()});
      });
    }
    for (Completion& c : WaitSome()) {
      ++finished;
      Status s = finish(c.slot, c.index, std::move(c.status), c.end_us - start_us[c.slot]);
      if (first.ok() && !s.ok()) first = std::move(s);
      free_slots.push_back(c.slot);
    }
  }
  return first;
}

// Random payloads reused round-robin; block i is pool[i % size] with i stamped in its first 8
// bytes, so every block differs and a read can be checked against the pool's CRC of the rest.
struct PayloadPool {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<uint32_t> tail_crcs;  // CRC32C of payload[8:].

  static PayloadPool Make(uint64_t payload_bytes, uint64_t blocks) {
    PayloadPool pool;
    const uint64_t count = std::clamp<uint64_t>(64 * kMiB / payload_bytes, 1, 64);
    std::mt19937_64 rng(0x6B767469657262ull);
    for (uint64_t p = 0; p < std::min(count, blocks); ++p) {
      std::vector<std::byte> bytes(payload_bytes);
      for (size_t b = 0; b < bytes.size(); b += 8) {
        const uint64_t r = rng();
        std::memcpy(bytes.data() + b, &r, std::min<size_t>(8, bytes.size() - b));
      }
      pool.tail_crcs.push_back(crc32c::Value(std::span(bytes).subspan(8)));
      pool.payloads.push_back(std::move(bytes));
    }
    return pool;
  }
  std::span<const std::byte> Stamp(uint64_t index) {
    std::vector<std::byte>& p = payloads[index % payloads.size()];
    std::memcpy(p.data(), &index, sizeof(index));
    return p;
  }
  Status Check(uint64_t index, std::span<const std::byte> got) const {
    uint64_t stamp = 0;
    const size_t want = payloads[0].size();
    if (got.size() == want) std::memcpy(&stamp, got.data(), sizeof(stamp));
    if (got.size() != want || stamp != index ||
        crc32c::Value(got.subspan(8)) != tail_crcs[index % tail_crcs.size()]) {
      return Status::Corruption("bench: block " + std::to_string(index) + " read back damaged");
    }
    return Status::Ok();
  }
};

}  // namespace
}  // namespace kvtier::ssd

namespace kvtier::ssd {
namespace {

// Segments hold 4..64 blocks (at most 1 GiB); capacity leaves room so reclaim never starts.
SsdTierOptions BenchTierOptions(const std::vector<std::string>& dirs, uint64_t record_bytes,
                                uint64_t records, bool direct) {
  const uint64_t per_segment =
      std::min<uint64_t>({std::max<uint64_t>(4, std::min<uint64_t>(64, records)),
                          (kSegmentBytesMax - kSegmentHeaderBytes) / record_bytes});
  SsdTierOptions o;
  o.dirs = dirs;
  o.segment_bytes = AlignUp(kSegmentHeaderBytes + per_segment * record_bytes, kMiB);
  o.capacity_bytes =
      o.segment_bytes * ((records + per_segment - 1) / per_segment + 2 * dirs.size() + 4);
  o.sync = SsdSyncMode::kPeriodic;
  o.direct_io = direct ? DirectIo::kRequired : DirectIo::kOff;
  return o;
}

Status WritePhase(SsdTier& tier, Clock* clock, const BenchSsdOptions& o, uint64_t blocks,
                  PayloadPool& pool, BenchSsdReport* r) {
  std::vector<SsdBlockWrite> writes(o.queue_depth);
  Pipeline pipeline(clock, o.cancelled);
  uint64_t written = 0;
  const uint64_t begin_us = clock->NowMicros();
  KV_RETURN_IF_ERROR(pipeline.Run(
      blocks, o.queue_depth,
      [&](uint32_t slot, uint64_t index, SsdTier::Callback done) {
        const std::span<const std::byte> payload = pool.Stamp(index);
        writes[slot] = {.key = BenchKey(index),
                        .layout_digest = kBenchLayout,
                        .raw_bytes = static_cast<uint32_t>(payload.size()),
                        .payload = payload};
        tier.WriteBatch(std::span(&writes[slot], 1), std::move(done));
      },
      [&](uint32_t slot, uint64_t, Status s, uint64_t) {
        if (o.progress) o.progress(++written * o.block_bytes, 2 * blocks * o.block_bytes);
        return s.ok() ? writes[slot].status : s;
      }));
  KV_RETURN_IF_ERROR(tier.Flush());
  r->write_s = Seconds(begin_us, clock->NowMicros());
  r->write_bytes_per_s = static_cast<double>(blocks * o.block_bytes) / r->write_s;
  return Status::Ok();
}

Status ReadPhase(SsdTier& tier, Clock* clock, const BenchSsdOptions& o, uint64_t blocks,
                 const PayloadPool& pool, BenchSsdReport* r) {
  // One region on huge pages, as the engine's staging buffers that SSD reads land in.
  const size_t stride = AlignUp(o.block_bytes, kDirectIoAlignment);
  KV_ASSIGN_OR_RETURN(HugePageBuffer region, HugePageBuffer::Allocate(o.queue_depth * stride));
  std::vector<std::span<std::byte>> buffers;
  for (uint32_t s = 0; s < o.queue_depth; ++s) {
    buffers.push_back(region.span().subspan(s * stride, o.block_bytes));
  }
  std::vector<SsdBlockRead> reads(o.queue_depth);
  std::vector<uint64_t> latencies_us;
  latencies_us.reserve(blocks);
  Pipeline pipeline(clock, o.cancelled);
  const uint64_t begin_us = clock->NowMicros();
  const Status run = pipeline.Run(
      blocks, o.queue_depth,
      [&](uint32_t slot, uint64_t index, SsdTier::Callback done) {
        reads[slot] = {
            .key = BenchKey(index), .layout_digest = kBenchLayout, .buffer = buffers[slot]};
        tier.ReadBatch(std::span(&reads[slot], 1), std::move(done));
      },
      [&](uint32_t slot, uint64_t index, Status s, uint64_t us) {
        latencies_us.push_back(us);
        if (o.progress) {
          o.progress((blocks + latencies_us.size()) * o.block_bytes, 2 * blocks * o.block_bytes);
        }
        KV_RETURN_IF_ERROR(s);
        KV_RETURN_IF_ERROR(reads[slot].status);
        return pool.Check(index, reads[slot].payload);
      });
  KV_RETURN_IF_ERROR(run);
  r->read_s = Seconds(begin_us, clock->NowMicros());
  r->read_bytes_per_s = static_cast<double>(blocks * o.block_bytes) / r->read_s;
  std::sort(latencies_us.begin(), latencies_us.end());
  const auto at = [&](double q) {
    return static_cast<double>(
        latencies_us[static_cast<size_t>(q * static_cast<double>(latencies_us.size() - 1))]);
  };
  r->read_p50_us = at(0.5);
  r->read_p99_us = at(0.99);
  r->read_max_us = at(1.0);
  return Status::Ok();
}

Status CheckFreeSpace(Env* env, const std::vector<std::string>& dirs, uint64_t need_bytes) {
  KV_ASSIGN_OR_RETURN(uint64_t free_bytes, env->FreeSpaceBytes(dirs.at(0)));
  if (free_bytes / dirs.size() < need_bytes / dirs.size() + 256 * kMiB) {
    return Status::NoSpace("bench: " + dirs[0] + " has " + std::to_string(free_bytes >> 20) +
                           " MiB free, the benchmark needs about " +
                           std::to_string((need_bytes >> 20) + 256) + " MiB");
  }
  return Status::Ok();
}

Status RunBenchSsd(Env* env, const BenchSsdOptions& o, const std::vector<std::string>& dirs,
                   BenchSsdReport* r) {
  KV_ASSIGN_OR_RETURN(r->direct_io, ProbeDirectIo(env, dirs[0]));
  const SsdTierOptions to = BenchTierOptions(dirs, r->block_bytes, r->blocks, r->direct_io);
  KV_RETURN_IF_ERROR(CheckFreeSpace(env, dirs, r->total_bytes));
  PayloadPool pool = PayloadPool::Make(r->payload_bytes, r->blocks);
  {
    SsdTierOptions wo = to;
    wo.io_depth = std::max(o.queue_depth, kIoDepthDefault);
    wo.queue_jobs_max = std::max<uint32_t>(wo.queue_jobs_max, o.queue_depth);
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(wo, env));
    r->io_backend = tier->Stats().io_backend;
    KV_RETURN_IF_ERROR(WritePhase(*tier, env->clock(), o, r->blocks, pool, r));
    KV_RETURN_IF_ERROR(tier->Close());
  }
  SsdTierOptions ro = to;
  ro.io_depth = std::max(o.queue_depth, kIoDepthDefault);
  ro.queue_jobs_max = std::max<uint32_t>(ro.queue_jobs_max, o.queue_depth);
  const uint64_t open_us = env->clock()->NowMicros();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(ro, env));
  r->reopen_ms = Seconds(open_us, env->clock()->NowMicros()) * 1e3;
  const uint64_t indexed = tier->Stats().blocks;
  if (indexed != r->blocks) {
    return Status::Corruption("bench: reopened tier indexes " + std::to_string(indexed) + " of " +
                              std::to_string(r->blocks) + " blocks");
  }
  KV_RETURN_IF_ERROR(ReadPhase(*tier, env->clock(), o, r->blocks, pool, r));
  return tier->Close();
}

}  // namespace

Status BenchSsdOptions::Validate() const {
  if (dirs.empty() || dirs.size() > kSsdDirsMax) {
    return Status::InvalidArgument("bench: give 1 to 64 directories");
  }
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (dirs[i] == dirs[j] || std::filesystem::equivalent(dirs[i], dirs[j], ec)) {
        return Status::InvalidArgument("bench: directory " + dirs[i] +
                                       " is given twice (each --dir is one device)");
      }
    }
  }
  if (block_bytes == 0 || block_bytes % kDirectIoAlignment != 0 ||
      block_bytes > kBenchBlockBytesMax) {
    return Status::InvalidArgument(
        "bench: block bytes must be a positive multiple of 4 KiB, "
        "at most 64 MiB (got " +
        std::to_string(block_bytes) + ")");
  }
  if (queue_depth == 0 || queue_depth > kBenchQueueDepthMax) {
    return Status::InvalidArgument("bench: queue depth must be 1..256 (got " +
                                   std::to_string(queue_depth) + ")");
  }
  if (total_bytes < block_bytes) {
    return Status::InvalidArgument("bench: total bytes must be at least one block");
  }
  if (total_bytes / block_bytes > kBenchBlocksMax) {
    return Status::InvalidArgument("bench: more than 16777216 blocks");
  }
  return Status::Ok();
}

Result<BenchSsdReport> BenchSsd(Env* env, const BenchSsdOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  BenchSsdReport r;
  r.block_bytes = options.block_bytes;
  r.payload_bytes = options.block_bytes - kRecordPayloadOffset;
  r.queue_depth = options.queue_depth;
  r.blocks = options.total_bytes / options.block_bytes;
  r.total_bytes = r.blocks * options.block_bytes;
  r.sync_mode = "periodic";
  KV_ASSIGN_OR_RETURN(std::vector<std::string> dirs, MakeBenchDirs(options.dirs));
  const Status s = RunBenchSsd(env, options, dirs, &r);
  if (options.keep_dirs) {
    r.kept_dirs = dirs;
  } else {
    RemoveBenchDirs(dirs);
  }
  KV_RETURN_IF_ERROR(s);
  return r;
}

}  // namespace kvtier::ssd

namespace kvtier::ssd {
namespace {

Status FillForReopen(SsdTier& tier, const BenchReopenOptions& o) {
  PayloadPool pool = PayloadPool::Make(o.payload_bytes, 1);
  std::vector<SsdBlockWrite> writes(kSsdBatchEntriesMax);
  for (uint64_t first = 0; first < o.blocks; first += kSsdBatchEntriesMax) {
    if (o.cancelled && o.cancelled()) return Status::Aborted("bench: cancelled");
    if (o.progress) o.progress(first, o.blocks);
    const uint64_t n = std::min<uint64_t>(kSsdBatchEntriesMax, o.blocks - first);
    for (uint64_t i = 0; i < n; ++i) {
      writes[i] = {.key = BenchKey(first + i),
                   .layout_digest = kBenchLayout,
                   .raw_bytes = o.payload_bytes,
                   .payload = pool.payloads[0]};
    }
    const std::span<SsdBlockWrite> batch(writes.data(), n);
    KV_RETURN_IF_ERROR(tier.WriteBatchSync(batch));
    for (const SsdBlockWrite& w : batch) KV_RETURN_IF_ERROR(w.status);
  }
  if (o.progress) o.progress(o.blocks, o.blocks);
  return tier.Close();
}

// Opens, records how long it took and what was recovered, closes.
Status TimedReopen(Env* env, const SsdTierOptions& to, double* ms, uint64_t* blocks,
                   bool* checkpoint_used) {
  const uint64_t begin_us = env->clock()->NowMicros();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(to, env));
  *ms = Seconds(begin_us, env->clock()->NowMicros()) * 1e3;
  const SsdTierStats st = tier->Stats();
  *blocks = st.blocks;
  *checkpoint_used = st.checkpoint_used;
  return tier->Close();
}

Status RunBenchReopen(Env* env, const BenchReopenOptions& o, const std::vector<std::string>& dirs,
                      BenchReopenReport* r) {
  KV_ASSIGN_OR_RETURN(const bool direct, ProbeDirectIo(env, dirs[0]));
  const uint64_t record_bytes = RecordBytesForPayload(o.payload_bytes);
  SsdTierOptions to = BenchTierOptions(dirs, record_bytes, o.blocks, direct);
  to.segment_bytes = kSegmentBytesDefault;
  const uint64_t per_segment = (to.segment_bytes - kSegmentHeaderBytes) / record_bytes;
  to.capacity_bytes =
      to.segment_bytes * ((o.blocks + per_segment - 1) / per_segment + 2 * dirs.size() + 4);
  to.sync = SsdSyncMode::kNone;  // Only the reopen is measured; the fill may as well be quick.
  KV_RETURN_IF_ERROR(CheckFreeSpace(env, dirs, o.blocks * record_bytes));
  const uint64_t fill_us = env->clock()->NowMicros();
  {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(to, env));
    KV_RETURN_IF_ERROR(FillForReopen(*tier, o));
  }
  r->fill_s = Seconds(fill_us, env->clock()->NowMicros());
  KV_RETURN_IF_ERROR(TimedReopen(env, to, &r->reopen_checkpoint_ms, &r->recovered_checkpoint,
                                 &r->checkpoint_used));
  KV_ASSIGN_OR_RETURN(InspectReport inspect, InspectDir(env, dirs));
  for (const InspectSegment& s : inspect.segments) r->disk_bytes += s.file_bytes;
  KV_RETURN_IF_ERROR(env->RemoveFile(dirs[0] + "/" + kCheckpointName));
  bool used = false;
  KV_RETURN_IF_ERROR(TimedReopen(env, to, &r->reopen_scan_ms, &r->recovered_scan, &used));
  if (used || r->recovered_checkpoint != o.blocks || r->recovered_scan != o.blocks) {
    return Status::Corruption("bench: reopen recovered " + std::to_string(r->recovered_checkpoint) +
                              " and " + std::to_string(r->recovered_scan) + " of " +
                              std::to_string(o.blocks) + " blocks");
  }
  return Status::Ok();
}

}  // namespace

Status BenchReopenOptions::Validate() const {
  if (dirs.empty() || dirs.size() > kSsdDirsMax) {
    return Status::InvalidArgument("bench: give 1 to 64 directories");
  }
  if (blocks == 0 || blocks > kBenchBlocksMax) {
    return Status::InvalidArgument("bench: blocks must be 1..16777216");
  }
  if (payload_bytes == 0 || payload_bytes > kBenchBlockBytesMax) {
    return Status::InvalidArgument("bench: payload bytes must be 1..64 MiB");
  }
  return Status::Ok();
}

Result<BenchReopenReport> BenchReopen(Env* env, const BenchReopenOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  BenchReopenReport r;
  r.blocks = options.blocks;
  r.payload_bytes = options.payload_bytes;
  KV_ASSIGN_OR_RETURN(std::vector<std::string> dirs, MakeBenchDirs(options.dirs));
  const Status s = RunBenchReopen(env, options, dirs, &r);
  if (!options.keep_dirs) RemoveBenchDirs(dirs);
  KV_RETURN_IF_ERROR(s);
  return r;
}

}  // namespace kvtier::ssd
