// Goal: show that a SIGKILL at any moment never costs the Engine a block whose durability it
// acknowledged, and never makes it serve a damaged block, while a mixed workload keeps the host
// tier evicting (dirty write-back), the SSD tier reclaiming segments and checkpointing.
//
// Method: each trial forks a child that opens a real Engine (host tier of 32 blocks, one SSD
// directory of 4 segments of 1 MiB, kPerBatch sync, a checkpoint every 25 ms), write-through and
// write-back in alternating runs of 5 trials, and runs threads (two; one for write-back, see
// ChildPlan) of random Stores, Loads, Lookups, Prefetches and Flushes (write-back trials killed at
// a random moment: a 64 MiB SSD and no Flush, so that only the age limit acknowledges their
// Stores; see ChildPlan). Every block's bytes are a function of (sequence, chunk, layer). The child
// reports through a pipe each Store it attempts and each Store whose durability was promised
// (docs/engine.md): write-through when StoreHandle::Wait returned OK, write-back when a Flush that
// began after the Store's Wait returned OK, or when the write-back age limit (kAgeMs,
// EngineOptions::writeback_age_ms_max) plus the cleaner's period (kCleanerAgePollMsMax) has passed
// since the Store's Wait returned without a failed SSD write meanwhile and the SSD tier's
// write-back horizon (TierStats::writeback_horizon_us) has passed the Store (docs/reliability.md,
// "Write-back age limit": no Flush needed; a Store whose age passed first is counted as late,
// since whether the cleaner keeps up depends on how busy the machine is). The parent SIGKILLs the child at a random moment, or
// right when the cache directory shows a segment reclaim
// (a segment file deleted), a checkpoint being written or installed (index.ckpt.tmp.<hex> created,
// renamed over index.ckpt) or a segment roll (watched with inotify), then reopens the cache with a
// new Engine and checks every sequence the child attempted: whatever Lookup reports is loaded and
// must be byte-identical, and every acknowledged chunk must be found unless reclaim may have
// evicted it. Reclaim deletes the oldest segment, segment ids only grow and there is one directory,
// so a block whose Store began when the newest segment on disk was c lives in a segment >= c-1
// (c-1: a roll in progress), and such a block can have been reclaimed only if the smallest segment
// left after the crash is above c-1. The cache directory is kept across 10 trials (recovery after
// recovery), then replaced.
//
// Usage: engine_crash_trial [--trials N] [--seed S] [--dir PATH] [--flush-race on|off]
// (defaults: 20 trials, a random seed, $TMPDIR, off: see ChildPlan).
// Prints the seed first and a summary line last; exits 0 only when nothing acknowledged was lost,
// nothing wrong was served, and the trials really acknowledged and verified blocks, killed during
// a checkpoint and saw reclaim evict segments (so a pass cannot be vacuous).
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kBlockTokens = 32;
constexpr uint32_t kChunksMax = 4;
constexpr uint32_t kHostBlocks = 32;
constexpr uint32_t kTrialsPerDir = 10;
constexpr uint32_t kSeqsPerTrial = 1u << 16;  // Sequence ids: trial * kSeqsPerTrial + n.
constexpr int kChildSecondsMax = 20;          // A child still running then gives up (exit 5).
// The write-back trials' age limit: short, so that many Stores reach it before the kill.
constexpr uint32_t kAgeMs = 100;

KvLayout Layout() {
  return {.layers = kLayers,
          .kv_heads = 4,
          .head_dim = 64,
          .dtype = DType::kF16,
          .block_tokens = kBlockTokens};
}
const uint64_t kBlockBytes = Layout().BlockBytes();  // 32 KiB.

