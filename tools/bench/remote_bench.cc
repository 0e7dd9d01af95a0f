// See remote_bench.h.
#include "bench/remote_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/hex.h"
#include "core/limits.h"
#include "tiers/fs/fs_options.h"
#include "tiers/fs/fs_store.h"
#include "tiers/redis/redis_options.h"
#include "tiers/redis/redis_store.h"
#include "tiers/remote_lanes.h"

namespace kvtier {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

BlockKey BenchKey(uint64_t i) {
  BlockKey k;
  for (size_t b = 0; b < k.chunk_hash.size(); ++b) {
    k.chunk_hash[b] = static_cast<uint8_t>((i >> ((b % 8) * 8)) ^ (b * 29));
  }
  k.layer = static_cast<uint32_t>(i % 80);
  return k;
}

// A payload that differs per block (so a mixed-up value is caught) and is not all one byte.
void FillPayload(uint64_t i, std::vector<std::byte>* p) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
  for (size_t b = 0; b + 8 <= p->size(); b += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p->data() + b, &x, 8);
  }
}

// Runs fn(0) .. fn(n - 1) side by side (fn(0) on this thread); the first error.
Status RunSideBySide(size_t n, const std::function<Status(size_t)>& fn) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (size_t c = 1; c < n; ++c) threads.emplace_back([&, c] { out[c] = fn(c); });
  out[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (Status& s : out) KV_RETURN_IF_ERROR(std::move(s));
  return Status::Ok();
}

// Called with a step's keys after their puts and before their gets are timed.
using BeforeGets = std::function<void(std::span<const BlockKey>)>;

// The fs tier's baseline: each value in a plain file "<dir>/<key hex>", written to a temporary,
// synced, renamed, and read back whole, with no header, check or seal.
class PlainFiles final : public RemoteStore {
 public:
  PlainFiles(std::string dir, bool sync) : dir_(std::move(dir)), sync_(sync) {}
  std::string Path(const BlockKey& key) const {
    return dir_ + "/" +
           HexOf(std::string_view(reinterpret_cast<const char*>(key.chunk_hash.data()), 16)) +
           "." + std::to_string(key.layer);
  }
  Status Put(std::span<RemotePut> entries) override {
    for (RemotePut& e : entries) {
      const std::string path = Path(e.key), temp = path + ".tmp";
      const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) return Status::FromErrno(errno, temp);
      const bool ok = ::write(fd, e.payload.data(), e.payload.size()) ==
                          static_cast<ssize_t>(e.payload.size()) &&
                      (!sync_ || ::fdatasync(fd) == 0);
      ::close(fd);
      if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) return Status::IoError(temp);
      e.status = Status::Ok();
    }
    return Status::Ok();
  }
  Status Get(std::span<RemoteGet> entries) override {
    for (RemoteGet& e : entries) {
      const int fd = ::open(Path(e.key).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::FromErrno(errno, Path(e.key));
      const ssize_t n = ::read(fd, e.dst.data(), e.dst.size());
      ::close(fd);
      if (n < 0) return Status::IoError(Path(e.key));
      e.payload_bytes = static_cast<uint32_t>(n);
      e.status = Status::Ok();
    }
    return Status::Ok();
  }
  Status Exists(std::span<RemoteExists> entries) override {
    for (RemoteExists& e : entries) {
      struct stat st {};
      e.exists = ::stat(Path(e.key).c_str(), &st) == 0;
      e.status = Status::Ok();
    }
    return Status::Ok();
  }
  Status Delete(std::span<RemoteDelete> entries) override {
    for (RemoteDelete& e : entries) {
      ::unlink(Path(e.key).c_str());
      e.status = Status::Ok();
    }
    return Status::Ok();
  }
  RemoteStoreStats Stats() const override { return {}; }

 private:
  std::string dir_;
  bool sync_;
};

