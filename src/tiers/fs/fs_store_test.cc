// Goal: the fs tier keeps a shared directory of verified values: what is put is read back byte
// for byte, sealed and in the clear; every damaged, truncated, moved, foreign, planted or linked
// file, and a FIFO or directory in a value's place (without waiting for the FIFO's writer), is a
// counted miss that leaves nothing in the caller's buffer; a writer's temporary is
// never read and a dead writer's is swept; the sweeps remove by age and, above the size bound,
// oldest first down to 90 %, a hit renewing a value's time; two stores on one directory (two
// nodes) writing and sweeping at once lose nothing below the bound and leave only verified
// values; a write that fails (the file size limit) publishes nothing and leaves no temporary, also
// in the middle of a batch published in groups under a descriptor limit one group fits; a group
// of values is made durable by one syncfs, a single value by its own fdatasync, and a failed
// syncfs falls back to one fdatasync per value with every value still published; an untrusted
// directory and incomplete options are refused with the option's name.
// Method: FsStore on a fresh temporary directory; files damaged, planted and aged with POSIX
// calls (utimensat sets the times the sweeps read); RLIMIT_FSIZE makes writes fail and
// RLIMIT_NOFILE bounds the descriptors; FsStore::SetSyncFsForTesting puts a failing syncfs in
// place, and FsStats counts the syncs of each kind.
#include "tiers/fs/fs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/assert.h"
#include "core/hex.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

const std::string kKeys = "1 " + std::string(64, '1');

BlockKey Key(uint32_t seed, uint32_t layer = 0) {
  BlockKey key;
  for (size_t i = 0; i < key.chunk_hash.size(); ++i) {
    key.chunk_hash[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  }
  key.layer = layer;
  return key;
}

std::vector<std::byte> Payload(uint32_t seed, size_t n) {
  std::vector<std::byte> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((seed * 131 + i * 17) & 0xff);
  return p;
}

std::vector<std::string> ValueFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().string());
  }
  return out;
}

void SetAge(const std::string& path, int64_t seconds_ago) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ::time(nullptr) - seconds_ago;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

class FsStoreTest : public ::testing::TestWithParam<bool> {  // Sealed or plaintext.
 protected:
  void SetUp() override {
    Result<ScopedTempDir> t = ScopedTempDir::Create();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(*t));
    dir_ = tmp_->Join("fs");
  }

  FsStoreOptions Options(bool sealed) const {
    FsStoreOptions o{.dir = dir_};
    if (sealed) {
      Result<RemoteKeyring> ring = RemoteKeyring::Parse(kKeys);
      KV_CHECK_OK(ring.status());
      o.keyring = std::move(*ring);
    } else {
      o.insecure_plaintext = true;
    }
    o.layout_digest.fill(7);
    return o;
  }

  std::unique_ptr<FsStore> Open(FsStoreOptions o) {
    Result<std::unique_ptr<FsStore>> s = FsStore::Open(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static Status PutOne(FsStore& s, const BlockKey& key, std::span<const std::byte> payload,
                       uint8_t codec = 3) {
    RemotePut p{.key = key,
                .codec_id = codec,
                .raw_bytes = static_cast<uint32_t>(payload.size() * 2),
                .payload = payload};
    KV_RETURN_IF_ERROR(s.Put(std::span(&p, 1)));
    return p.status;
  }

  // Gets into a buffer filled with 0xEE first; returns the entry.
  static RemoteGet GetOne(FsStore& s, const BlockKey& key, std::vector<std::byte>* buffer) {
    std::fill(buffer->begin(), buffer->end(), std::byte{0xEE});
    RemoteGet g{.key = key, .dst = *buffer};
    KV_CHECK_OK(s.Get(std::span(&g, 1)));
    return g;
  }

  std::string PathOf(FsStore& s, const BlockKey& key) const {
    return dir_ + "/" + s.RelativePath(key);
  }

  std::optional<ScopedTempDir> tmp_;
  std::string dir_;
};

INSTANTIATE_TEST_SUITE_P(Modes, FsStoreTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "Sealed" : "Plaintext"; });

bool AllZeroOrUntouched(const std::vector<std::byte>& b) {
  return std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
}