// `ssd_capacity_bytes`: 4 MiB in the child (about 110 blocks: reclaim runs all the time); the
// parent checks with room to spare, so that its own engine reclaims nothing while it looks.
// `cleaner`: the background write-back thread (EngineOptions::writeback_dirty_fraction, and the
// age limit kAgeMs; without it an hour, which no trial reaches).
EngineOptions Options(const std::string& dir, WritePolicy policy, bool cleaner,
                      uint64_t ssd_capacity_bytes = 4 * kMiB) {
  EngineOptions o;
  o.layout = Layout();
  o.model = {.name = "crash-trial"};
  o.host = {.capacity_bytes = kHostBlocks * kBlockBytes};
  o.device_backend = DeviceBackend::kCpu;
  SsdTierOptions ssd;
  ssd.dirs = {dir};
  ssd.segment_bytes = 1 * kMiB;
  ssd.capacity_bytes = ssd_capacity_bytes;
  ssd.sync = SsdSyncMode::kPerBatch;
  ssd.checkpoint_interval_ms = 25;
  ssd.staging_buffer_bytes = 256 * kKiB;
  ssd.staging_buffers = 8;
  o.tiers.Emplace(kSsdTierName, ssd);
  o.write_policy = policy;
  o.writeback_dirty_fraction = cleaner ? 0.5 : 1.0;
  o.writeback_age_ms_max = cleaner ? kAgeMs : kWritebackAgeMsMax;
  return o;
}

// The tokens of a sequence: the first token is the sequence id, so no two sequences share a chunk.
std::vector<uint32_t> Tokens(uint32_t seq, uint32_t chunks) {
  std::vector<uint32_t> t(size_t{chunks} * kBlockTokens);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = i == 0 ? seq : seq * 2654435761u + static_cast<uint32_t>(i);
  }
  return t;
}

// The bytes of block (seq, chunk, layer): a splitmix64 stream seeded by the three.
std::vector<std::byte> Payload(uint32_t seq, uint32_t chunk, uint32_t layer) {
  std::vector<std::byte> out(kBlockBytes);
  uint64_t x = (uint64_t{seq} << 32) ^ (uint64_t{chunk} << 8) ^ layer;
  for (size_t i = 0; i < out.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(&out[i], &z, 8);
  }
  return out;
}

// Whether a segment file starts with a segment header's magic ("KVSG", docs/ssd_format.md §2). A
// kill while a segment is being created leaves a bad one (empty, or no header yet): recovery never
// reads it and leaves it in place, so it says nothing about which segments reclaim removed.
bool HasSegmentHeader(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[4] = {};
  const bool ok = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "KVSG", 4) == 0;
  std::fclose(f);
  return ok;
}

// The largest (or smallest) id among the directory's "seg-<16 hex>.kvs" files (docs/ssd_format.md
// §1) that have a header; `none` when there is none.
uint64_t SegmentIdBound(const std::string& dir, bool largest, uint64_t none) {
  uint64_t bound = none;
  bool found = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 24 || name.rfind("seg-", 0) != 0 || name.substr(20) != ".kvs") continue;
    if (!largest && !HasSegmentHeader(entry.path())) continue;
    const uint64_t id = std::strtoull(name.substr(4, 16).c_str(), nullptr, 16);
    if (!found || (largest ? id > bound : id < bound)) bound = id;
    found = true;
  }
  return bound;
}

// ---- Child ------------------------------------------------------------------------------------

// The SSD tier's statistics: write_failures (blocks that should have reached it and did not) and
// writeback_horizon_us (every Store that completed before it is on the SSD).
TierStats SsdStats(Engine& engine) {
  for (const TierStats& t : engine.Stats().tiers) {
    if (t.kind == TierKind::kSsd) return t;
  }
  return {};
}
uint64_t SsdWriteFailures(Engine& engine) { return SsdStats(engine).write_failures; }

// What a trial's child runs. Write-back trials run two threads and the cleaner, so a Flush often
// finds blocks that another thread (the cleaner, an eviction, another Flush) is writing and must
// wait for them (docs/reliability.md); --flush-race off runs them with one thread and no cleaner.
struct ChildPlan {
  WritePolicy policy = WritePolicy::kWriteThrough;
  uint32_t threads = 2;
  bool cleaner = true;
  // Write-back trials killed by the timer get room to spare (no reclaim, no failed write) and
  // never Flush, so that their Stores are acknowledged by the age limit alone and the parent
  // checks what it promised; the others keep the tiny SSD whose reclaim runs all the time.
  uint64_t ssd_capacity_bytes = 4 * kMiB;
  bool flushes = true;
};

