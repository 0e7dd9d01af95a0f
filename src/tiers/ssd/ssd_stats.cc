// StatsDir (see ssd_tools.h): VerifyDir's analysis of a cache, then a summary of its live blocks
// by age, layout and codec. Refusing a damaged cache keeps the figures honest: on a verified
// cache every record is counted, as recovery would index it.
#include <algorithm>
#include <iterator>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/sha256.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_tools.h"
#include "tiers/ssd/ssd_tools_scan.h"

namespace kvtier::ssd {
namespace {

constexpr size_t kLayoutIdHexDigits = 16;

// Per layout digest, while counting.
struct LayoutCount {
  StatsLayout out;
  std::set<Hash256> chunks;
  std::set<uint32_t> layers;
};

// The bucket of a block in a segment created at `created_us`, seen at `now_us`.
size_t AgeBucket(uint64_t created_us, uint64_t now_us) {
  const uint64_t age_s = now_us > created_us ? (now_us - created_us) / 1'000'000 : 0;
  const auto* end = std::end(kStatsAgeBoundsS);
  return static_cast<size_t>(std::upper_bound(std::begin(kStatsAgeBoundsS), end, age_s) -
                             std::begin(kStatsAgeBoundsS));
}

Status RefuseDamage(const VerifyReport& r) {
  const VerifyProblem& p = r.problems.front();
  std::string where = p.path;
  if (p.offset_end > p.offset_begin) {
    where += " offset " + std::to_string(p.offset_begin) + ".." + std::to_string(p.offset_end);
  }
  const size_t n = r.problems.size();
  return Status::Corruption("the cache is damaged: " + where + ": " + p.what + " (" +
                            std::to_string(n) + (n == 1 ? " problem" : " problems") +
                            "; kvtier verify lists them all, kvtier repair fixes them)");
}

}  // namespace

Result<StatsReport> StatsDir(Env* env, const std::vector<std::string>& dirs,
                             uint64_t now_wall_us) {
  KV_RETURN_IF_ERROR(CheckDirList(dirs));
  // Shared, as verify: other readers may look too, but a running tier is refused (its newest
  // records would read as damage, and the figures would be a guess).
  KV_ASSIGN_OR_RETURN(std::vector<DirLock> locks, AcquireAll(env, dirs, DirLockMode::kShared));
  KV_ASSIGN_OR_RETURN(CacheAnalysis a, AnalyzeCache(env, dirs));
  if (!a.report.problems.empty()) return RefuseDamage(a.report);

  StatsReport r;
  if (a.listing.manifest.has_value()) r.cache_id = CacheIdHex(*a.listing.manifest);
  r.segment_bytes = a.segment_bytes;
  r.checkpoint_present = a.report.checkpoint_present;
  NewestRecords newest;
  std::unordered_map<uint64_t, uint64_t> created;  // Segment id -> creation wall time.
  for (const SegmentFile& seg : a.listing.segments) {
    ++r.segments;
    r.disk_bytes += seg.file_bytes;
    created[seg.segment_id] = seg.created_wall_us;
    for (const auto& [offset, record] : a.checks.at(seg.segment_id).records) {
      KeepNewest(record, seg.segment_id, &newest);
    }
  }

  r.age.resize(std::size(kStatsAgeBoundsS) + 1);
  for (size_t i = 0; i < std::size(kStatsAgeBoundsS); ++i) r.age[i].max_age_s = kStatsAgeBoundsS[i];
  std::map<Hash256, LayoutCount> layouts;
  std::set<Hash256> chunks;
  for (const auto& [key, n] : newest) {
    const RecordSummary& rec = n.record;
    if (rec.tombstone) {
      ++r.erased_keys;
      continue;
    }
    const uint64_t bytes = RecordBytesForPayload(rec.payload_bytes);
    ++r.blocks;
    r.live_bytes += bytes;
    r.raw_bytes += rec.raw_bytes;
    chunks.insert(key.chunk_hash);
    if (rec.expiry_wall_us != 0 && rec.expiry_wall_us <= now_wall_us) ++r.expired_blocks;
    r.sequence_min = r.sequence_min == 0 ? rec.sequence : std::min(r.sequence_min, rec.sequence);
    r.sequence_max = std::max(r.sequence_max, rec.sequence);
    const uint64_t created_us = created.at(n.segment_id);
    r.oldest_segment_wall_us = r.oldest_segment_wall_us == 0
                                   ? created_us
                                   : std::min(r.oldest_segment_wall_us, created_us);
    r.newest_segment_wall_us = std::max(r.newest_segment_wall_us, created_us);
    StatsAgeBucket& bucket = r.age[AgeBucket(created_us, now_wall_us)];
    ++bucket.blocks;
    bucket.live_bytes += bytes;
    LayoutCount& l = layouts[rec.layout_digest];
    ++l.out.blocks;
    l.out.live_bytes += bytes;
    l.out.raw_bytes += rec.raw_bytes;
    l.out.sealed_blocks += rec.sealed ? 1u : 0u;
    ++l.out.blocks_per_codec[rec.codec_id];
    l.chunks.insert(key.chunk_hash);
    l.layers.insert(key.layer);
  }
  r.chunks = chunks.size();
  // Every byte of a segment after its header block that no live record holds: superseded and
  // erased records, tombstones, and the unwritten tail (as InspectDir counts them).
  const uint64_t headers = r.segments * kSegmentHeaderBytes;
  r.dead_bytes = r.disk_bytes - std::min(r.disk_bytes, headers + r.live_bytes);
  for (auto& [digest, l] : layouts) {
    l.out.id = ToHex(digest).substr(0, kLayoutIdHexDigits);
    l.out.chunks = l.chunks.size();
    l.out.layers = static_cast<uint32_t>(l.layers.size());
    r.layouts.push_back(std::move(l.out));
  }
  std::stable_sort(r.layouts.begin(), r.layouts.end(),
                   [](const StatsLayout& x, const StatsLayout& y) { return x.blocks > y.blocks; });
  return r;
}

}  // namespace kvtier::ssd