TEST_P(FsStoreTest, WhatIsPutIsReadBackByteForByte) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  const std::vector<size_t> sizes = {1, 4096, 1 << 20};
  for (uint32_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(PutOne(*s, Key(i, i), Payload(i, sizes[i])).ok());
  }
  std::vector<std::byte> buf(1 << 20);
  for (uint32_t i = 0; i < sizes.size(); ++i) {
    const RemoteGet g = GetOne(*s, Key(i, i), &buf);
    ASSERT_TRUE(g.status.ok()) << g.status.ToString();
    EXPECT_EQ(g.payload_bytes, sizes[i]);
    EXPECT_EQ(g.codec_id, 3);
    EXPECT_EQ(g.raw_bytes, sizes[i] * 2);
    EXPECT_EQ(std::memcmp(buf.data(), Payload(i, sizes[i]).data(), sizes[i]), 0);
  }
  RemoteExists ex[2] = {{.key = Key(0, 0)}, {.key = Key(9)}};
  ASSERT_TRUE(s->Exists(ex).ok());
  EXPECT_TRUE(ex[0].exists);
  EXPECT_FALSE(ex[1].exists);
  // Sealed names do not show the chunk hash.
  const std::string name = s->RelativePath(Key(0, 0));
  const BlockKey k0 = Key(0, 0);
  const std::string hash_hex =
      HexOf(std::string_view(reinterpret_cast<const char*>(k0.chunk_hash.data()), 8));
  EXPECT_EQ(name.find(hash_hex.substr(0, 16)) == std::string::npos, GetParam()) << name;

  RemoteDelete del{.key = Key(1, 1)};
  ASSERT_TRUE(s->Delete(std::span(&del, 1)).ok());
  EXPECT_TRUE(GetOne(*s, Key(1, 1), &buf).status.IsNotFound());
  const RemoteStoreStats st = s->Stats();
  EXPECT_EQ(st.puts, 3u);
  EXPECT_EQ(st.gets, 4u);
  EXPECT_EQ(st.hits, 3u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.corrupt + st.mismatched + st.auth_failures + st.errors, 0u);
}

TEST_P(FsStoreTest, DamagedShortMovedAndLinkedFilesAreCountedMisses) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(PutOne(*s, Key(i), Payload(i, 8192)).ok());
  std::vector<std::byte> buf(8192);

  // A flipped byte in the payload's place.
  ASSERT_TRUE(FlipByteOfFile(PathOf(*s, Key(0)), 4000).ok());
  RemoteGet g = GetOne(*s, Key(0), &buf);
  EXPECT_TRUE(g.status.IsCorruption()) << g.status.ToString();
  EXPECT_TRUE(AllZeroOrUntouched(buf));
  // Cut short.
  ASSERT_EQ(::truncate(PathOf(*s, Key(1)).c_str(), 5000), 0);
  g = GetOne(*s, Key(1), &buf);
  EXPECT_TRUE(g.status.IsCorruption()) << g.status.ToString();
  EXPECT_TRUE(AllZeroOrUntouched(buf));
  // Key 3's value moved under key 2's name: well formed, for another key.
  std::filesystem::rename(PathOf(*s, Key(3)), PathOf(*s, Key(2)));
  g = GetOne(*s, Key(2), &buf);
  EXPECT_TRUE(g.status.IsCorruption()) << g.status.ToString();
  EXPECT_TRUE(AllZeroOrUntouched(buf));
  // A link in a value's place is not followed.
  std::filesystem::remove(PathOf(*s, Key(4)));
  std::filesystem::create_symlink(PathOf(*s, Key(2)), PathOf(*s, Key(4)));
  g = GetOne(*s, Key(4), &buf);
  EXPECT_TRUE(g.status.IsCorruption()) << g.status.ToString();
  RemoteExists ex{.key = Key(4)};
  ASSERT_TRUE(s->Exists(std::span(&ex, 1)).ok());
  EXPECT_FALSE(ex.exists);

  const RemoteStoreStats st = s->Stats();
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.misses, 4u);
  if (GetParam()) {
    // The GCM tag refuses the damaged, the short and the moved value (the name is in its
    // associated data).
    EXPECT_EQ(st.auth_failures, 3u);
    EXPECT_EQ(st.corrupt, 1u);  // The link.
  } else {
    EXPECT_EQ(st.corrupt, 3u);
    EXPECT_EQ(st.mismatched, 1u);
  }
}