// kAgeAck: a write-back Store acknowledged by the age limit (counted apart in the summary).
// kAgeLate: one whose age limit passed before the SSD tier's write-back horizon did (the SSD or
// the CPU did not keep up); it is acknowledged (kAgeAck) once the horizon passes it.
enum class RecordType : uint32_t { kAttempt = 1, kAck = 2, kAgeAck = 3, kAgeLate = 4 };

// One pipe message (24 bytes: below PIPE_BUF, so the two threads' writes never interleave).
struct Record {
  RecordType type;
  uint32_t chunks;
  uint64_t seq;
  uint64_t newest_segment;  // Attempt only: the newest segment on disk when the Store began.
};

class ChildWorkload {
 public:
  ChildWorkload(Engine* engine, Namespace ns, std::string dir, uint32_t trial, int fd)
      : engine_(engine), ns_(ns), dir_(std::move(dir)), trial_(trial), fd_(fd) {}

  // Runs random operations until killed (or kChildSecondsMax). Exits 3 on wrong bytes.
  void Run(uint64_t seed, uint32_t threads, bool flushes);

 private:
  void Send(const Record& r) {
    if (::write(fd_, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) _exit(4);
  }
  bool DoStore(uint32_t seq, uint32_t chunks);
  void DoLoad(uint32_t seq, uint32_t chunks);

  Engine* engine_;
  Namespace ns_;
  std::string dir_;
  uint32_t trial_;
  int fd_;
  std::atomic<uint32_t> next_seq_{0};
  std::atomic<bool> reported_error_{false};
};

bool ChildWorkload::DoStore(uint32_t seq, uint32_t chunks) {
  Send({RecordType::kAttempt, chunks, seq, SegmentIdBound(dir_, /*largest=*/true, 0)});
  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::span<const std::byte>> src;
  for (uint32_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < kLayers; ++l) blocks.push_back(Payload(seq, c, l));
  }
  for (const auto& b : blocks) src.emplace_back(b);
  const std::vector<uint32_t> tokens = Tokens(seq, chunks);
  Result<std::unique_ptr<StoreHandle>> h = engine_->Store(ns_, tokens, src);
  const Status s = h.ok() ? (*h)->Wait() : h.status();
  // Busy (every memory slot in use) is routine with a tiny host tier; say what else failed, once.
  if (!s.ok() && !s.IsBusy() && !reported_error_.exchange(true)) {
    std::fprintf(stderr, "child: first store error: %s\n", s.ToString().c_str());
  }
  return s.ok();
}

