// See remote_bench.h.
#include "bench/remote_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/limits.h"
#include "tiers/redis_store.h"

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

// One round of one mode: put, get and check, delete. Adds the two rates to *mode.
Status RunRound(RedisStore& store, const RemoteBenchOptions& o, uint64_t blocks,
                RemoteBenchMode* mode) {
  std::vector<std::vector<std::byte>> payloads(o.batch, std::vector<std::byte>(o.block_bytes));
  std::vector<std::vector<std::byte>> outs(o.batch, std::vector<std::byte>(o.block_bytes));
  double put_s = 0, get_s = 0;
  for (uint64_t base = 0; base < blocks; base += o.batch) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(o.batch, blocks - base));
    std::vector<RemotePut> puts(n);
    for (size_t k = 0; k < n; ++k) {
      FillPayload(base + k, &payloads[k]);
      puts[k] = {.key = BenchKey(base + k), .payload = payloads[k]};
    }
    auto t = std::chrono::steady_clock::now();
    KV_RETURN_IF_ERROR(store.Put(puts));
    put_s += SecondsSince(t);
    for (const RemotePut& p : puts) KV_RETURN_IF_ERROR(p.status.WithContext("remote bench put"));
    std::vector<RemoteGet> gets(n);
    for (size_t k = 0; k < n; ++k) gets[k] = {.key = BenchKey(base + k), .dst = outs[k]};
    t = std::chrono::steady_clock::now();
    KV_RETURN_IF_ERROR(store.Get(gets));
    get_s += SecondsSince(t);
    for (size_t k = 0; k < n; ++k) {
      KV_RETURN_IF_ERROR(gets[k].status.WithContext("remote bench get"));
      if (gets[k].payload_bytes != o.block_bytes || outs[k] != payloads[k]) {
        return Status::Corruption("remote bench: block " + std::to_string(base + k) +
                                  " did not read back intact");
      }
    }
    std::vector<RemoteDelete> deletes(n);
    for (size_t k = 0; k < n; ++k) deletes[k].key = BenchKey(base + k);
    KV_RETURN_IF_ERROR(store.Delete(deletes));
  }
  const double bytes = static_cast<double>(blocks * o.block_bytes);
  mode->put_bytes_per_s.push_back(put_s > 0 ? bytes / put_s : 0);
  mode->get_bytes_per_s.push_back(get_s > 0 ? bytes / get_s : 0);
  return Status::Ok();
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
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> sealed, RedisStore::Open(sealed_options));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> plain, RedisStore::Open(plain_options));
  RemoteBenchReport r;
  r.block_bytes = o.block_bytes;
  r.blocks = o.total_bytes / o.block_bytes;
  r.batch = o.batch;
  r.rounds = o.rounds;
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