// A FIFO or a directory put in a value's place (by anyone who may write the shared directory) is
// a counted miss at once: the open does not wait for a FIFO's writer. The gets run on a thread of
// their own; one still waiting after 30 s is a failure, and the test then plays the writer so that
// it ends instead of hanging.
TEST_P(FsStoreTest, AFifoOrADirectoryInAValuesPlaceIsAMissWithoutWaiting) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  for (uint32_t i = 0; i < 2; ++i) ASSERT_TRUE(PutOne(*s, Key(i), Payload(i, 4096)).ok());
  const std::string fifo = PathOf(*s, Key(0));
  ASSERT_EQ(::unlink(fifo.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::unlink(PathOf(*s, Key(1)).c_str()), 0);
  ASSERT_EQ(::mkdir(PathOf(*s, Key(1)).c_str(), 0700), 0);
  std::vector<std::byte> buf(4096);
  std::vector<RemoteGet> got;
  std::atomic<bool> done{false};
  std::thread getter([&] {
    for (uint32_t i = 0; i < 2; ++i) got.push_back(GetOne(*s, Key(i), &buf));
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done) {
    ADD_FAILURE() << "the get of a FIFO waited for a writer";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);  // Releases the waiting open.
    if (fd >= 0) ::close(fd);
  }
  getter.join();
  ASSERT_EQ(got.size(), 2u);
  for (const RemoteGet& g : got) EXPECT_TRUE(g.status.IsCorruption()) << g.status.ToString();
  EXPECT_TRUE(AllZeroOrUntouched(buf));
  EXPECT_EQ(s->Stats().hits, 0u);
}

TEST_P(FsStoreTest, AnotherLayoutsValuesAndPlantedPlaintextAreMisses) {
  std::unique_ptr<FsStore> a = Open(Options(GetParam()));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(PutOne(*a, Key(1), Payload(1, 4096)).ok());
  FsStoreOptions other = Options(GetParam());
  other.layout_digest.fill(8);
  std::unique_ptr<FsStore> b = Open(std::move(other));
  ASSERT_NE(b, nullptr);
  std::vector<std::byte> buf(4096);
  EXPECT_TRUE(GetOne(*b, Key(1), &buf).status.IsCorruption());
  EXPECT_EQ(b->Stats().mismatched, 1u);
  EXPECT_TRUE(AllZeroOrUntouched(buf));
  if (GetParam()) {
    // A writer without the keys plants a well-formed plaintext value under the sealed name.
    std::unique_ptr<FsStore> plain = Open(Options(false));
    ASSERT_NE(plain, nullptr);
    ASSERT_TRUE(PutOne(*plain, Key(2), Payload(2, 4096)).ok());
    std::filesystem::rename(PathOf(*plain, Key(2)), PathOf(*a, Key(2)));
    EXPECT_TRUE(GetOne(*a, Key(2), &buf).status.IsCorruption());
    EXPECT_EQ(a->Stats().auth_failures, 1u);
    EXPECT_TRUE(AllZeroOrUntouched(buf));
  }
}