void ChildWorkload::DoLoad(uint32_t seq, uint32_t chunks) {
  const std::vector<uint32_t> tokens = Tokens(seq, chunks);
  Result<LookupResult> found = engine_->Lookup(ns_, tokens);
  if (!found.ok() || found->matched_tokens == 0) return;
  const uint32_t matched = static_cast<uint32_t>(found->matched_tokens / kBlockTokens);
  std::vector<std::vector<std::byte>> bufs(size_t{matched} * kLayers,
                                           std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  Result<std::unique_ptr<LoadHandle>> h = engine_->Load(ns_, tokens, dst);
  if (!h.ok()) return;
  for (uint32_t l = 0; l < kLayers; ++l) {
    if (!(*h)->WaitLayer(l).ok()) continue;  // Evicted meanwhile or refused: a miss.
    for (uint32_t c = 0; c < matched; ++c) {
      if (bufs[size_t{c} * kLayers + l] != Payload(seq, c, l)) {
        std::fprintf(stderr, "child: wrong bytes for seq %u chunk %u layer %u\n", seq, c, l);
        _exit(3);
      }
    }
  }
}

void ChildWorkload::Run(uint64_t seed, uint32_t threads, bool flushes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kChildSecondsMax);
  const bool write_back = engine_->options().write_policy == WritePolicy::kWriteBack;
  const bool aged = write_back && engine_->options().writeback_age_ms_max == kAgeMs;
  const auto age = std::chrono::milliseconds(kAgeMs + kCleanerAgePollMsMax);
  auto thread_body = [&](uint64_t thread_seed) {
    std::mt19937_64 rng(thread_seed);
    std::vector<std::pair<uint32_t, uint32_t>> mine;       // (seq, chunks) stored OK.
    std::vector<std::pair<uint32_t, uint32_t>> unflushed;  // Write-back: not yet acknowledged.
    // Write-back with the age limit, oldest first.
    struct Aging {
      std::chrono::steady_clock::time_point done;  // When Wait returned.
      uint64_t done_us;                            // The same on the engine's clock.
      uint32_t seq, chunks;
      uint64_t write_failures;  // The SSD's then.
      bool late;
    };
    std::deque<Aging> aging;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto now = std::chrono::steady_clock::now();
      while (!aging.empty() && now - aging.front().done >= age) {
        // The promise holds while the SSD takes the writes: a write that failed since (a full
        // cache stalled on reclaim) may be this Store's, which is then not acknowledged. It also
        // holds only while the SSD and the CPU keep up (docs/reliability.md), which a shared
        // machine does not always give: the engine's own write-back horizon says when it did.
        Aging& a = aging.front();
        const TierStats ssd = SsdStats(*engine_);
        if (ssd.write_failures == a.write_failures && ssd.writeback_horizon_us <= a.done_us) {
          if (!a.late) Send({RecordType::kAgeLate, a.chunks, a.seq, 0});
          a.late = true;
          break;  // Every later Store is behind the horizon too.
        }
        if (ssd.write_failures == a.write_failures) {
          Send({RecordType::kAgeAck, a.chunks, a.seq, 0});
        }
        aging.pop_front();
      }
      const uint32_t op = static_cast<uint32_t>(rng() % 16);
      if (op < 9 || mine.empty()) {
        const uint32_t n = next_seq_.fetch_add(1);
        if (n >= kSeqsPerTrial) break;
        const uint32_t seq = trial_ * kSeqsPerTrial + n;
        const uint32_t chunks = 1 + static_cast<uint32_t>(rng() % kChunksMax);
        if (!DoStore(seq, chunks)) continue;
        mine.emplace_back(seq, chunks);
        if (!write_back) Send({RecordType::kAck, chunks, seq, 0});
        if (write_back) unflushed.emplace_back(seq, chunks);
        if (aged) {
          aging.push_back({std::chrono::steady_clock::now(), SystemClock()->NowMicros(), seq,
                           chunks, SsdWriteFailures(*engine_), false});
        }
      } else if (op < 13 || (op >= 14 && !flushes)) {  // No Flush: a Load in its place.
        const auto& [seq, chunks] = mine[rng() % mine.size()];
        DoLoad(seq, chunks);
      } else if (op < 14) {
        const auto& [seq, chunks] = mine[rng() % mine.size()];
        engine_->Prefetch(ns_, Tokens(seq, chunks)).IgnoreError();  // A hint; errors are fine.
      } else {
        // Everything this thread stored before the call is durable once Flush returns OK.
        const std::vector<std::pair<uint32_t, uint32_t>> covered = std::move(unflushed);
        unflushed.clear();
        const Status flushed = engine_->Flush();
        if (!flushed.ok() && !reported_error_.exchange(true)) {
          std::fprintf(stderr, "child: first flush error: %s\n", flushed.ToString().c_str());
        }
        if (!flushed.ok()) continue;  // Not acknowledged; a later Flush may be.
        for (const auto& [seq, chunks] : covered) Send({RecordType::kAck, chunks, seq, 0});
      }
    }
  };
  std::vector<std::thread> workers;
  for (uint32_t i = 0; i < threads; ++i) workers.emplace_back(thread_body, seed * 4 + i);
  for (std::thread& w : workers) w.join();
  _exit(5);  // Never killed: the parent counts this as a failed trial.
}

