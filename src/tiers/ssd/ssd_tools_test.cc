// Goal: check that InspectDir counts blocks, live and dead bytes; that StatsDir summarizes the
// live blocks by layout, codec and age and refuses a damaged cache; that VerifyDir reports every
// damaged region (going on past each, so later records are still checked) and every disagreement
// between the checkpoint and the segments; that FIFOs and directories named like cache files are
// reported, never waited on; that directories of two caches are refused, and so is a cache a
// tier holds; that RepairDir leaves a cache that verifies and from which a reopened tier reads
// every undamaged block byte for byte; that a segment named with an id outside [1, 2^63-1] is a
// bad segment the counter never wraps on, which repair moves aside; that ClearDir removes only
// kvtier's files; that
// CheckCacheDirs tells cache directories from others; that BenchSsd and BenchReopen measure a
// real tier, read every block back intact, and clean up after themselves; that they report
// progress up to the whole run and stop with Aborted, cleaned up, once cancelled; that their
// options are validated. Method: write through SsdTier, close, damage the files on disk (flipped bytes,
// truncation, zeroed blocks, garbage checkpoint, special files), run the tools, reopen the tier;
// run tiny benchmarks in a temp directory.
#include "tiers/ssd/ssd_tools.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "testing/test_util.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd_record.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

std::string Dump(const ssd::VerifyReport& r) {
  std::string out;
  for (const ssd::VerifyProblem& p : r.problems) {
    out += p.path + " " + std::to_string(p.offset_begin) + ".." + std::to_string(p.offset_end) +
           ": " + p.what + "\n";
  }
  return out;
}

constexpr size_t kPayload = 60 * 1024;  // One 64 KiB record each.
constexpr uint64_t kRecord = 65536;

SsdTierOptions SmallTier(std::vector<std::string> dirs) {
  SsdTierOptions o;
  o.dirs = std::move(dirs);
  o.segment_bytes = 1 * kMiB;  // 15 records of 64 KiB per segment.
  o.capacity_bytes = 64 * kMiB;
  return o;
}

// Writes blocks [0, count) in batches of 10 and closes cleanly (so a checkpoint is written).
void MakeCache(Env* env, const SsdTierOptions& o, uint64_t count) {
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (uint64_t i = 0; i < count; i += 10) {
    ASSERT_TRUE(ssd_test::Put(**tier, i, std::min<uint64_t>(10, count - i), kPayload).ok());
  }
  ASSERT_TRUE((*tier)->Close().ok());
}

// Segment paths of `dir`, in id order.
std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    uint64_t id = 0;
    if (ssd::ParseSegmentFileName(name, &id)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Which block (of [0, count)) each record of `path` holds, by record index.
std::vector<uint64_t> BlocksIn(const std::string& path, uint64_t count) {
  std::vector<uint64_t> out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<std::byte> header(ssd::kRecordHeaderBytes);
  for (off_t at = 4096; fd >= 0; at += static_cast<off_t>(kRecord)) {
    if (::pread(fd, header.data(), header.size(), at) != static_cast<ssize_t>(header.size())) break;
    Result<ssd::RecordHeader> h = ssd::DecodeRecordHeader(header);
    if (!h.ok()) break;
    for (uint64_t i = 0; i < count; ++i) {
      if (ssd_test::Key(i) == h->key) out.push_back(i);
    }
  }
  if (fd >= 0) ::close(fd);
  return out;
}

bool HasProblem(const ssd::VerifyReport& r, const std::string& needle) {
  return std::any_of(r.problems.begin(), r.problems.end(), [&](const ssd::VerifyProblem& p) {
    return p.what.find(needle) != std::string::npos;
  });
}

TEST(SsdToolsTest, InspectAndVerify) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  SsdTierOptions o;
  o.dirs = {dir->Join("d0")};
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 16 * kMiB;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 10, 60 * 1024).ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 1, 60 * 1024, 0, 2).ok());  // Supersedes block 0.
    ASSERT_TRUE((*tier)->Close().ok());
  }
  Result<ssd::InspectReport> r = ssd::InspectDir(env.get(), o.dirs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 10u);
  EXPECT_EQ(r->live_bytes, 10u * 65536);
  EXPECT_EQ(r->dead_bytes, 65536u);
  EXPECT_TRUE(r->checkpoint_valid);
  EXPECT_EQ(r->records_per_layout.size(), 1u);
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->problems.empty());
  EXPECT_EQ(v->records_verified, 11u);
  EXPECT_EQ(v->checkpoint_entries_verified, 10u);

  const std::string seg = r->segments.at(0).path;
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 3 * 65536 + 500, 0x01).ok());
  v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok());
  // The damaged record, and the checkpoint entry that points at it.
  ASSERT_EQ(v->problems.size(), 2u) << Dump(*v);
  EXPECT_EQ(v->problems[0].offset_begin, 4096u + 3 * 65536);
  EXPECT_EQ(v->problems[0].offset_end, 4096u + 4 * 65536);
  EXPECT_EQ(v->problems[0].path, seg);
  EXPECT_NE(v->problems[1].what.find("the record there is damaged"), std::string::npos);
  EXPECT_EQ(v->records_verified, 10u);
}

// StatsDir counts what recovery would index: the newest record of each key, by layout and codec,
// with the chunks, layers, erased keys and expired blocks among them; blocks are aged by their
// segment's creation time; live and dead bytes agree with InspectDir; nothing in the report is
// key material; a damaged cache is refused with what verify says.
TEST(SsdToolsTest, StatsSummarizesLiveBlocks) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0"), dir->Join("d1")});
  const uint64_t before_us = env->clock()->WallMicros();
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 10, kPayload).ok());           // Layout 0x42, codec 3.
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 1, kPayload, 0, 2).ok());      // Supersedes block 0.
    const BlockKey erased = ssd_test::Key(9);
    ASSERT_TRUE((*tier)->Erase(std::span(&erased, 1)).ok());
    // Another layout: two chunks of three layers each, codec 1, with a TTL of one second.
    const std::vector<std::byte> payload = ssd_test::Payload(0, 1000);
    std::vector<SsdBlockWrite> writes;
    for (uint8_t chunk = 0; chunk < 2; ++chunk) {
      for (uint32_t layer = 0; layer < 3; ++layer) {
        SsdBlockWrite w;
        w.key.chunk_hash.fill(chunk);
        w.key.layer = layer;
        w.layout_digest = ssd_test::Layout(0x17);
        w.codec_id = 1;
        w.raw_bytes = 1000;
        w.payload = payload;
        w.ttl_us = 1'000'000;
        writes.push_back(w);
      }
    }
    ASSERT_TRUE((*tier)->WriteBatchSync(writes).ok());
    ASSERT_TRUE((*tier)->Close().ok());
  }
  const uint64_t after_us = env->clock()->WallMicros();
  Result<ssd::StatsReport> r = ssd::StatsDir(env.get(), o.dirs, after_us);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 9u + 6u);
  EXPECT_EQ(r->chunks, 9u + 2u);
  EXPECT_EQ(r->erased_keys, 1u);
  EXPECT_EQ(r->expired_blocks, 0u);
  EXPECT_EQ(r->cache_id.size(), 32u);
  EXPECT_EQ(r->segment_bytes, o.segment_bytes);
  EXPECT_TRUE(r->checkpoint_present);
  EXPECT_EQ(r->raw_bytes, 9u * 2 * kPayload + 6u * 1000);
  EXPECT_EQ(r->live_bytes, 9u * kRecord + 6u * 4096);
  Result<ssd::InspectReport> inspect = ssd::InspectDir(env.get(), o.dirs);
  ASSERT_TRUE(inspect.ok());
  EXPECT_EQ(r->blocks, inspect->blocks);
  EXPECT_EQ(r->live_bytes, inspect->live_bytes);
  EXPECT_EQ(r->dead_bytes, inspect->dead_bytes);
  EXPECT_EQ(r->segments, inspect->segments.size());
  ASSERT_EQ(r->layouts.size(), 2u);
  EXPECT_EQ(r->layouts[0].id, "4242424242424242");
  EXPECT_EQ(r->layouts[0].blocks, 9u);
  EXPECT_EQ(r->layouts[0].chunks, 9u);
  EXPECT_EQ(r->layouts[0].layers, 7u);
  EXPECT_EQ(r->layouts[0].blocks_per_codec, (std::map<uint8_t, uint64_t>{{3, 9}}));
  EXPECT_EQ(r->layouts[1].id, "1717171717171717");
  EXPECT_EQ(r->layouts[1].blocks, 6u);
  EXPECT_EQ(r->layouts[1].chunks, 2u);
  EXPECT_EQ(r->layouts[1].layers, 3u);
  EXPECT_EQ(r->layouts[1].raw_bytes, 6000u);
  EXPECT_EQ(r->layouts[1].blocks_per_codec, (std::map<uint8_t, uint64_t>{{1, 6}}));
  EXPECT_EQ(r->layouts[1].sealed_blocks, 0u);
  // Sequences: 10 writes, a rewrite (11), a tombstone (12), 6 writes (13..18); block 1 is the
  // oldest live one.
  EXPECT_EQ(r->sequence_min, 2u);
  EXPECT_EQ(r->sequence_max, 18u);
  EXPECT_GE(r->oldest_segment_wall_us, before_us);
  EXPECT_LE(r->newest_segment_wall_us, after_us);
  ASSERT_EQ(r->age.size(), std::size(ssd::kStatsAgeBoundsS) + 1);
  EXPECT_EQ(r->age[0].max_age_s, 60u);
  EXPECT_EQ(r->age[0].blocks, 15u);
  EXPECT_EQ(r->age[0].live_bytes, r->live_bytes);
  EXPECT_EQ(r->age.back().max_age_s, 0u);

  // Seen 40 days later: everything is in the last bucket and the TTL'd blocks have expired.
  r = ssd::StatsDir(env.get(), o.dirs, after_us + uint64_t{40} * 86400 * 1'000'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->age[0].blocks, 0u);
  EXPECT_EQ(r->age.back().blocks, 15u);
  EXPECT_EQ(r->expired_blocks, 6u);
  // Two hours later: the "< 1 day" bucket.
  r = ssd::StatsDir(env.get(), o.dirs, after_us + uint64_t{2} * 3600 * 1'000'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->age[3].max_age_s, 86400u);
  EXPECT_EQ(r->age[3].blocks, 15u);

  // Damage: refused, naming the problem as verify does.
  const std::string seg = Segments(o.dirs[0]).at(0);
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 500, 0x01).ok());
  r = ssd::StatsDir(env.get(), o.dirs, after_us);
  ASSERT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_NE(r.status().message().find(seg + " offset 4096..69632"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("kvtier verify lists them all"), std::string::npos);
}

// A bad header is skipped by resynchronising on the next valid record header; a zeroed record is
// a region before the next valid record; both are reported once, and every record after them is
// still verified.
TEST(SsdToolsTest, VerifyGoesOnPastEveryDamagedRecord) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0")});
  MakeCache(env.get(), o, 10);
  const std::string seg = Segments(o.dirs[0]).at(0);
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 2 * kRecord + 20, 0x01).ok());  // Header of record 2.
  ASSERT_TRUE(FlipByteOfFile(seg, 4096 + 5 * kRecord + 900, 0x01).ok());  // Payload of record 5.
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 7 * kRecord);
    const std::string zeros(size_t{4096}, '\0');
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));  // Record 7's header.
  }
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->records_verified, 7u) << Dump(*v);
  std::vector<std::pair<uint64_t, uint64_t>> regions;
  for (const ssd::VerifyProblem& p : v->problems) {
    if (p.path == seg) regions.emplace_back(p.offset_begin, p.offset_end);
  }
  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {4096 + 2 * kRecord, 4096 + 3 * kRecord},
      {4096 + 5 * kRecord, 4096 + 6 * kRecord},
      {4096 + 7 * kRecord, 4096 + 8 * kRecord}};
  EXPECT_EQ(regions, want) << Dump(*v);
  // Plus the three checkpoint entries that point at them.
  EXPECT_EQ(v->problems.size(), 6u) << Dump(*v);
  EXPECT_EQ(v->checkpoint_entries_verified, 7u);
}

// Zeroed bytes longer than one resync read (1 MiB) before the next valid record: the search for
// it goes on across reads, and the records after it are counted.
TEST(SsdToolsTest, VerifyFindsRecordsAfterALongZeroedStretch) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  SsdTierOptions o = SmallTier({dir->Join("d0")});
  o.segment_bytes = 4 * kMiB;
  MakeCache(env.get(), o, 40);
  const std::string seg = Segments(o.dirs[0]).at(0);
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + kRecord);
    const std::string zeros(size_t{24 * kRecord}, '\0');  // Records 1..24.
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->records_verified, 16u) << Dump(*v);
  ASSERT_FALSE(v->problems.empty());
  EXPECT_EQ(v->problems[0].offset_begin, 4096 + kRecord);
  EXPECT_EQ(v->problems[0].offset_end, 4096 + 25 * kRecord) << Dump(*v);
  EXPECT_EQ(v->problems.size(), 25u);  // The region, and the 24 checkpoint entries in it.
}

// A segment cut mid-record (its last record header incomplete) and a garbage checkpoint used to
// pass; now the cut record and each checkpoint entry past the end are problems, and so is the
// garbage checkpoint.
TEST(SsdToolsTest, VerifyReportsTruncationAndGarbageCheckpoint) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0")});
  MakeCache(env.get(), o, 8);
  const std::string seg = Segments(o.dirs[0]).at(0);
  std::filesystem::resize_file(seg, 4096 + 5 * kRecord + 100);
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->records_verified, 5u);
  ASSERT_FALSE(v->problems.empty());
  EXPECT_EQ(v->problems[0].offset_begin, 4096 + 5 * kRecord) << Dump(*v);
  EXPECT_EQ(v->problems[0].offset_end, 4096 + 5 * kRecord + 100);
  size_t past_end = 0;
  for (const ssd::VerifyProblem& p : v->problems) {
    if (p.what.find("past the end") != std::string::npos) ++past_end;
  }
  EXPECT_EQ(past_end, 3u) << Dump(*v);  // Records 5, 6 and 7.
  EXPECT_TRUE(HasProblem(*v, "scan_from")) << Dump(*v);  // It was the old end of the file.
  EXPECT_EQ(v->problems.size(), 5u) << Dump(*v);

  std::ofstream(o.dirs[0] + "/index.ckpt", std::ios::trunc) << "not a checkpoint at all";
  v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->checkpoint_present);
  EXPECT_FALSE(v->checkpoint_valid);
  EXPECT_TRUE(HasProblem(*v, "checkpoint invalid")) << Dump(*v);
}

// A FIFO or a directory named like a segment or like the checkpoint is reported and skipped;
// opening the FIFO blocking would hang the tool.
TEST(SsdToolsTest, SpecialFilesAreReportedNotOpened) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0")});
  MakeCache(env.get(), o, 3);
  const std::string d0 = o.dirs[0];
  ASSERT_EQ(::mkfifo((d0 + "/" + ssd::SegmentFileName(200)).c_str(), 0600), 0);
  ASSERT_EQ(::mkdir((d0 + "/" + ssd::SegmentFileName(201)).c_str(), 0700), 0);
  ASSERT_EQ(::unlink((d0 + "/index.ckpt").c_str()), 0);
  ASSERT_EQ(::mkfifo((d0 + "/index.ckpt").c_str(), 0600), 0);

  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(HasProblem(*v, "not a regular file (a FIFO)")) << Dump(*v);
  EXPECT_TRUE(HasProblem(*v, "not a regular file (a directory)")) << Dump(*v);
  EXPECT_EQ(v->problems.size(), 3u) << Dump(*v);
  EXPECT_EQ(v->records_verified, 3u);
  Result<ssd::InspectReport> r = ssd::InspectDir(env.get(), o.dirs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 3u);
  EXPECT_FALSE(r->checkpoint_valid);

  Result<ssd::RepairReport> rep = ssd::RepairDir(env.get(), o.dirs);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->after.problems.empty()) << Dump(rep->after);
  EXPECT_TRUE(std::filesystem::is_fifo(d0 + "/" + ssd::SegmentFileName(200) + ".bad"));
  EXPECT_TRUE(std::filesystem::is_directory(d0 + "/" + ssd::SegmentFileName(201) + ".bad"));
  EXPECT_TRUE(std::filesystem::is_fifo(d0 + "/index.ckpt.bad"));
  EXPECT_TRUE(std::filesystem::is_regular_file(d0 + "/index.ckpt"));
}