TEST_P(FsStoreTest, AForeignFileAndAnExpiredValueAreNotThere) {
  ManualClock clock(1'000'000'000);
  FsStoreOptions o = Options(GetParam());
  o.clock = &clock;
  std::unique_ptr<FsStore> s = Open(o);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(PutOne(*s, Key(1), Payload(1, 4096)).ok());
  // Key 2's name holds a file of the right size that kvtier did not write.
  std::filesystem::copy_file(PathOf(*s, Key(1)), PathOf(*s, Key(2)));
  {
    std::fstream f(PathOf(*s, Key(2)), std::ios::in | std::ios::out | std::ios::binary);
    f.put('X');
  }
  std::vector<std::byte> buf(4096);
  EXPECT_TRUE(GetOne(*s, Key(2), &buf).status.IsCorruption());
  EXPECT_EQ(s->Stats().corrupt, 1u);
  // A lookup trusts a regular file of a possible size (one stat); the read refused it above.
  RemoteExists ex[3] = {{.key = Key(1)}, {.key = Key(2)}, {.key = Key(9)}};
  ASSERT_TRUE(s->Exists(ex).ok());
  EXPECT_TRUE(ex[0].exists);
  EXPECT_TRUE(ex[1].exists);
  EXPECT_FALSE(ex[2].exists);

  const std::vector<std::byte> payload = Payload(3, 4096);
  RemotePut p{.key = Key(3), .payload = payload, .ttl_ms = 1000};
  ASSERT_TRUE(s->Put(std::span(&p, 1)).ok());
  ASSERT_TRUE(p.status.ok());
  // Published without write permission: the mark that makes a lookup read its expiry.
  EXPECT_EQ(std::filesystem::status(PathOf(*s, Key(3))).permissions() &
                std::filesystem::perms::owner_write,
            std::filesystem::perms::none);
  EXPECT_TRUE(GetOne(*s, Key(3), &buf).status.ok());
  RemoteExists ttl{.key = Key(3)};
  ASSERT_TRUE(s->Exists(std::span(&ttl, 1)).ok());
  EXPECT_TRUE(ttl.exists);
  clock.Advance(1'000'001);
  ASSERT_TRUE(s->Exists(std::span(&ttl, 1)).ok());
  EXPECT_FALSE(ttl.exists);
  EXPECT_FALSE(std::filesystem::exists(PathOf(*s, Key(3))));  // Removed by the lookup.
  ASSERT_TRUE(s->Put(std::span(&p, 1)).ok());  // Again, and past its expiry once more.
  clock.Advance(2'000'000);
  EXPECT_TRUE(GetOne(*s, Key(3), &buf).status.IsNotFound());
  EXPECT_FALSE(std::filesystem::exists(PathOf(*s, Key(3))));  // Removed by the read.
}

TEST_P(FsStoreTest, TemporariesAreNeverReadAndDeadWritersAreSwept) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(PutOne(*s, Key(1), Payload(1, 4096)).ok());
  const std::string path = PathOf(*s, Key(1));
  const std::string parent = std::filesystem::path(path).parent_path();
  const std::string base = std::filesystem::path(path).filename();
  // A writer died before its rename: its temporary holds a whole value, still never read.
  const std::string stale = parent + "/." + base + ".tmp.0123456789abcdef";
  const std::string fresh = parent + "/." + base + ".tmp.fedcba9876543210";
  std::filesystem::rename(path, stale);
  std::filesystem::copy_file(stale, fresh);
  SetAge(stale, kFsStaleTemporaryS + 60);
  std::vector<std::byte> buf(4096);
  EXPECT_TRUE(GetOne(*s, Key(1), &buf).status.IsNotFound());
  ASSERT_TRUE(s->SweepNow().ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(fresh));  // Its writer may still be at work.
  EXPECT_EQ(s->FsStats().stale_temporaries, 1u);
  EXPECT_EQ(s->FsStats().values_seen, 0u);
}