[[noreturn]] void RunChild(const std::string& dir, const ChildPlan& plan, uint32_t trial,
                           uint64_t seed, int fd) {
  Result<std::unique_ptr<Engine>> engine =
      Engine::Open(Options(dir, plan.policy, plan.cleaner, plan.ssd_capacity_bytes));
  if (!engine.ok()) {
    std::fprintf(stderr, "child: open: %s\n", engine.status().ToString().c_str());
    _exit(2);
  }
  Result<Namespace> ns = (*engine)->MakeNamespace("crash-trial");
  if (!ns.ok()) _exit(2);
  ChildWorkload(engine->get(), *ns, dir, trial, fd).Run(seed, plan.threads, plan.flushes);
  _exit(5);
}

// ---- Parent -----------------------------------------------------------------------------------

// When the parent kills the child: after a random delay, or at the k-th directory event of a kind.
enum class KillAt : uint8_t { kTimer, kReclaim, kCheckpointWrite, kCheckpointInstall, kRoll };
constexpr int kKillKinds = 5;
const char* KillAtName(KillAt k) {
  switch (k) {
    case KillAt::kTimer: return "timer";
    case KillAt::kReclaim: return "reclaim";
    case KillAt::kCheckpointWrite: return "checkpoint-write";
    case KillAt::kCheckpointInstall: return "checkpoint-install";
    case KillAt::kRoll: return "segment-roll";
  }
  return "?";
}

// Whether an inotify event is one that `kind` kills at.
bool Matches(KillAt kind, const inotify_event& e) {
  const std::string name = e.len > 0 ? e.name : "";
  const bool segment = name.rfind("seg-", 0) == 0;
  switch (kind) {
    case KillAt::kTimer: return false;
    case KillAt::kReclaim: return segment && (e.mask & IN_DELETE) != 0;
    case KillAt::kCheckpointWrite:  // "index.ckpt.tmp.<random hex>".
      return name.rfind("index.ckpt.tmp", 0) == 0 && (e.mask & IN_CREATE) != 0;
    case KillAt::kCheckpointInstall: return name == "index.ckpt" && (e.mask & IN_MOVED_TO) != 0;
    case KillAt::kRoll: return segment && (e.mask & IN_CREATE) != 0;
  }
  return false;
}

struct SeqInfo {
  uint32_t chunks = 0;
  uint64_t newest_segment = 0;
  bool acked = false;
  uint32_t trial = 0;
  bool lost = false;  // Already counted as lost (each lost block is counted once).
};

struct Totals {
  uint64_t acked_blocks = 0, verified = 0, evicted = 0, lost = 0, wrong = 0, refused = 0;
  uint64_t unacked_served = 0, failed_trials = 0, reclaimed_trials = 0;
  uint64_t age_acked_blocks = 0;  // Acknowledged by the write-back age limit (before a Flush).
  // Stores whose age limit passed before the write-back horizon did (kAgeLate): measured, never
  // a failure, since it depends on how busy the machine is.
  uint64_t age_late_stores = 0;
  uint64_t idle_trials = 0;  // Trials whose child acknowledged nothing (killed early, or stalled).
  uint64_t event_kills[kKillKinds] = {};
  uint64_t fallback_kills = 0;
};