// Drops a file's pages from the page cache (those already written back; with fsync, all).
void DropCached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// One round of one mode: put, get and check, delete, one batch per connection at a time. Adds
// the two rates to *mode.
Status RunRound(RemoteStore& store, const RemoteBenchOptions& o, uint64_t blocks,
                RemoteBenchMode* mode, const BeforeGets& before_gets = {}) {
  const size_t lanes = o.connections;
  const size_t slots = lanes * o.batch;
  std::vector<std::vector<std::byte>> payloads(slots, std::vector<std::byte>(o.block_bytes));
  std::vector<std::vector<std::byte>> outs(slots, std::vector<std::byte>(o.block_bytes));
  double put_s = 0, get_s = 0;
  for (uint64_t step = 0; step < blocks; step += slots) {
    // Connection c's batch: blocks [first(c), first(c) + count(c)).
    const auto first = [&](size_t c) { return step + c * o.batch; };
    const auto count = [&](size_t c) -> size_t {
      return first(c) >= blocks ? 0 : static_cast<size_t>(std::min<uint64_t>(o.batch,
                                                                              blocks - first(c)));
    };
    for (size_t c = 0; c < lanes; ++c) {
      for (size_t k = 0; k < count(c); ++k) FillPayload(first(c) + k, &payloads[c * o.batch + k]);
    }
    auto t = std::chrono::steady_clock::now();
    const Status put = RunSideBySide(lanes, [&](size_t c) -> Status {
      std::vector<RemotePut> puts(count(c));
      for (size_t k = 0; k < puts.size(); ++k) {
        puts[k] = {.key = BenchKey(first(c) + k), .payload = payloads[c * o.batch + k]};
      }
      if (puts.empty()) return Status::Ok();
      KV_RETURN_IF_ERROR(store.Put(puts));
      for (const RemotePut& p : puts) KV_RETURN_IF_ERROR(p.status.WithContext("remote bench put"));
      return Status::Ok();
    });
    put_s += SecondsSince(t);
    KV_RETURN_IF_ERROR(put);
    if (before_gets) {
      std::vector<BlockKey> keys;
      for (size_t c = 0; c < lanes; ++c) {
        for (size_t k = 0; k < count(c); ++k) keys.push_back(BenchKey(first(c) + k));
      }
      before_gets(keys);
    }
    t = std::chrono::steady_clock::now();
    std::vector<std::vector<RemoteGet>> gets(lanes);
    const Status got = RunSideBySide(lanes, [&](size_t c) -> Status {
      gets[c].resize(count(c));
      for (size_t k = 0; k < gets[c].size(); ++k) {
        gets[c][k] = {.key = BenchKey(first(c) + k), .dst = outs[c * o.batch + k]};
      }
      return gets[c].empty() ? Status::Ok() : store.Get(gets[c]);
    });
    get_s += SecondsSince(t);
    KV_RETURN_IF_ERROR(got);
    for (size_t c = 0; c < lanes; ++c) {
      for (size_t k = 0; k < gets[c].size(); ++k) {
        const size_t slot = c * o.batch + k;
        KV_RETURN_IF_ERROR(gets[c][k].status.WithContext("remote bench get"));
        if (gets[c][k].payload_bytes != o.block_bytes || outs[slot] != payloads[slot]) {
          return Status::Corruption("remote bench: block " + std::to_string(first(c) + k) +
                                    " did not read back intact");
        }
      }
      std::vector<RemoteDelete> deletes(count(c));
      for (size_t k = 0; k < deletes.size(); ++k) deletes[k].key = BenchKey(first(c) + k);
      if (!deletes.empty()) KV_RETURN_IF_ERROR(store.Delete(deletes));
    }
  }
  const double bytes = static_cast<double>(blocks * o.block_bytes);
  mode->put_bytes_per_s.push_back(put_s > 0 ? bytes / put_s : 0);
  mode->get_bytes_per_s.push_back(get_s > 0 ? bytes / get_s : 0);
  return Status::Ok();
}

// `connections` stores on the server, as one RemoteStore (lanes when more than one).
Result<std::unique_ptr<RemoteStore>> OpenLanes(const RedisStoreOptions& options,
                                               uint32_t connections) {
  std::vector<std::unique_ptr<RemoteStore>> lanes;
  for (uint32_t i = 0; i < connections; ++i) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> lane, RedisStore::Open(options));
    lanes.push_back(std::move(lane));
  }
  if (lanes.size() == 1) return std::move(lanes[0]);
  return std::unique_ptr<RemoteStore>(std::make_unique<RemoteStoreLanes>(std::move(lanes)));
}

}  // namespace

Status RemoteBenchOptions::Validate() const {
  if (endpoint.empty() == fs_dir.empty()) {
    return Status::InvalidArgument("remote bench: give --redis or --fs-dir (one of them)");
  }
  if ((fs_cold || !fs_fsync) && fs_dir.empty()) {
    return Status::InvalidArgument("remote bench: --cold and --no-fsync are for --fs-dir");
  }
  if (block_bytes == 0 || block_bytes > kRemoteValueBytesMax) {
    return Status::InvalidArgument("remote bench: --block-bytes must be 1 B.." +
                                   std::to_string(kRemoteValueBytesMax) + " bytes");
  }
  if (total_bytes < block_bytes || total_bytes > kRemoteBenchTotalBytesMax) {
    return Status::InvalidArgument(
        "remote bench: --total-bytes must hold at least one block and at most 16 GiB");
  }
  if (batch == 0 || batch > kRemoteBatchMax) {
    return Status::InvalidArgument("remote bench: --batch must be 1.." +
                                   std::to_string(kRemoteBatchMax));
  }
  if (rounds == 0 || rounds > kRemoteBenchRoundsMax) {
    return Status::InvalidArgument("remote bench: --rounds must be 1..100");
  }
  if (connections == 0 || connections > kRemoteConnectionsMax) {
    return Status::InvalidArgument("remote bench: --connections must be 1.." +
                                   std::to_string(kRemoteConnectionsMax));
  }
  return Status::Ok();
}

// The fs tier's rounds: sealed, plaintext and the plain files, alternating, in fs_dir.
Result<RemoteBenchReport> BenchFs(const RemoteBenchOptions& o, const RemoteKeyring& keyring,
                                  RemoteBenchReport r) {
  const std::string prefix = "kvtier-bench-" + std::to_string(::getpid());
  const std::string files_dir = o.fs_dir + "/" + prefix + "-files";
  if (::mkdir(o.fs_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "--fs-dir " + o.fs_dir);
  }
  if (::mkdir(files_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, files_dir);
  }
  FsStoreOptions base{.dir = o.fs_dir, .fsync = o.fs_fsync, .key_prefix = prefix};
  FsStoreOptions sealed_options = base;
  sealed_options.keyring = keyring;
  sealed_options.aes_gcm = o.aes_gcm;
  FsStoreOptions plain_options = base;
  plain_options.insecure_plaintext = true;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<FsStore> sealed, FsStore::Open(sealed_options));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<FsStore> plain, FsStore::Open(plain_options));
  PlainFiles files(files_dir, o.fs_fsync);
  const auto cold = [&](const std::function<std::string(const BlockKey&)>& path) -> BeforeGets {
    if (!o.fs_cold) return {};
    return [path](std::span<const BlockKey> keys) {
      for (const BlockKey& k : keys) DropCached(path(k));
    };
  };
  const BeforeGets sealed_cold =
      cold([&](const BlockKey& k) { return o.fs_dir + "/" + sealed->RelativePath(k); });
  const BeforeGets plain_cold =
      cold([&](const BlockKey& k) { return o.fs_dir + "/" + plain->RelativePath(k); });
  const BeforeGets files_cold = cold([&](const BlockKey& k) { return files.Path(k); });
  Status s;
  for (uint32_t round = 0; round < o.rounds && s.ok(); ++round) {
    s = RunRound(files, o, r.blocks, &r.files, files_cold);
    if (s.ok()) s = RunRound(*plain, o, r.blocks, &r.plaintext, plain_cold);
    if (s.ok()) s = RunRound(*sealed, o, r.blocks, &r.sealed, sealed_cold);
  }
  ::rmdir(files_dir.c_str());
  KV_RETURN_IF_ERROR(s);
  r.files.put_bytes_per_s_median = Median(r.files.put_bytes_per_s);
  r.files.get_bytes_per_s_median = Median(r.files.get_bytes_per_s);
  return r;
}