TEST_P(FsStoreTest, SweepsRemoveByAgeThenOldestFirstDownTo90Percent) {
  FsStoreOptions o = Options(GetParam());
  o.max_age_s = 3600;
  o.sweep_interval_ms = 3'600'000;  // Only the sweeps this test runs.
  std::unique_ptr<FsStore> s = Open(o);
  ASSERT_NE(s, nullptr);
  constexpr uint32_t kValues = 10;
  for (uint32_t i = 0; i < kValues; ++i) {
    ASSERT_TRUE(PutOne(*s, Key(i), Payload(i, 65536)).ok());
    SetAge(PathOf(*s, Key(i)), 1000 - i * 10);  // Key 0 the oldest.
  }
  SetAge(PathOf(*s, Key(5)), 7200);  // Past max_age_s.
  ASSERT_TRUE(s->SweepNow().ok());
  EXPECT_FALSE(std::filesystem::exists(PathOf(*s, Key(5))));
  EXPECT_EQ(s->FsStats().evicted_values, 1u);
  EXPECT_EQ(ValueFiles(dir_).size(), kValues - 1);

  // A bound of 5 values: the sweep removes the oldest until at most 4.5 values' bytes remain.
  const uint64_t value_bytes = std::filesystem::file_size(PathOf(*s, Key(0)));
  o.bytes_max = value_bytes * 5;
  std::unique_ptr<FsStore> bounded = Open(o);
  ASSERT_NE(bounded, nullptr);
  // A hit renews key 0 (read 1000 s ago): it is then the newest and stays.
  std::vector<std::byte> buf(65536);
  ASSERT_TRUE(GetOne(*bounded, Key(0), &buf).status.ok());
  ASSERT_TRUE(bounded->SweepNow().ok());
  std::vector<uint32_t> kept;
  for (uint32_t i = 0; i < kValues; ++i) {
    if (std::filesystem::exists(PathOf(*s, Key(i)))) kept.push_back(i);
  }
  EXPECT_EQ(kept, (std::vector<uint32_t>{0, 7, 8, 9}));
  EXPECT_EQ(bounded->FsStats().evicted_bytes, value_bytes * 5);
  for (uint32_t i : kept) EXPECT_TRUE(GetOne(*bounded, Key(i), &buf).status.ok()) << i;
}

TEST_P(FsStoreTest, TwoNodesWritingAndSweepingAtOnceKeepEverythingBelowTheBound) {
  FsStoreOptions o = Options(GetParam());
  o.bytes_max = 64ull << 20;  // Far above what they write: nothing may go.
  o.sweep_interval_ms = 1;    // Their own sweepers too, as fast as they go.
  std::unique_ptr<FsStore> a = Open(o);
  std::unique_ptr<FsStore> b = Open(o);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr uint32_t kPerNode = 100;
  auto writer = [&](FsStore* s, uint32_t first) {
    for (uint32_t i = 0; i < kPerNode; ++i) {
      // Both nodes also write a shared half (the same prefix seen on both).
      const uint32_t k = i % 2 == 0 ? i : first + i;
      EXPECT_TRUE(PutOne(*s, Key(k), Payload(k, 16384)).ok());
      if (i % 10 == 0) {
        EXPECT_TRUE(s->SweepNow().ok());
      }
    }
  };
  std::thread ta(writer, a.get(), 1000);
  std::thread tb(writer, b.get(), 2000);
  ta.join();
  tb.join();
  std::vector<std::byte> buf(16384);
  for (uint32_t i = 0; i < kPerNode; ++i) {
    for (uint32_t k : {i % 2 == 0 ? i : 1000 + i, i % 2 == 0 ? i : 2000 + i}) {
      const RemoteGet g = GetOne(i % 3 == 0 ? *a : *b, Key(k), &buf);
      ASSERT_TRUE(g.status.ok()) << k << ": " << g.status.ToString();
      ASSERT_EQ(std::memcmp(buf.data(), Payload(k, 16384).data(), 16384), 0) << k;
    }
  }
  EXPECT_EQ(a->FsStats().evicted_values + b->FsStats().evicted_values, 0u);

  // Now a bound of half: both sweep at once; what stays verifies, and the total is under it.
  o.bytes_max = 100 * std::filesystem::file_size(PathOf(*a, Key(0))) / 2;
  o.sweep_interval_ms = 3'600'000;
  std::unique_ptr<FsStore> c = Open(o);
  std::unique_ptr<FsStore> d = Open(o);
  std::thread tc([&] { EXPECT_TRUE(c->SweepNow().ok()); });
  std::thread td([&] { EXPECT_TRUE(d->SweepNow().ok()); });
  tc.join();
  td.join();
  uint64_t total = 0;
  for (const std::string& f : ValueFiles(dir_)) total += std::filesystem::file_size(f);
  EXPECT_LE(total, o.bytes_max);
  EXPECT_GT(total, o.bytes_max / 2);  // Not everything: the nodes did not double the removal.
  uint32_t found = 0;
  for (uint32_t k = 0; k < 2100; ++k) {
    const RemoteGet g = GetOne(*c, Key(k), &buf);
    if (g.status.ok()) ++found;
    ASSERT_TRUE(g.status.ok() || g.status.IsNotFound()) << g.status.ToString();
  }
  EXPECT_GT(found, 0u);
  EXPECT_EQ(c->Stats().corrupt + c->Stats().auth_failures + c->Stats().mismatched, 0u);
}