// Reads the child's records until the kill condition, kills it, reaps it and drains the pipe.
// Returns false (after saying why) when the child died of anything but our SIGKILL.
bool WatchAndKill(pid_t pid, int pipe_fd, int notify_fd, KillAt kind, uint32_t event_index,
                  uint32_t delay_ms, std::vector<Record>* records, bool* fell_back) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(kind == KillAt::kTimer ? delay_ms : 5000);
  std::vector<char> buf;
  uint32_t seen = 0;
  bool pipe_open = true;
  *fell_back = kind != KillAt::kTimer;
  while (pipe_open) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd fds[2] = {{pipe_fd, POLLIN, 0}, {notify_fd, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    if (fds[1].revents & POLLIN) {
      alignas(inotify_event) char ev[4096];
      const ssize_t n = ::read(notify_fd, ev, sizeof(ev));
      bool hit = false;
      for (ssize_t off = 0; off < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(ev + off);
        if (Matches(kind, *e) && ++seen == event_index) hit = true;
        off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
      if (hit) {
        *fell_back = false;
        break;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      char chunk[4096];
      const ssize_t n = ::read(pipe_fd, chunk, sizeof(chunk));
      if (n <= 0) pipe_open = false;
      if (n > 0) buf.insert(buf.end(), chunk, chunk + n);
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  char chunk[4096];
  for (ssize_t n; (n = ::read(pipe_fd, chunk, sizeof(chunk))) > 0;) {
    buf.insert(buf.end(), chunk, chunk + n);
  }
  for (size_t off = 0; off + sizeof(Record) <= buf.size(); off += sizeof(Record)) {
    Record r;
    std::memcpy(&r, &buf[off], sizeof(r));
    records->push_back(r);
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return true;
  std::printf("  child did not die of our SIGKILL: %s %d\n",
              WIFEXITED(status) ? "exit status" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return false;
}

// Loads what Lookup reports of one sequence and compares it; returns the chunks found intact.
// `wrong` counts blocks that loaded with other bytes (never allowed).
uint32_t CheckSequence(Engine& engine, const Namespace& ns, uint32_t seq, uint32_t chunks,
                       uint64_t* wrong) {
  const std::vector<uint32_t> tokens = Tokens(seq, chunks);
  Result<LookupResult> found = engine.Lookup(ns, tokens);
  if (!found.ok() || found->matched_tokens == 0) return 0;
  const uint32_t matched = static_cast<uint32_t>(found->matched_tokens / kBlockTokens);
  std::vector<std::vector<std::byte>> bufs(size_t{matched} * kLayers,
                                           std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> dst(bufs.begin(), bufs.end());
  Result<std::unique_ptr<LoadHandle>> h = engine.Load(ns, tokens, dst);
  if (!h.ok()) return 0;
  uint32_t intact = matched;
  for (uint32_t l = 0; l < kLayers; ++l) {
    const Status s = (*h)->WaitLayer(l);
    if (!s.ok()) {
      std::printf("  seq %u layer %u: %s\n", seq, l, s.ToString().c_str());
      intact = 0;  // A refused or vanished block: a miss, never wrong data.
      continue;
    }
    for (uint32_t c = 0; c < matched; ++c) {
      if (bufs[size_t{c} * kLayers + l] == Payload(seq, c, l)) continue;
      std::printf("  WRONG bytes served: seq %u chunk %u layer %u\n", seq, c, l);
      ++*wrong;
      if (c < intact) intact = c;
    }
  }
  return intact;
}

// Reopens the cache with a new Engine and returns, per sequence of the directory's trials, how
// many leading chunks loaded intact; `t` counts wrong and refused blocks.
bool Reopen(const std::string& dir, const std::map<uint32_t, SeqInfo>& seqs,
            std::map<uint32_t, uint32_t>* intact, Totals* t) {
  Result<std::unique_ptr<Engine>> engine =
      Engine::Open(Options(dir, WritePolicy::kWriteThrough, /*cleaner=*/true, 1 * kGiB));
  if (!engine.ok()) {
    std::printf("  reopen failed: %s\n", engine.status().ToString().c_str());
    return false;
  }
  Result<Namespace> ns = (*engine)->MakeNamespace("crash-trial");
  if (!ns.ok()) return false;
  for (const auto& [seq, info] : seqs) {
    (*intact)[seq] = CheckSequence(**engine, *ns, seq, info.chunks, &t->wrong);
  }
  t->refused += (*engine)->Stats().corrupt_blocks;
  return true;
}

// Checks every sequence of the directory's trials (see the file comment).
bool Verify(const std::string& dir, uint32_t trial, std::map<uint32_t, SeqInfo>& seqs, Totals* t) {
  std::map<uint32_t, uint32_t> intact;
  if (!Reopen(dir, seqs, &intact, t)) return false;
  // Read once the checking engine is closed: had anything reclaimed a segment meanwhile, the
  // bound only grows, which only makes fewer blocks count as must-survive.
  const uint64_t oldest = SegmentIdBound(dir, /*largest=*/false, 0);
  if (oldest > 1) ++t->reclaimed_trials;
  for (auto& [seq, info] : seqs) {
    const uint32_t found = intact[seq];
    if (!info.acked) {
      if (info.trial == trial) t->unacked_served += uint64_t{found} * kLayers;
      continue;
    }
    // The block lives in a segment >= newest_segment - 1; reclaim removed only ids < oldest.
    const bool must_survive = info.newest_segment >= oldest + 1;
    const uint64_t missing = uint64_t{info.chunks - found} * kLayers;
    if (must_survive && missing > 0 && !info.lost) {
      info.lost = true;
      std::printf("  LOST: seq %u (trial %u) %u of %u chunks found; newest segment at its Store "
                  "%llu, oldest segment after the crash %llu\n",
                  seq, info.trial, found, info.chunks,
                  static_cast<unsigned long long>(info.newest_segment),
                  static_cast<unsigned long long>(oldest));
      t->lost += missing;
    }
    if (info.trial != trial) continue;
    t->verified += uint64_t{found} * kLayers;
    if (!must_survive) t->evicted += missing;
  }
  return true;
}

struct Args {
  uint32_t trials = 20;
  uint64_t seed = 0;
  bool seeded = false;
  bool flush_race = true;
  std::string dir;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--trials") {
      a->trials = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    } else if (flag == "--seed") {
      a->seed = std::strtoull(argv[i + 1], nullptr, 10);
      a->seeded = true;
    } else if (flag == "--dir") {
      a->dir = argv[i + 1];
    } else if (flag == "--flush-race") {
      a->flush_race = std::string(argv[i + 1]) == "on";
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && a->trials > 0 && a->trials < 60000;
}

// Forks the child for one trial, kills it and folds what it acknowledged into `seqs`.
bool RunTrial(const std::string& dir, uint32_t trial, bool flush_race, std::mt19937_64& rng,
              std::map<uint32_t, SeqInfo>* seqs, Totals* t) {
  const auto kind = static_cast<KillAt>(trial % kKillKinds);
  ChildPlan plan;
  if ((trial / kKillKinds) % 2 == 1) {
    plan = {.policy = WritePolicy::kWriteBack,
            .threads = flush_race ? 2u : 1u,
            .cleaner = flush_race};
    if (kind == KillAt::kTimer && flush_race) {
      plan.ssd_capacity_bytes = 64 * kMiB;
      plan.flushes = false;
    }
  }
  const uint32_t event_index = 1 + static_cast<uint32_t>(rng() % 3);
  const uint32_t delay_ms = 20 + static_cast<uint32_t>(rng() % 500);
  const uint64_t child_seed = rng();
  const int notify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (notify_fd < 0 || ::inotify_add_watch(notify_fd, dir.c_str(),
                                           IN_CREATE | IN_DELETE | IN_MOVED_TO) < 0) {
    std::printf("  inotify: %s\n", std::strerror(errno));
    return false;
  }
  int fds[2];
  if (::pipe(fds) != 0) return false;
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::close(fds[0]);
    RunChild(dir, plan, trial, child_seed, fds[1]);
  }
  ::close(fds[1]);
  std::vector<Record> records;
  bool fell_back = false;
  const bool killed = WatchAndKill(pid, fds[0], notify_fd, kind, event_index, delay_ms,
                                   &records, &fell_back);
  ::close(fds[0]);
  ::close(notify_fd);
  uint64_t acked = 0;
  for (const Record& r : records) {
    SeqInfo& info = (*seqs)[static_cast<uint32_t>(r.seq)];
    if (r.type == RecordType::kAttempt) info = {r.chunks, r.newest_segment, false, trial};
    if (r.type == RecordType::kAgeLate) ++t->age_late_stores;
    if ((r.type == RecordType::kAck || r.type == RecordType::kAgeAck) && !info.acked) {
      info.acked = true;
      acked += uint64_t{r.chunks} * kLayers;
      if (r.type == RecordType::kAgeAck) t->age_acked_blocks += uint64_t{r.chunks} * kLayers;
    }
  }
  t->acked_blocks += acked;
  if (acked == 0) ++t->idle_trials;
  if (fell_back) ++t->fallback_kills;
  if (!fell_back) ++t->event_kills[static_cast<int>(kind)];
  std::printf("trial %u: %s, kill at %s%s, acknowledged blocks %llu\n", trial,
              plan.policy == WritePolicy::kWriteBack ? "write-back" : "write-through",
              KillAtName(kind), fell_back ? " (no event in time: killed at 5 s)" : "",
              static_cast<unsigned long long>(acked));
  return killed;
}

int Main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: engine_crash_trial [--trials N] [--seed S] [--dir PATH] "
                         "[--flush-race on|off]\n");
    return 2;
  }
  if (!args.seeded) args.seed = std::random_device{}();
  std::printf("engine_crash_trial seed=%llu trials=%u\n",
              static_cast<unsigned long long>(args.seed), args.trials);
  std::mt19937_64 rng(args.seed);
  if (!args.dir.empty()) std::filesystem::create_directories(args.dir);
  Result<ScopedTempDir> root = ScopedTempDir::Create(args.dir);
  if (!root.ok()) {
    std::fprintf(stderr, "%s\n", root.status().ToString().c_str());
    return 2;
  }
  Totals t;
  std::map<uint32_t, SeqInfo> seqs;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t trial = 0; trial < args.trials; ++trial) {
    const std::string dir = root->Join("cache-" + std::to_string(trial / kTrialsPerDir));
    if (trial % kTrialsPerDir == 0) {
      seqs.clear();
      std::filesystem::create_directories(dir);
    }
    const uint64_t before = t.lost + t.wrong;
    const bool ran = RunTrial(dir, trial, args.flush_race, rng, &seqs, &t);
    // The state the crash left, kept for a post-mortem (kvtier inspect / verify) if this fails.
    const std::string snapshot = root->Join("crash-state");
    std::filesystem::remove_all(snapshot);
    std::filesystem::copy(dir, snapshot, std::filesystem::copy_options::recursive);
    const bool ok = ran && Verify(dir, trial, seqs, &t);
    if (!ok || t.lost + t.wrong != before) {
      if (t.failed_trials++ == 0) {
        const std::string kept = root->path() + ".failed-trial-" + std::to_string(trial);
        std::filesystem::remove_all(kept);
        std::filesystem::rename(snapshot, kept);
        std::printf("  the crash state of this first failed trial is kept in %s\n", kept.c_str());
      }
    }
    if (trial % kTrialsPerDir == kTrialsPerDir - 1) std::filesystem::remove_all(dir);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("trials=%u acknowledged=%llu verified=%llu evicted=%llu lost=%llu wrong=%llu "
              "refused=%llu unacked_served=%llu failed_trials=%llu reclaimed_trials=%llu "
              "idle_trials=%llu age_acknowledged=%llu age_late_stores=%llu "
              "kills(timer/reclaim/checkpoint-write/checkpoint-install/roll/fallback)="
              "%llu/%llu/%llu/%llu/%llu/%llu wall_s=%.1f seed=%llu\n",
              args.trials, u(t.acked_blocks), u(t.verified), u(t.evicted), u(t.lost), u(t.wrong),
              u(t.refused), u(t.unacked_served), u(t.failed_trials), u(t.reclaimed_trials),
              u(t.idle_trials), u(t.age_acked_blocks), u(t.age_late_stores),
              u(t.event_kills[0]), u(t.event_kills[1]), u(t.event_kills[2]), u(t.event_kills[3]),
              u(t.event_kills[4]), u(t.fallback_kills), wall_s, u(args.seed));
  // Kills at a reclaim are counted but not required: a directory whose reclaim is stuck (see
  // docs/reliability.md) sees none.
  // Blocks acknowledged by the age limit are counted but not required: only write-back trials
  // killed by the timer (one in ten) after the limit has passed acknowledge any, so a short run
  // may have none; scripts/crash_trials.sh's 200 trials have several.
  const bool exercised = t.acked_blocks > 0 && t.verified > 0 && t.reclaimed_trials > 0 &&
                         t.event_kills[2] + t.event_kills[3] > 0;
  if (!exercised) {
    std::printf("FAIL: the trials acknowledged or verified nothing, saw no reclaim or no kill at a "
                "checkpoint\n");
  }
  return t.failed_trials == 0 && exercised ? 0 : 1;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }

