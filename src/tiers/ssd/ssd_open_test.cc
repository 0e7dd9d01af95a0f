// Goal: show that SsdTier::Open reads only what it can bound and type, and owns its directories:
// a checkpoint with out-of-range fields (CRC recomputed) or an impossible size is rejected and the
// segments are scanned instead; anything named like a segment or a checkpoint that is not a
// regular file (FIFO, directory, symlink to a FIFO) is skipped without hanging; a second opener,
// in this process or a forked child, gets Busy naming the holder's pid; MANIFESTs refuse a set
// of directories that is not one cache (other cache, order, count, segment size) and bind the
// checkpoint to its cache, and both manifest versions (1, and 2 with flags) are read; files and
// directories are private (0600/0700) unless widened.
// Method: real files in a temporary directory through the posix Env (FaultInjectionEnv to count
// reads of the checkpoint), edits of the files with the decoder and encoder the tier uses, mkfifo,
// fork for a second process, and stat for permissions with the umask set by the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "core/crc32c.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "tiers/ssd/ssd_checkpoint.h"
#include "tiers/ssd/ssd_dir_lock.h"
#include "tiers/ssd/ssd_manifest.h"
#include "tiers/ssd/ssd_recovery.h"
#include "tiers/ssd/ssd_test_util.h"
#include "tiers/ssd/ssd_tier.h"

namespace kvtier {
namespace {

using ssd_test::Get;
using ssd_test::Put;

constexpr size_t kBlock = 60 * 1024;  // 64 KiB records: 15 per 1 MiB segment.

std::string ReadAll(const std::string& path) {
  std::string bytes(std::filesystem::file_size(path), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

uint32_t ModeOf(const std::string& path) {
  struct stat st {};
  KV_CHECK(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

class SsdOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
    env_ = NewPosixEnv({.clock = &clock_});
  }
  SsdTierOptions Options(uint32_t dirs = 1, const std::string& prefix = "d") {
    SsdTierOptions o;
    for (uint32_t i = 0; i < dirs; ++i) o.dirs.push_back(dir_->Join(prefix + std::to_string(i)));
    o.segment_bytes = 1 * kMiB;
    o.capacity_bytes = 64 * kMiB;
    return o;
  }
  std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o, Env* env = nullptr) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env != nullptr ? env : env_.get());
    KV_CHECK_OK(t.status());
    return std::move(t).value();
  }
  // Writes blocks [0, n) into a fresh tier and closes it (with a checkpoint).
  void Fill(const SsdTierOptions& o, uint64_t n) {
    auto tier = OpenOrDie(o);
    ASSERT_TRUE(Put(*tier, 0, n, kBlock).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  // Decodes dirs[0]'s checkpoint, lets `edit` change it, writes it back with a valid CRC.
  template <typename F>
  void EditCheckpoint(const SsdTierOptions& o, F edit) {
    const std::string path = o.dirs[0] + "/" + ssd::kCheckpointName;
    Result<ssd::Checkpoint> ck = ssd::DecodeCheckpoint(Bytes(ReadAll(path)));
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    edit(*ck);
    WriteAll(path, ssd::EncodeCheckpoint(*ck));
  }
  // Overwrites 8 little-endian bytes of the checkpoint file at `offset` with `value` and
  // recomputes its trailer CRC: fields that the decoder itself refuses cannot be written through
  // EncodeCheckpoint, whose debug self-check decodes what it wrote.
  void PatchCheckpoint(const SsdTierOptions& o, size_t offset, uint64_t value, size_t bytes = 8) {
    const std::string path = o.dirs[0] + "/" + ssd::kCheckpointName;
    std::string file = ReadAll(path);
    ASSERT_GE(file.size(), offset + bytes + 4);
    for (size_t i = 0; i < bytes; ++i) file[offset + i] = static_cast<char>(value >> (8 * i));
    const uint32_t crc =
        crc32c::Mask(crc32c::Value(std::string_view(file).substr(0, file.size() - 4)));
    for (size_t i = 0; i < 4; ++i) file[file.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
    WriteAll(path, file);
  }
  // Offsets in a version 3 checkpoint: the header, the cache id, then the segment entries
  // (scan_from at +16) and the block entries (segment_offset at +56), docs/ssd_format.md §4.
  static size_t SegmentEntryOffset(size_t i) {
    return ssd::kCheckpointHeaderBytes + ssd::kCheckpointCacheIdBytes +
           i * ssd::kCheckpointSegmentEntryBytes;
  }
  static size_t BlockEntryOffset(const ssd::Checkpoint& ck, size_t i) {
    return SegmentEntryOffset(ck.segments.size()) + i * ssd::kCheckpointBlockEntryBytes;
  }
  ssd::Checkpoint ReadCheckpoint(const SsdTierOptions& o) {
    Result<ssd::Checkpoint> ck =
        ssd::DecodeCheckpoint(Bytes(ReadAll(o.dirs[0] + "/" + ssd::kCheckpointName)));
    KV_CHECK_OK(ck.status());
    return std::move(ck).value();
  }
  // Reopens and checks that the checkpoint was rejected and blocks [0, n) were found by the scan.
  void ExpectRejectedAndScanned(const SsdTierOptions& o, uint64_t n) {
    auto tier = OpenOrDie(o);
    const SsdTierStats st = tier->Stats();
    EXPECT_TRUE(st.checkpoint_rejected);
    EXPECT_FALSE(st.checkpoint_used);
    EXPECT_EQ(st.blocks, n);
    for (uint64_t i = 0; i < n; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  }

  ManualClock clock_{1'000'000'000};
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Env> env_;
};

// ---------------------------------------------------------------------------------------------
// Checkpoint fields and size

// A scan_from near 2^64 used to wrap `offset + 4096 <= segment_bytes` and crash the scan.
TEST_F(SsdOpenTest, CheckpointScanFromNearTwoToThe64IsRejected) {
  const SsdTierOptions o = Options();
  Fill(o, 20);
  ASSERT_FALSE(ReadCheckpoint(o).segments.empty());
  PatchCheckpoint(o, SegmentEntryOffset(0) + 16, UINT64_MAX - 4095);
  ExpectRejectedAndScanned(o, 20);
}

// The scanner itself refuses a start outside the segment instead of reading at a wrapped offset.
TEST_F(SsdOpenTest, ScanFromOutsideTheSegmentIsAnInvalidStart) {
  const SsdTierOptions o = Options();
  Fill(o, 3);
  const std::string seg = o.dirs[0] + "/" + ssd::SegmentFileName(1);
  Result<std::unique_ptr<File>> f = env_->OpenFile(seg, {});
  ASSERT_TRUE(f.ok());
  for (uint64_t start : {UINT64_MAX - 4095, uint64_t{2} * kMiB, uint64_t{4096 + 512}}) {
    uint64_t visited = 0;
    Result<ssd::SegmentScan> scan = ssd::ScanSegment(
        **f, 1, o.segment_bytes, start, [&](const ssd::RecordHeader&, uint64_t) { ++visited; });
    ASSERT_TRUE(scan.ok()) << scan.status().ToString();
    EXPECT_EQ(scan->stop, ssd::ScanStop::kInvalid) << start;
    EXPECT_EQ(visited, 0u);
  }
}

TEST_F(SsdOpenTest, CheckpointEntryOutsideItsSegmentIsRejected) {
  const SsdTierOptions o = Options();
  Fill(o, 5);
  const ssd::Checkpoint ck = ReadCheckpoint(o);
  ASSERT_FALSE(ck.entries.empty());
  PatchCheckpoint(o, BlockEntryOffset(ck, 0) + 56, kMiB - 4096, 4);  // A 64 KiB record there.
  ExpectRejectedAndScanned(o, 5);
}

// A scan_from inside the segment size but past the end of the segment's file is rejected too.
TEST_F(SsdOpenTest, CheckpointScanFromPastTheFileIsRejected) {
  const SsdTierOptions o = Options();
  Fill(o, 2);
  EditCheckpoint(o, [](ssd::Checkpoint& ck) { ck.segments[0].scan_from = kMiB; });
  ExpectRejectedAndScanned(o, 2);
}

// A checkpoint larger than the configuration allows is rejected from its size alone: nothing of
// it is read (the read fault would fire), so a huge file costs neither time nor memory.
TEST_F(SsdOpenTest, OversizedCheckpointIsRejectedBeforeAnyRead) {
  const SsdTierOptions o = Options();
  Fill(o, 4);
  const std::string path = o.dirs[0] + "/" + ssd::kCheckpointName;
  ASSERT_EQ(::truncate(path.c_str(), 512 * kMiB), 0);  // Sparse.
  FaultInjectionEnv faults(env_.get());
  Result<FaultId> fault = faults.ArmFault({.op = FaultOp::kRead, .path_substring = "index.ckpt"});
  ASSERT_TRUE(fault.ok());
  {
    auto tier = OpenOrDie(o, &faults);
    EXPECT_TRUE(tier->Stats().checkpoint_rejected);
    EXPECT_EQ(tier->Stats().blocks, 4u);
    EXPECT_EQ(faults.FiredCount(*fault), 0u);
    faults.DisarmAllFaults();
  }
}

TEST_F(SsdOpenTest, CheckpointOfAnotherCacheIsRejected) {
  const SsdTierOptions a = Options(1, "a");
  const SsdTierOptions b = Options(1, "b");
  Fill(a, 6);
  Fill(b, 3);
  // Both caches have segment 1 at the same offsets: only the cache id tells them apart.
  std::filesystem::copy_file(a.dirs[0] + "/" + ssd::kCheckpointName,
                             b.dirs[0] + "/" + ssd::kCheckpointName,
                             std::filesystem::copy_options::overwrite_existing);
  ExpectRejectedAndScanned(b, 3);
}

// ---------------------------------------------------------------------------------------------
// Things named like segments or checkpoints that are not regular files

TEST_F(SsdOpenTest, FifoAndSymlinkToFifoNamedLikeSegmentsAreBadSegments) {
  const SsdTierOptions o = Options();
  Fill(o, 3);
  const std::string fifo = o.dirs[0] + "/" + ssd::SegmentFileName(7);
  const std::string outside = dir_->Join("elsewhere.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(outside.c_str(), 0600), 0);
  const std::string link = o.dirs[0] + "/" + ssd::SegmentFileName(8);
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  auto tier = OpenOrDie(o);  // Used to block forever in open(2) of the FIFO.
  EXPECT_EQ(tier->Stats().corrupt_segments, 2u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  ASSERT_TRUE(Put(*tier, 10, 20, kBlock).ok());  // New segments get ids past the bad ones.
  ASSERT_TRUE(tier->Close().ok());
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));  // Never deleted.
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

TEST_F(SsdOpenTest, DirectoryNamedLikeASegmentIsABadSegment) {
  const SsdTierOptions o = Options();
  Fill(o, 3);
  const std::string d = o.dirs[0] + "/" + ssd::SegmentFileName(5);
  ASSERT_TRUE(std::filesystem::create_directory(d));
  auto tier = OpenOrDie(o);  // Used to fail the whole open with the read error of the directory.
  EXPECT_EQ(tier->Stats().corrupt_segments, 1u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  ASSERT_TRUE(tier->Close().ok());
  EXPECT_TRUE(std::filesystem::is_directory(d));
}

TEST_F(SsdOpenTest, FifoNamedIndexCkptIsARejectedCheckpoint) {
  const SsdTierOptions o = Options();
  Fill(o, 3);
  const std::string path = o.dirs[0] + "/" + ssd::kCheckpointName;
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ExpectRejectedAndScanned(o, 3);
}

// A directory left where the checkpoint's temporary goes used to fail the open (unlink EISDIR).
TEST_F(SsdOpenTest, DirectoriesNamedLikeCheckpointFilesDoNotStopTheOpen) {
  const SsdTierOptions o = Options();
  Fill(o, 3);
  const std::string path = o.dirs[0] + "/" + ssd::kCheckpointName;
  std::filesystem::remove(path);
  ASSERT_TRUE(std::filesystem::create_directory(path));
  ASSERT_TRUE(std::filesystem::create_directory(o.dirs[0] + "/" + ssd::kCheckpointTempName));
  ExpectRejectedAndScanned(o, 3);
}

// The Env contract behind the above: kRegular opens without blocking and names what it found.
TEST_F(SsdOpenTest, EnvRegularFileOpenNamesWhatItFound) {
  const std::string fifo = dir_->Join("f");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (OpenMode mode : {OpenMode::kReadOnly, OpenMode::kReadWrite}) {
    Result<std::unique_ptr<File>> f = env_->OpenFile(fifo, {.mode = mode, .kind = FileKind::kRegular});
    ASSERT_TRUE(f.status().IsInvalidArgument()) << f.status().ToString();
    EXPECT_NE(f.status().message().find(fifo + " is not a regular file"), std::string::npos)
        << f.status().ToString();
  }
  Result<std::unique_ptr<File>> d =
      env_->OpenFile(dir_->path(), {.mode = OpenMode::kReadOnly, .kind = FileKind::kRegular});
  ASSERT_TRUE(d.status().IsInvalidArgument()) << d.status().ToString();
  EXPECT_NE(d.status().message().find("a directory"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// One owner per directory

TEST_F(SsdOpenTest, SecondOpenInTheSameProcessIsBusyNamingThePid) {
  const SsdTierOptions o = Options(2);
  auto first = OpenOrDie(o);
  Result<std::unique_ptr<SsdTier>> second = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(second.status().IsBusy()) << second.status().ToString();
  const std::string want =
      o.dirs[0] + " is in use by process " + std::to_string(::getpid()) + " (LOCK held)";
  EXPECT_EQ(second.status().message(), want);
  EXPECT_EQ(ReadAll(o.dirs[0] + "/LOCK"), std::to_string(::getpid()) + "\n");
  ASSERT_TRUE(first->Close().ok());  // Close releases the locks, before destruction.
  auto third = OpenOrDie(o);
  EXPECT_TRUE(third != nullptr);
}

// The child opens the tier and holds it until the parent has tried; flock conflicts across
// processes, and the parent's Busy names the child's pid.
TEST_F(SsdOpenTest, OpenWhileAnotherProcessHoldsTheCacheIsBusy) {
  const SsdTierOptions o = Options();
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
    const char ok = t.ok() ? 'y' : 'n';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
    char c = 0;
    if (::read(release[0], &c, 1) < 0) ::_exit(3);
    ::_exit(t.ok() && (*t)->Close().ok() ? 0 : 1);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  Result<std::unique_ptr<SsdTier>> mine = SsdTier::Open(o, env_.get());
  EXPECT_TRUE(mine.status().IsBusy()) << mine.status().ToString();
  EXPECT_NE(mine.status().message().find("process " + std::to_string(child)), std::string::npos)
      << mine.status().ToString();
  ASSERT_EQ(::write(release[1], "x", 1), 1);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).ok());  // The child's exit released it.
}

TEST_F(SsdOpenTest, SharedLocksAdmitReadersAndExcludeTheWriter) {
  const std::string d = dir_->path();
  Result<ssd::DirLock> r1 = ssd::DirLock::Acquire(env_.get(), d, ssd::DirLockMode::kShared);
  Result<ssd::DirLock> r2 = ssd::DirLock::Acquire(env_.get(), d, ssd::DirLockMode::kShared);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_TRUE(r1->held() && r2->held());
  Result<ssd::DirLock> w = ssd::DirLock::Acquire(env_.get(), d, ssd::DirLockMode::kExclusive);
  ASSERT_TRUE(w.status().IsBusy()) << w.status().ToString();
  EXPECT_NE(w.status().message().find("reader"), std::string::npos);
  r1 = ssd::DirLock();
  r2 = ssd::DirLock();
  w = ssd::DirLock::Acquire(env_.get(), d, ssd::DirLockMode::kExclusive);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Result<ssd::DirLock> r3 = ssd::DirLock::Acquire(env_.get(), d, ssd::DirLockMode::kShared);
  ASSERT_TRUE(r3.status().IsBusy());
  EXPECT_NE(r3.status().message().find("process " + std::to_string(::getpid())),
            std::string::npos);
}

TEST_F(SsdOpenTest, AcquireAllReleasesWhatItTookOnFailure) {
  const std::vector<std::string> dirs = {dir_->Join("a"), dir_->Join("b")};
  for (const std::string& d : dirs) ASSERT_TRUE(std::filesystem::create_directory(d));
  Result<ssd::DirLock> held =
      ssd::DirLock::Acquire(env_.get(), dirs[1], ssd::DirLockMode::kExclusive);
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(ssd::AcquireAll(env_.get(), dirs, ssd::DirLockMode::kExclusive).status().IsBusy());
  // dirs[0] was taken, then released when dirs[1] failed.
  EXPECT_TRUE(ssd::DirLock::Acquire(env_.get(), dirs[0], ssd::DirLockMode::kExclusive).ok());
}

// ---------------------------------------------------------------------------------------------
// MANIFEST

TEST_F(SsdOpenTest, NewCacheWritesOneManifestPerDirectory) {
  const SsdTierOptions o = Options(3);
  OpenOrDie(o)->Close().IgnoreError();
  Result<ssd::Manifest> first = ssd::ReadManifest(env_.get(), o.dirs[0]);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  for (uint32_t i = 0; i < 3; ++i) {
    Result<ssd::Manifest> m = ssd::ReadManifest(env_.get(), o.dirs[i]);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->cache_id, first->cache_id);
    EXPECT_EQ(m->stripe_index, i);
    EXPECT_EQ(m->stripe_count, 3u);
    EXPECT_EQ(m->segment_bytes, o.segment_bytes);
    EXPECT_EQ(m->format_version, ssd::kManifestVersion);
  }
  EXPECT_EQ(ssd::CacheIdHex(*first).size(), 32u);
  EXPECT_TRUE(ssd::CheckManifestSet(env_.get(), o.dirs).ok());
  EXPECT_TRUE(ssd::ReadManifest(env_.get(), dir_->path()).status().IsNotFound());
}

// Manifest versions (docs/ssd_format.md §8): a manifest without flags is written and read as
// version 1 (so older builds open the cache); the sealed flag makes it version 2; a version 1
// manifest with its flag bytes set, a version 2 one with an unknown flag, and version 3 are
// Corruption.
TEST(SsdManifestTest, VersionOneAndTwoAreRead) {
  ssd::Manifest m{.format_version = ssd::kManifestVersion,
                  .stripe_index = 0,
                  .stripe_count = 1,
                  .segment_bytes = ssd::kSegmentBytesDefault,
                  .format_digest = ssd::ManifestFormatDigest()};
  auto decode = [](const std::string& bytes) {
    return ssd::DecodeManifest(std::span<const std::byte>(
        reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  };
  // Re-encodes bytes [0, 60) with a fresh CRC, as a crafted file would have.
  auto recrc = [](std::string bytes) {
    const uint32_t crc = crc32c::Mask(crc32c::Value(bytes.data(), ssd::kManifestCrcOffset));
    for (size_t b = 0; b < 4; ++b) {
      bytes[ssd::kManifestCrcOffset + b] = static_cast<char>(crc >> (8 * b));
    }
    return bytes;
  };
  const std::string v1 = ssd::EncodeManifest(m);
  EXPECT_EQ(v1[4], 1);
  Result<ssd::Manifest> back = decode(v1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->sealed());
  m.flags = ssd::kManifestFlagSealed;
  m.format_version = ssd::Manifest::VersionFor(m.flags);
  const std::string v2 = ssd::EncodeManifest(m);
  EXPECT_EQ(v2[4], 2);
  back = decode(v2);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->sealed());
  EXPECT_EQ(*back, m);
  std::string flags_in_v1 = v2;
  flags_in_v1[4] = 1;
  EXPECT_TRUE(decode(recrc(flags_in_v1)).status().IsCorruption());
  std::string unknown_flag = v2;
  unknown_flag[ssd::kManifestFlagsOffset] = 3;
  EXPECT_TRUE(decode(recrc(unknown_flag)).status().IsCorruption());
  std::string v3 = v2;
  v3[4] = 3;
  EXPECT_TRUE(decode(recrc(v3)).status().IsCorruption());
}

TEST_F(SsdOpenTest, DirectoriesInAnotherOrderAreRefused) {
  SsdTierOptions o = Options(2);
  Fill(o, 4);
  std::swap(o.dirs[0], o.dirs[1]);
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, env_.get());
  ASSERT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  EXPECT_NE(t.status().message().find("dir " + o.dirs[0] + " belongs to cache"),
            std::string::npos)
      << t.status().ToString();
  EXPECT_NE(t.status().message().find("(stripe 1 of 2), but was given at position 0"),
            std::string::npos);
  EXPECT_TRUE(ssd::CheckManifestSet(env_.get(), o.dirs).IsInvalidArgument());
}

TEST_F(SsdOpenTest, DirectoriesOfTwoCachesAreRefused) {
  const SsdTierOptions a = Options(2, "a");
  const SsdTierOptions b = Options(2, "b");
  Fill(a, 2);
  Fill(b, 2);
  SsdTierOptions mixed = a;
  mixed.dirs[1] = b.dirs[1];
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(mixed, env_.get());
  ASSERT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  Result<ssd::Manifest> ma = ssd::ReadManifest(env_.get(), a.dirs[0]);
  Result<ssd::Manifest> mb = ssd::ReadManifest(env_.get(), b.dirs[1]);
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ(t.status().message(), "dir " + b.dirs[1] + " belongs to cache " +
                                      ssd::CacheIdHex(*mb) + " (stripe 1 of 2), not to the cache " +
                                      "of dir " + a.dirs[0] + " (" + ssd::CacheIdHex(*ma) +
                                      ", stripe 1 expected)");
}

TEST_F(SsdOpenTest, ChangedCountOrSegmentSizeIsRefused) {
  SsdTierOptions o = Options(2);
  Fill(o, 2);
  SsdTierOptions fewer = o;
  fewer.dirs.pop_back();
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(fewer, env_.get());
  ASSERT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  EXPECT_NE(t.status().message().find("but 1 directories were given"), std::string::npos);
  SsdTierOptions bigger = o;
  bigger.segment_bytes = 2 * kMiB;
  t = SsdTier::Open(bigger, env_.get());
  ASSERT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  EXPECT_NE(t.status().message().find("segment_bytes 1048576"), std::string::npos);
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).ok());
}

// A cache made before manifests existed: CheckManifestSet says so, and opening it writes them.
TEST_F(SsdOpenTest, DirectoryWithSegmentsButNoManifestGetsOne) {
  const SsdTierOptions o = Options(2);
  Fill(o, 6);
  for (const std::string& d : o.dirs) std::filesystem::remove(d + "/" + ssd::kManifestName);
  EXPECT_TRUE(ssd::CheckManifestSet(env_.get(), o.dirs).IsInvalidArgument());
  {
    auto tier = OpenOrDie(o);
    for (uint64_t i = 0; i < 6; ++i) EXPECT_TRUE(Get(*tier, i, kBlock).ok()) << i;
  }
  EXPECT_TRUE(ssd::CheckManifestSet(env_.get(), o.dirs).ok());
}

TEST_F(SsdOpenTest, DamagedManifestIsCorruption) {
  const SsdTierOptions o = Options();
  Fill(o, 1);
  const std::string path = o.dirs[0] + "/" + ssd::kManifestName;
  std::string bytes = ReadAll(path);
  ASSERT_EQ(bytes.size(), ssd::kManifestBytes);
  bytes[26] = static_cast<char>(bytes[26] ^ 1);
  WriteAll(path, bytes);
  Result<ssd::Manifest> m = ssd::ReadManifest(env_.get(), o.dirs[0]);
  ASSERT_TRUE(m.status().IsCorruption()) << m.status().ToString();
  EXPECT_NE(m.status().ToString().find(path), std::string::npos);
  EXPECT_TRUE(SsdTier::Open(o, env_.get()).status().IsCorruption());
}

// ---------------------------------------------------------------------------------------------
// Permissions

class UmaskScope {
 public:
  explicit UmaskScope(mode_t mask) : old_(::umask(mask)) {}
  ~UmaskScope() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST_F(SsdOpenTest, FilesArePrivateByDefault) {
  UmaskScope mask(022);
  const SsdTierOptions o = Options();
  Fill(o, 2);
  const std::string& d = o.dirs[0];
  EXPECT_EQ(ModeOf(d), 0700u);
  for (const std::string& name : {ssd::SegmentFileName(1), std::string(ssd::kCheckpointName),
                                  std::string(ssd::kManifestName), std::string("LOCK")}) {
    EXPECT_EQ(ModeOf(d + "/" + name), 0600u) << name;
  }
}

TEST_F(SsdOpenTest, FileModeWidensForAGroup) {
  UmaskScope mask(022);
  SsdTierOptions o = Options();
  o.file_mode = 0640;
  Fill(o, 2);
  EXPECT_EQ(ModeOf(o.dirs[0]), 0750u);
  EXPECT_EQ(ModeOf(o.dirs[0] + "/" + ssd::SegmentFileName(1)), 0640u);
  EXPECT_EQ(ModeOf(o.dirs[0] + "/" + ssd::kCheckpointName), 0640u);
  o.file_mode = 0660;
  EXPECT_EQ(o.dir_mode(), 0770u);
  for (uint32_t bad : {0644u, 0700u, 0400u, 0620u, 0666u}) {
    o.file_mode = bad;
    EXPECT_TRUE(o.Validate().IsInvalidArgument()) << bad;
  }
}

}  // namespace
}  // namespace kvtier