TEST_P(FsStoreTest, AFailedWritePublishesNothingAndLeavesNoTemporary) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 10000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status put = PutOne(*s, Key(1), Payload(1, 65536));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(put.ok());
  EXPECT_NE(put.ToString().find(dir_), std::string::npos) << put.ToString();
  EXPECT_TRUE(ValueFiles(dir_).empty());
  EXPECT_EQ(s->Stats().errors, 1u);
  std::vector<std::byte> buf(65536);
  EXPECT_TRUE(GetOne(*s, Key(1), &buf).status.IsNotFound());
}

// A batch of several groups (kFsPutGroup temporaries are open at once) under a descriptor limit
// that one group fits and the whole batch would not, with one value in the middle over the file
// size limit: every other value is published and reads back, the failed one is a miss with its
// own error, and no temporary is left.
TEST_P(FsStoreTest, ABatchIsPublishedInGroupsAndOneFailureStaysItsOwn) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  constexpr size_t kValues = 3 * kFsPutGroup + 5;
  constexpr size_t kBig = kFsPutGroup + 7;  // In the second group.
  std::vector<std::vector<std::byte>> payloads;
  std::vector<RemotePut> puts;
  for (size_t i = 0; i < kValues; ++i) {
    const uint32_t seed = static_cast<uint32_t>(i);
    payloads.push_back(Payload(seed, i == kBig ? 65536 : 3000 + i));
  }
  for (size_t i = 0; i < kValues; ++i) {
    puts.push_back(RemotePut{.key = Key(static_cast<uint32_t>(i)),
                             .codec_id = 3,
                             .raw_bytes = static_cast<uint32_t>(payloads[i].size()),
                             .payload = payloads[i]});
  }
  size_t open_fds = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++open_fds;
  }
  struct rlimit old_files {
  }, old_size{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old_files), 0);
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_size), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit files = old_files, size = old_size;
  files.rlim_cur = open_fds + kFsPutGroup + 16;
  ASSERT_LT(files.rlim_cur, open_fds + kValues);
  size.rlim_cur = 10000;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &size), 0);
  const Status call = s->Put(puts);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_size), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old_files), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_TRUE(call.ok()) << call.ToString();
  for (size_t i = 0; i < kValues; ++i) {
    std::vector<std::byte> buf(65536);
    const RemoteGet g = GetOne(*s, puts[i].key, &buf);
    if (i == kBig) {
      EXPECT_FALSE(puts[i].status.ok());
      EXPECT_TRUE(g.status.IsNotFound()) << g.status.ToString();
      continue;
    }
    ASSERT_TRUE(puts[i].status.ok()) << i << ": " << puts[i].status.ToString();
    ASSERT_TRUE(g.status.ok()) << i << ": " << g.status.ToString();
    ASSERT_EQ(g.payload_bytes, payloads[i].size()) << i;
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), buf.begin())) << i;
  }
  EXPECT_EQ(ValueFiles(dir_).size(), kValues - 1);  // No temporary beside the values.
  EXPECT_EQ(s->Stats().errors, 1u);
  EXPECT_EQ(s->Stats().puts, kValues - 1);
  EXPECT_EQ(s->FsStats().group_syncs, 4u);  // One syncfs per group, the failed value's included.
  EXPECT_EQ(s->FsStats().value_syncs, 0u);
}

std::atomic<int> failing_syncfs_calls{0};

int FailingSyncFs(int /*fd*/) {
  failing_syncfs_calls.fetch_add(1);
  errno = EIO;
  return -1;
}