// Medians and what sealing costs, from the rounds.
void Summarize(RemoteBenchReport* r) {
  for (RemoteBenchMode* m : {&r->sealed, &r->plaintext}) {
    m->put_bytes_per_s_median = Median(m->put_bytes_per_s);
    m->get_bytes_per_s_median = Median(m->get_bytes_per_s);
  }
  if (r->plaintext.put_bytes_per_s_median > 0) {
    r->sealed_put_cost =
        1 - r->sealed.put_bytes_per_s_median / r->plaintext.put_bytes_per_s_median;
  }
  if (r->plaintext.get_bytes_per_s_median > 0) {
    r->sealed_get_cost =
        1 - r->sealed.get_bytes_per_s_median / r->plaintext.get_bytes_per_s_median;
  }
}

Result<RemoteBenchReport> BenchRemote(const RemoteBenchOptions& o) {
  KV_RETURN_IF_ERROR(o.Validate());
  RemoteKeyring keyring;
  if (o.keyring.has_value()) {
    keyring = *o.keyring;
  } else {
    KV_ASSIGN_OR_RETURN(const std::string text, RemoteKeyring::GenerateText(1));
    KV_ASSIGN_OR_RETURN(keyring, RemoteKeyring::Parse(text));
  }
  if (!o.fs_dir.empty()) {
    RemoteBenchReport r{.block_bytes = o.block_bytes,
                        .blocks = o.total_bytes / o.block_bytes,
                        .batch = o.batch,
                        .rounds = o.rounds,
                        .connections = o.connections,
                        .fs = true,
                        .fs_cold = o.fs_cold,
                        .fs_fsync = o.fs_fsync};
    KV_ASSIGN_OR_RETURN(r, BenchFs(o, keyring, r));
    Summarize(&r);
    return r;
  }
  const std::string prefix = "kvtier-bench-" + std::to_string(::getpid());
  RedisStoreOptions base{.endpoints = {o.endpoint},
                         .mode = o.cluster ? RedisMode::kCluster : RedisMode::kStandalone,
                         .user = o.user,
                         .password = o.password,
                         .connect_timeout_ms = 1000,
                         .command_timeout_ms = 10'000,  // Large pipelines of large values.
                         .key_prefix = prefix};
  RedisStoreOptions sealed_options = base;
  sealed_options.keyring = keyring;
  sealed_options.sealed_open = o.sealed_open;
  sealed_options.aes_gcm = o.aes_gcm;
  RedisStoreOptions plain_options = base;
  plain_options.insecure_plaintext = true;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStore> sealed, OpenLanes(sealed_options,
                                                                      o.connections));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStore> plain, OpenLanes(plain_options, o.connections));
  RemoteBenchReport r;
  r.block_bytes = o.block_bytes;
  r.blocks = o.total_bytes / o.block_bytes;
  r.batch = o.batch;
  r.rounds = o.rounds;
  r.connections = o.connections;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    KV_RETURN_IF_ERROR(RunRound(*plain, o, r.blocks, &r.plaintext));
    KV_RETURN_IF_ERROR(RunRound(*sealed, o, r.blocks, &r.sealed));
  }
  Summarize(&r);
  return r;
}

}  // namespace kvtier
