// Library side of `kvtier inspect DIR` and `kvtier verify DIR` for the SSD tier: read-only walks
// over a cache directory's segments with the same scanner recovery uses. The CLI formats the
// results. (BenchSsd is not written yet.)
//
// Thread safety: free functions; run them on a directory no SsdTier has open for writing, or
// accept a snapshot that may miss the newest records. Ownership: the Env is borrowed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "env/env.h"
#include "kvtier/result.h"

namespace kvtier::ssd {

struct InspectSegment {
  std::string path;
  uint64_t segment_id = 0;
  uint64_t file_bytes = 0;
  uint64_t valid_bytes = 0;  // Header block plus valid records.
  uint64_t records = 0;
  uint64_t tombstones = 0;
  bool bad = false;
  std::string stop_reason;  // Why the scan ended ("" at end of file or unwritten tail).
};

struct InspectReport {
  std::vector<InspectSegment> segments;
  uint64_t blocks = 0;      // Distinct keys whose newest record is not a tombstone.
  uint64_t live_bytes = 0;  // Record bytes of those newest records.
  uint64_t dead_bytes = 0;  // Record bytes superseded, erased or unreachable past a bad record.
  // Records per layout digest (hex): a namespace view (keys are salted hashes, so the layout is
  // the only namespace a record shows).
  std::map<std::string, uint64_t> records_per_layout;
  bool checkpoint_present = false;
  bool checkpoint_valid = false;
  std::vector<std::string> other_files;
};

Result<InspectReport> InspectDir(Env* env, const std::vector<std::string>& dirs);

struct CorruptRecord {
  std::string path;
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  std::string reason;
};

// Every bad segment and every segment whose scan stopped at an invalid record (a torn tail
// after a crash also shows here). An empty list means every record verified.
Result<std::vector<CorruptRecord>> VerifyDir(Env* env, const std::vector<std::string>& dirs);

}  // namespace kvtier::ssd
