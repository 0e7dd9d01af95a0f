// See ssd_tools.h.
#include "tiers/ssd_tools.h"

#include <unordered_map>

#include "tiers/ssd_recovery.h"

namespace kvtier::ssd {

Result<InspectReport> InspectDir(Env* env, const std::vector<std::string>& dirs) {
  KV_ASSIGN_OR_RETURN(DirListing listing, ListSegments(env, dirs, DirectIo::kOff));
  InspectReport report;
  report.other_files = listing.other_files;
  Result<Checkpoint> ck = ReadCheckpointFile(env, dirs.at(0) + "/" + kCheckpointName);
  report.checkpoint_present = ck.ok() || !ck.status().IsNotFound();
  report.checkpoint_valid = ck.ok();
  struct Newest {
    uint64_t sequence = 0;
    uint64_t record_bytes = 0;
    bool tombstone = false;
  };
  std::unordered_map<BlockKey, Newest> newest;
  uint64_t total_bytes = 0;
  for (SegmentFile& seg : listing.segments) {
    InspectSegment is{.path = seg.path, .segment_id = seg.segment_id, .bad = !seg.bad.ok()};
    if (seg.file != nullptr) is.file_bytes = seg.file->Size().value_or(0);
    if (seg.bad.ok()) {
      KV_ASSIGN_OR_RETURN(SegmentScan scan,
                          ScanSegment(*seg.file, seg.segment_id, seg.segment_bytes,
                                      kSegmentHeaderBytes, [&](const RecordHeader& h, uint64_t) {
                                        const uint64_t rb = RecordBytesForPayload(h.payload_bytes);
                                        ++is.records;
                                        is.tombstones += h.tombstone() ? 1u : 0u;
                                        total_bytes += rb;
                                        ++report.records_per_layout[ToHex(h.layout_digest)];
                                        Newest& n = newest[h.key];
                                        if (h.sequence > n.sequence)
                                          n = {h.sequence, rb, h.tombstone()};
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
    if (n.tombstone) continue;
    ++report.blocks;
    report.live_bytes += n.record_bytes;
  }
  report.dead_bytes += total_bytes - report.live_bytes;
  return report;
}

Result<std::vector<CorruptRecord>> VerifyDir(Env* env, const std::vector<std::string>& dirs) {
  KV_ASSIGN_OR_RETURN(DirListing listing, ListSegments(env, dirs, DirectIo::kOff));
  std::vector<CorruptRecord> out;
  for (SegmentFile& seg : listing.segments) {
    if (!seg.bad.ok()) {
      out.push_back({seg.path, seg.segment_id, 0, seg.bad.ToString()});
      continue;
    }
    KV_ASSIGN_OR_RETURN(SegmentScan scan,
                        ScanSegment(*seg.file, seg.segment_id, seg.segment_bytes,
                                    kSegmentHeaderBytes, [](const RecordHeader&, uint64_t) {}));
    if (scan.stop == ScanStop::kInvalid) {
      out.push_back({seg.path, seg.segment_id, scan.end_offset, scan.reason.ToString()});
    }
  }
  return out;
}

}  // namespace kvtier::ssd
