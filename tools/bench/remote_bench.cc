// See remote_bench.h.
#include "bench/remote_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/limits.h"
#include "tiers/redis_store.h"
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

// One round of one mode: put, get and check, delete, one batch per connection at a time. Adds
// the two rates to *mode.
Status RunRound(RemoteStore& store, const RemoteBenchOptions& o, uint64_t blocks,
                RemoteBenchMode* mode) {
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
  if (endpoint.empty()) return Status::InvalidArgument("remote bench: --redis is required");
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

Result<RemoteBenchReport> BenchRemote(const RemoteBenchOptions& o) {
  KV_RETURN_IF_ERROR(o.Validate());
  RemoteKeyring keyring;
  if (o.keyring.has_value()) {
    keyring = *o.keyring;
  } else {
    KV_ASSIGN_OR_RETURN(const std::string text, RemoteKeyring::GenerateText(1));
    KV_ASSIGN_OR_RETURN(keyring, RemoteKeyring::Parse(text));
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
  for (RemoteBenchMode* m : {&r.sealed, &r.plaintext}) {
    m->put_bytes_per_s_median = Median(m->put_bytes_per_s);
    m->get_bytes_per_s_median = Median(m->get_bytes_per_s);
  }
  if (r.plaintext.put_bytes_per_s_median > 0) {
    r.sealed_put_cost = 1 - r.sealed.put_bytes_per_s_median / r.plaintext.put_bytes_per_s_median;
  }
  if (r.plaintext.get_bytes_per_s_median > 0) {
    r.sealed_get_cost = 1 - r.sealed.get_bytes_per_s_median / r.plaintext.get_bytes_per_s_median;
  }
  return r;
}

}  // namespace kvtier