// Puts `count` values with keys from `first` in one batch; each must be published and read back
// byte for byte.
void PutAndReadBack(FsStore& s, uint32_t first, size_t count) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<RemotePut> puts;
  for (size_t i = 0; i < count; ++i) {
    payloads.push_back(Payload(first + static_cast<uint32_t>(i), 2000 + 10 * i));
  }
  for (size_t i = 0; i < count; ++i) {
    puts.push_back(RemotePut{.key = Key(first + static_cast<uint32_t>(i)),
                             .codec_id = 3,
                             .raw_bytes = static_cast<uint32_t>(payloads[i].size()),
                             .payload = payloads[i]});
  }
  ASSERT_TRUE(s.Put(puts).ok());
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(puts[i].status.ok()) << i << ": " << puts[i].status.ToString();
    std::vector<std::byte> buf(payloads[i].size());
    RemoteGet g{.key = puts[i].key, .dst = buf};
    ASSERT_TRUE(s.Get(std::span(&g, 1)).ok());
    ASSERT_TRUE(g.status.ok()) << i << ": " << g.status.ToString();
    EXPECT_EQ(buf, payloads[i]) << i;
  }
}

// A group is synced once with syncfs, a single value with its own fdatasync; when syncfs fails,
// each value of the group is synced on its own and every one is still published; without
// `fsync` nothing is synced.
TEST_P(FsStoreTest, AGroupIsSyncedOnceAndAFailedSyncfsFallsBackToEachValue) {
  std::unique_ptr<FsStore> s = Open(Options(GetParam()));
  ASSERT_NE(s, nullptr);
  PutAndReadBack(*s, 0, 1);
  EXPECT_EQ(s->FsStats().group_syncs, 0u);
  EXPECT_EQ(s->FsStats().value_syncs, 1u);
  PutAndReadBack(*s, 100, 10);
  EXPECT_EQ(s->FsStats().group_syncs, 1u);
  EXPECT_EQ(s->FsStats().value_syncs, 1u);

  failing_syncfs_calls = 0;
  FsStore::SetSyncFsForTesting(&FailingSyncFs);
  PutAndReadBack(*s, 200, 10);
  FsStore::SetSyncFsForTesting(nullptr);
  EXPECT_EQ(failing_syncfs_calls.load(), 1);
  EXPECT_EQ(s->FsStats().group_syncs, 1u);
  EXPECT_EQ(s->FsStats().value_syncs, 11u);
  EXPECT_EQ(s->Stats().errors, 0u);
  EXPECT_EQ(ValueFiles(dir_).size(), 21u);

  FsStoreOptions no_sync = Options(GetParam());
  no_sync.fsync = false;
  std::unique_ptr<FsStore> quick = Open(std::move(no_sync));
  ASSERT_NE(quick, nullptr);
  FsStore::SetSyncFsForTesting(&FailingSyncFs);
  PutAndReadBack(*quick, 300, 10);
  FsStore::SetSyncFsForTesting(nullptr);
  EXPECT_EQ(failing_syncfs_calls.load(), 1);  // Not called again.
  EXPECT_EQ(quick->FsStats().group_syncs, 0u);
  EXPECT_EQ(quick->FsStats().value_syncs, 0u);
}

TEST(FsStoreOpenTest, UntrustedDirectoriesAndIncompleteOptionsAreRefused) {
  Result<ScopedTempDir> t = ScopedTempDir::Create();
  ASSERT_TRUE(t.ok());
  const std::string dir = t->Join("shared");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  Result<std::unique_ptr<FsStore>> s = FsStore::Open({.dir = dir, .insecure_plaintext = true});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsInvalidArgument()) << s.status().ToString();
  EXPECT_NE(s.status().message().find("fs_dir"), std::string::npos) << s.status().ToString();

  s = FsStore::Open({.dir = t->Join("a")});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("remote_key_file"), std::string::npos);
  s = FsStore::Open({.dir = t->Join("a"), .key_prefix = "../x", .insecure_plaintext = true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("key_prefix"), std::string::npos);
  s = FsStore::Open({.dir = "", .insecure_plaintext = true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("fs_dir"), std::string::npos);
  // A file where the directory should be.
  std::ofstream(t->Join("file")) << "x";
  s = FsStore::Open({.dir = t->Join("file"), .insecure_plaintext = true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("fs_dir"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace kvtier