// Two caches that both have segments 1..n, given as one, are refused by every tool; so is a
// one-directory cache given with a second directory, with or without MANIFESTs.
TEST(SsdToolsTest, DirectoriesOfDifferentCachesAreRefused) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions a = SmallTier({dir->Join("a")});
  const SsdTierOptions b = SmallTier({dir->Join("b")});
  MakeCache(env.get(), a, 20);
  MakeCache(env.get(), b, 20);
  const std::vector<std::string> both = {a.dirs[0], b.dirs[0]};
  EXPECT_TRUE(ssd::VerifyDir(env.get(), both).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::InspectDir(env.get(), both).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::RepairDir(env.get(), both).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::ClearDir(env.get(), both).status().IsInvalidArgument());
  EXPECT_EQ(Segments(a.dirs[0]).size(), 2u);  // Nothing was touched.
  ASSERT_TRUE(std::filesystem::create_directory(dir->Join("empty")));
  const std::vector<std::string> plus_empty = {a.dirs[0], dir->Join("empty")};
  EXPECT_TRUE(ssd::VerifyDir(env.get(), plus_empty).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::VerifyDir(env.get(), {}).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::VerifyDir(env.get(), {a.dirs[0], a.dirs[0]}).status().IsInvalidArgument());
  EXPECT_TRUE(ssd::RepairDir(env.get(), {a.dirs[0], a.dirs[0]}).status().IsInvalidArgument());

  // Caches from before MANIFESTs: the segment names and the checkpoint still tell.
  std::filesystem::remove(a.dirs[0] + "/MANIFEST");
  std::filesystem::remove(b.dirs[0] + "/MANIFEST");
  Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), both);
  ASSERT_TRUE(v.status().IsInvalidArgument());
  EXPECT_NE(v.status().message().find("only the first directory of a cache holds index.ckpt"),
            std::string::npos)
      << v.status().ToString();
  std::filesystem::remove(b.dirs[0] + "/index.ckpt");
  v = ssd::VerifyDir(env.get(), both);
  ASSERT_TRUE(v.status().IsInvalidArgument());
  EXPECT_NE(v.status().message().find("not directories of one cache"), std::string::npos)
      << v.status().ToString();
  v = ssd::VerifyDir(env.get(), plus_empty);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->checkpoint_valid);
  EXPECT_TRUE(HasProblem(*v, "checkpoint written for 1 directories, 2 given")) << Dump(*v);
}

// A running tier holds its directories: verify, repair and clear refuse (naming the directory and
// the pid); inspect reads a snapshot and says so.
TEST(SsdToolsTest, ToolsRefuseADirectoryInUse) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0")});
  MakeCache(env.get(), o, 3);
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::string pid = "process " + std::to_string(::getpid());
  for (const Status& s : {ssd::VerifyDir(env.get(), o.dirs).status(),
                          ssd::StatsDir(env.get(), o.dirs, 0).status(),
                          ssd::RepairDir(env.get(), o.dirs).status(),
                          ssd::ClearDir(env.get(), o.dirs).status()}) {
    EXPECT_TRUE(s.IsBusy()) << s.ToString();
    EXPECT_NE(s.message().find(o.dirs[0]), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(pid), std::string::npos) << s.ToString();
  }
  Result<ssd::InspectReport> r = ssd::InspectDir(env.get(), o.dirs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->in_use.find(pid), std::string::npos) << r->in_use;
  EXPECT_EQ(r->blocks, 3u);
  EXPECT_EQ(Segments(o.dirs[0]).size(), 1u);
  ASSERT_TRUE((*tier)->Close().ok());
  tier->reset();
  EXPECT_TRUE(ssd::VerifyDir(env.get(), o.dirs).ok());
}

// Damage three segments of a two-directory cache in different ways and garble the checkpoint;
// repair; the cache verifies, and a reopened tier reads every undamaged block byte for byte and
// misses exactly the damaged ones, including the valid records after a damaged one.
TEST(SsdToolsTest, RepairKeepsEveryIntactBlock) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0"), dir->Join("d1")});
  constexpr uint64_t kBlocks = 40;
  MakeCache(env.get(), o, kBlocks);
  const std::vector<std::string> segs0 = Segments(o.dirs[0]), segs1 = Segments(o.dirs[1]);
  ASSERT_GE(segs0.size(), 2u);
  ASSERT_GE(segs1.size(), 1u);
  const std::vector<uint64_t> in_a = BlocksIn(segs0[0], kBlocks);
  const std::vector<uint64_t> in_b = BlocksIn(segs1[0], kBlocks);
  const std::vector<uint64_t> in_c = BlocksIn(segs0[1], kBlocks);
  ASSERT_GE(in_a.size(), 6u);
  ASSERT_GE(in_b.size(), 6u);
  ASSERT_GE(in_c.size(), 4u);
  std::set<uint64_t> damaged = {in_a[1], in_b[4]};
  for (size_t i = 2; i < in_c.size(); ++i) damaged.insert(in_c[i]);
  // A header (resync), then a payload (skip one record).
  ASSERT_TRUE(FlipByteOfFile(segs0[0], 4096 + 1 * kRecord + 7, 0x01).ok());
  ASSERT_TRUE(FlipByteOfFile(segs1[0], 4096 + 4 * kRecord + 4000, 0x01).ok());
  std::filesystem::resize_file(segs0[1], 4096 + 2 * kRecord + 3000);  // Cut mid-payload.
  std::ofstream(o.dirs[0] + "/index.ckpt", std::ios::trunc) << "garbage";

  Result<ssd::VerifyReport> before = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->records_verified, kBlocks - damaged.size());
  EXPECT_EQ(before->problems.size(), 4u) << Dump(*before);
  Result<ssd::RepairReport> rep = ssd::RepairDir(env.get(), o.dirs);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->after.problems.empty()) << Dump(rep->after);
  EXPECT_EQ(rep->after.records_verified, kBlocks - damaged.size());
  EXPECT_EQ(rep->blocks_indexed, kBlocks - damaged.size());
  EXPECT_TRUE(std::filesystem::exists(segs0[0] + ".bad"));
  EXPECT_TRUE(std::filesystem::exists(segs1[0] + ".bad"));
  EXPECT_TRUE(std::filesystem::exists(segs0[1] + ".bad"));
  Result<ssd::VerifyReport> after = ssd::VerifyDir(env.get(), o.dirs);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->problems.empty()) << Dump(*after);
  EXPECT_TRUE(after->checkpoint_valid);
  const std::string checkpoint = o.dirs[0] + "/index.ckpt";
  const auto checkpoint_time = std::filesystem::last_write_time(checkpoint);
  rep = ssd::RepairDir(env.get(), o.dirs);  // Nothing left to repair: nothing is touched.
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->actions.empty());
  EXPECT_EQ(std::filesystem::last_write_time(checkpoint), checkpoint_time);

  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_TRUE((*tier)->Stats().checkpoint_used);
  EXPECT_EQ((*tier)->Stats().blocks, kBlocks - damaged.size());
  for (uint64_t i = 0; i < kBlocks; ++i) {
    const Status s = ssd_test::Get(**tier, i, kPayload);
    if (damaged.count(i) != 0) {
      EXPECT_TRUE(s.IsNotFound()) << "block " << i << ": " << s.ToString();
    } else {
      EXPECT_TRUE(s.ok()) << "block " << i << ": " << s.ToString();
    }
  }
  ASSERT_TRUE((*tier)->Close().ok());
}

// A file named like a segment whose id is 0 or at the top of the id range (here with a valid
// header naming that id, as a crafted file would have) is a bad segment: the tier never takes it
// as a segment nor lets it move its segment counter (seg-ffffffffffffffff.kvs used to wrap it, and
// every checkpoint written after was rejected), verify reports it, repair moves it aside, and
// stats accepts the repaired cache.
TEST(SsdToolsTest, SegmentIdsOutsideTheRangeAreBadSegments) {
  for (const uint64_t id : {~uint64_t{0}, ssd::kSegmentIdMax + 1, uint64_t{0}}) {
    SCOPED_TRACE(id);
    Result<ScopedTempDir> dir = ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok());
    std::unique_ptr<Env> env = NewPosixEnv();
    const SsdTierOptions o = SmallTier({dir->Join("d0")});
    MakeCache(env.get(), o, 20);
    const std::string crafted = o.dirs[0] + "/" + ssd::SegmentFileName(id);
    {
      std::vector<std::byte> block(ssd::kSegmentHeaderBytes);
      ssd::EncodeSegmentHeader({.segment_id = id, .segment_bytes = o.segment_bytes}, block);
      std::ofstream(crafted, std::ios::binary)
          .write(reinterpret_cast<const char*>(block.data()),
                 static_cast<std::streamsize>(block.size()));
    }
    for (int round = 0; round < 2; ++round) {  // The second open uses the first's checkpoint.
      Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
      ASSERT_TRUE(tier.ok()) << tier.status().ToString();
      const SsdTierStats st = (*tier)->Stats();
      EXPECT_EQ(st.corrupt_segments, 1u);
      EXPECT_EQ(st.segments, 2u + static_cast<uint64_t>(round));  // A reopen starts a segment.
      EXPECT_FALSE(st.checkpoint_rejected) << "round " << round;
      EXPECT_TRUE(st.checkpoint_used) << "round " << round;
      ASSERT_TRUE(ssd_test::Put(**tier, 100 + static_cast<uint64_t>(round), 1, kPayload).ok());
      ASSERT_TRUE((*tier)->Close().ok());
    }
    for (const std::string& seg : Segments(o.dirs[0])) {
      uint64_t seen = 0;
      ASSERT_TRUE(ssd::ParseSegmentFileName(seg.substr(seg.rfind('/') + 1), &seen));
      EXPECT_TRUE(seen == id || (seen >= 1 && seen <= 4)) << seg << ": the counter wrapped";
    }
    Result<ssd::VerifyReport> v = ssd::VerifyDir(env.get(), o.dirs);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ASSERT_EQ(v->problems.size(), 1u) << Dump(*v);
    EXPECT_EQ(v->problems[0].path, crafted);
    EXPECT_TRUE(HasProblem(*v, "segment id")) << Dump(*v);
    Result<ssd::StatsReport> refused = ssd::StatsDir(env.get(), o.dirs, 0);
    EXPECT_TRUE(refused.status().IsCorruption()) << refused.status().ToString();
    Result<ssd::RepairReport> rep = ssd::RepairDir(env.get(), o.dirs);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->after.problems.empty()) << Dump(rep->after);
    EXPECT_TRUE(std::filesystem::exists(crafted + ".bad"));
    EXPECT_EQ(rep->blocks_indexed, 22u);
    Result<ssd::StatsReport> stats = ssd::StatsDir(env.get(), o.dirs, 0);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->blocks, 22u);
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    EXPECT_TRUE((*tier)->Stats().checkpoint_used);
    EXPECT_EQ((*tier)->Stats().corrupt_segments, 0u);
    for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(ssd_test::Get(**tier, i, kPayload).ok()) << i;
    ASSERT_TRUE((*tier)->Close().ok());
  }
}

// Clear removes segments, the checkpoint and repair's ".bad" files, and nothing else; a directory
// named like a segment is reported, not removed; the emptied cache opens with no blocks.
TEST(SsdToolsTest, ClearRemovesOnlyCacheFiles) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  const SsdTierOptions o = SmallTier({dir->Join("d0"), dir->Join("d1")});
  MakeCache(env.get(), o, 20);
  const std::string d0 = o.dirs[0];
  std::ofstream(d0 + "/notes.txt") << "keep me";
  std::ofstream(d0 + "/" + ssd::SegmentFileName(90) + ".bad") << "x";
  std::ofstream(d0 + "/" + ssd::SegmentFileName(91) + ".bad.2") << "x";
  std::ofstream(d0 + "/" + ssd::SegmentFileName(92) + ".badly") << "keep me";
  ASSERT_EQ(::mkdir((d0 + "/" + ssd::SegmentFileName(93)).c_str(), 0700), 0);
  Result<ssd::ClearReport> r = ssd::ClearDir(env.get(), o.dirs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failed.size(), 1u);
  EXPECT_NE(r->failed[0].find(ssd::SegmentFileName(93)), std::string::npos) << r->failed[0];
  std::set<std::string> left;
  for (const std::string& d : o.dirs) {
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      left.insert(e.path().filename().string());
    }
  }
  const std::set<std::string> want = {"notes.txt", "MANIFEST", "LOCK",
                                      ssd::SegmentFileName(92) + ".badly",
                                      ssd::SegmentFileName(93)};
  EXPECT_EQ(left, want);
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), o.dirs).ok());
  ASSERT_EQ(::rmdir((d0 + "/" + ssd::SegmentFileName(93)).c_str()), 0);
  Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->Stats().blocks, 0u);
  ASSERT_TRUE((*tier)->Close().ok());
}

TEST(SsdToolsTest, CheckCacheDirs) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), {dir->Join("missing")}).IsNotFound());
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), {dir->path()}).IsInvalidArgument());
  SsdTierOptions o;
  o.dirs = {dir->Join("d0")};
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 16 * kMiB;
  {
    Result<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o, env.get());
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE(ssd_test::Put(**tier, 0, 1, 1000).ok());
    ASSERT_TRUE((*tier)->Close().ok());
  }
  EXPECT_TRUE(ssd::CheckCacheDirs(env.get(), o.dirs).ok());
}

