// `kvtier bench engine`: the engine's own data path, in three parts.
//
// 1. Host tier throughput: Store and then Lookup + Load of --put-bytes of KV blocks through an
//    engine with a host tier only, beside memcpy of the same bytes between the same buffers in the
//    same run (the machine's limit for moving them once); medians over --repeat rounds, each with
//    a fresh engine, and the ratios engine / memcpy.
// 2. A multi-turn chat trace: --sessions conversations of --turns turns, each turn's prompt the
//    previous one plus --turn-tokens new tokens (--first-tokens for the first), replayed round
//    robin through an engine with a small host tier (--trace-host-bytes, so blocks spill) over an
//    SSD tier in a scratch directory (and a Redis tier with --redis). Per request: Lookup, Load of
//    the cached prefix, Store of the new chunks. Reported: hit ratio per tier (blocks served by
//    the tier / blocks of the requests' full chunks), bytes per link (block bytes, decoded),
//    evictions, the SSD tier's record bytes and the copies a block took before the disk (the
//    encode, plus the share the SSD tier copied into its own buffers), and medians of the
//    per-request Load and Store times.
// 3. After a restart: the trace's engine is flushed and closed; for each session, an engine
//    reopened on the same SSD tier pins the session's first turn (whole chunks; every block only
//    on the SSD, so Pin promotes it into the host tier), then another reopened engine loads the
//    same blocks. Reported: medians over sessions of the Pin and Load times, and of their ratio
//    (Pin reads what Load reads, into host slots instead of the caller's buffers). Where the SSD
//    reclaimed a session's oldest chunks, Pin pins the leading ones it finds and Load reads
//    those; a session with none is left out.
// 4. Store to the SSD: each session's first turn, with fresh bytes, stored write-through (the
//    Store's Wait returns once every block is on the SSD) by an engine on an empty SSD
//    directory. Reported: the median Store time and rate over sessions, and the copies a block
//    took before the disk (TierStats::staged_write_bytes over write_bytes, plus the encode).
//
// With --server PATH, part 1 also runs through the kvtier service on that socket (kvtier serve),
// a service round after each in-process round: the same Store and Lookup + Load from buffers in the connection's shared staging
// (zero-copy, as the vLLM connector's gathers and scatters use it), reported beside the
// in-process engine's as service_put/get_bytes_per_s and their ratios to it. The layout is then
// the service's.
//
// Scratch data (the SSD tier) goes in a fresh subdirectory of --dir ($TMPDIR by default), removed
// at the end and on Ctrl-C. Progress on stderr; the report on stdout (text or --json).
//
// Thread safety: the CLI's main thread only. Ownership: flags are bound to this object's members.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/kv_layout.h"
#include "core/logger.h"
#include "kvtier/result.h"

namespace kvtier::cli {

struct BenchEngineReport;  // bench_engine.cc
struct ServiceBench;       // bench_engine.cc

class BenchEngine {
 public:
  explicit BenchEngine(CLI::App* bench);
  ~BenchEngine();
  bool parsed() const { return app_->parsed(); }
  // Aborted after Ctrl-C (the caller exits with kExitInterrupted).
  Status Run();

 private:
  Status RunPutGet(BenchEngineReport* report);
  Status ConnectService(BenchEngineReport* report);
  Result<uint64_t> TraceHostBytes(const KvLayout& layout) const;
  Status RunTrace(const std::string& scratch, BenchEngineReport* report);
  Status RunPin(const std::string& scratch, BenchEngineReport* report);
  Status RunStoreThrough(const std::string& scratch, BenchEngineReport* report);

  CLI::App* app_;
  uint32_t layers_ = 4, kv_heads_ = 8, head_dim_ = 128, block_tokens_ = 256;
  std::string put_text_ = "256MiB", trace_host_text_, ssd_text_ = "4GiB", dir_;
  uint32_t repeat_ = 5, sessions_ = 4, turns_ = 4, first_tokens_ = 2048, turn_tokens_ = 1024;
  std::string redis_, key_file_, server_;
  uint64_t seed_ = 1;
  bool json_ = false;
  std::unique_ptr<ServiceBench> service_;  // --server
  std::unique_ptr<Logger> logger_;
};

}  // namespace kvtier::cli