TEST(SsdToolsTest, BenchSsdReadsEveryBlockBackAndCleansUp) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  ASSERT_TRUE(env->CreateDirs(dir->Join("a")).ok());
  ASSERT_TRUE(env->CreateDirs(dir->Join("b")).ok());
  // Two directories striped like two devices (one directory given twice is refused below).
  ssd::BenchSsdOptions o{.dirs = {dir->Join("a"), dir->Join("b")},
                         .block_bytes = 64 * kKiB,
                         .queue_depth = 3,
                         .total_bytes = 2 * kMiB + 100};
  ssd::BenchSsdOptions twice = o;
  twice.dirs = {dir->path(), dir->path()};
  Result<ssd::BenchSsdReport> refused = ssd::BenchSsd(env.get(), twice);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("given twice"), std::string::npos);
  Result<ssd::BenchSsdReport> r = ssd::BenchSsd(env.get(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->blocks, 32u);
  EXPECT_EQ(r->total_bytes, 2 * kMiB);
  EXPECT_EQ(r->payload_bytes, 64 * kKiB - ssd::kRecordPayloadOffset);
  EXPECT_GT(r->write_bytes_per_s, 0);
  EXPECT_GT(r->read_bytes_per_s, 0);
  EXPECT_LE(r->read_p50_us, r->read_p99_us);
  EXPECT_EQ(r->sync_mode, "periodic");
  EXPECT_FALSE(r->io_backend.empty());
  EXPECT_TRUE(r->kept_dirs.empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir->Join("a")));
  EXPECT_TRUE(std::filesystem::is_empty(dir->Join("b")));
}

TEST(SsdToolsTest, BenchReopenRecoversEveryBlockBothWays) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  Result<ssd::BenchReopenReport> r =
      ssd::BenchReopen(env.get(), {.dirs = {dir->path()}, .blocks = 2000});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->recovered_checkpoint, 2000u);
  EXPECT_EQ(r->recovered_scan, 2000u);
  EXPECT_TRUE(r->checkpoint_used);
  EXPECT_GT(r->reopen_scan_ms, 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir->path()));
}

TEST(SsdToolsTest, BenchesReportProgressAndStopWhenCancelled) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  std::unique_ptr<Env> env = NewPosixEnv();
  ssd::BenchSsdOptions o{
      .dirs = {dir->path()}, .block_bytes = 64 * kKiB, .queue_depth = 2, .total_bytes = kMiB};
  uint64_t last = 0, total = 0;
  bool monotone = true;
  o.progress = [&](uint64_t done, uint64_t all) {
    monotone = monotone && done >= last;
    last = done;
    total = all;
  };
  ASSERT_TRUE(ssd::BenchSsd(env.get(), o).ok());
  EXPECT_TRUE(monotone);
  EXPECT_EQ(total, 2 * kMiB);  // Written, then read back.
  EXPECT_EQ(last, 2 * kMiB);

  // Cancelled after a few blocks: no more are started, and the scratch directory is gone.
  int polls = 0;
  o.cancelled = [&] { return ++polls > 3; };
  Result<ssd::BenchSsdReport> cancelled = ssd::BenchSsd(env.get(), o);
  EXPECT_TRUE(cancelled.status().IsAborted()) << cancelled.status().ToString();
  EXPECT_LT(last, kMiB);
  EXPECT_TRUE(std::filesystem::is_empty(dir->path()));

  ssd::BenchReopenOptions r{.dirs = {dir->path()}, .blocks = 3000};
  uint64_t filled = 0;
  r.progress = [&](uint64_t done, uint64_t) { filled = done; };
  polls = 0;
  r.cancelled = [&] { return ++polls > 2; };
  EXPECT_TRUE(ssd::BenchReopen(env.get(), r).status().IsAborted());
  EXPECT_GT(filled, 0u);
  EXPECT_LT(filled, 3000u);
  EXPECT_TRUE(std::filesystem::is_empty(dir->path()));
}

TEST(SsdToolsTest, BenchOptionsAreValidated) {
  std::unique_ptr<Env> env = NewPosixEnv();
  const ssd::BenchSsdOptions good{.dirs = {"/nonexistent-kvtier"}};
  EXPECT_TRUE(good.Validate().ok());
  ssd::BenchSsdOptions o = good;
  o.block_bytes = 1000;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.block_bytes = 128 * kMiB;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.queue_depth = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.queue_depth = 257;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.total_bytes = 4096;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = good;
  o.dirs.clear();
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_TRUE(ssd::BenchSsd(env.get(), good).status().IsNotFound());
  const ssd::BenchReopenOptions no_blocks{.dirs = {"x"}, .blocks = 0};
  EXPECT_TRUE(no_blocks.Validate().IsInvalidArgument());
}

}  // namespace
}  // namespace kvtier
