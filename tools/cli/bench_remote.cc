// See bench_remote.h.
#include "bench_remote.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "bench/remote_bench.h"
#include "byte_size.h"
#include "json_output.h"
#include "subprocess.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::cli {
namespace {

struct RedisBenchmarkFigures {
  // Medians over the runs; then each run's figure.
  double set_bytes_per_s = 0, get_bytes_per_s = 0, get_distinct_bytes_per_s = 0;
  std::vector<double> set_all, get_all, get_distinct_all;
  std::string distinct_note;  // Why there is no distinct-keys figure (a cluster, an error).
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// redis-benchmark's rates (bytes per second) of `tests` ("set,get" or "get"), `clients` clients,
// with `extra` arguments; its CSV lines look like "SET","1234.57",... (requests per second).
Result<std::pair<double, double>> RunRedisBenchmarkOnce(const RedisEndpoint& e,
                                                        uint64_t value_bytes, uint64_t requests,
                                                        uint32_t pipeline, uint32_t clients,
                                                        const char* tests,
                                                        std::vector<std::string> extra) {
  std::vector<std::string> argv = {"redis-benchmark",
                                   "-h",
                                   e.host,
                                   "-p",
                                   std::to_string(e.port),
                                   "-t",
                                   tests,
                                   "-n",
                                   std::to_string(requests),
                                   "-d",
                                   std::to_string(value_bytes),
                                   "-P",
                                   std::to_string(pipeline),
                                   "-c",
                                   std::to_string(clients),
                                   "--csv"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  KV_ASSIGN_OR_RETURN(const std::string csv, Capture(argv));
  double set = 0, get = 0;
  std::istringstream lines(csv);
  std::string line;
  bool too_fast = false;
  while (std::getline(lines, line)) {
    const auto rps = [&](const char* test) -> double {
      const std::string head = std::string("\"") + test + "\",\"";
      if (line.rfind(head, 0) != 0) return 0;
      const double v = std::strtod(line.c_str() + head.size(), nullptr);
      // A run shorter than redis-benchmark's clock tick prints "inf" requests per second.
      if (!std::isfinite(v)) too_fast = true;
      return std::isfinite(v) ? v : 0;
    };
    if (const double r = rps("SET"); r > 0) set = r * double(value_bytes);
    if (const double r = rps("GET"); r > 0) get = r * double(value_bytes);
  }
  if (too_fast) {
    return Status::IoError("redis-benchmark's run of " + std::to_string(requests) +
                           " requests was too short to time (raise --total-bytes)");
  }
  if (get == 0) return Status::IoError("redis-benchmark printed no GET figure");
  return std::pair(set, get);
}

// redis-benchmark's key names for -r: "key:" and 12 digits.
std::string RandKey(uint64_t i) {
  char name[32];
  std::snprintf(name, sizeof(name), "key:%012llu", static_cast<unsigned long long>(i));
  return name;
}

// Writes (`set`) or unlinks `count` values named as redis-benchmark's -r names them, pipelined.
Status RandKeys(const RedisEndpoint& e, uint64_t count, uint64_t value_bytes, bool set) {
  RedisConnection conn(e, RedisConnectionOptions{.command_timeout_ms = 10'000}, nullptr);
  const std::string value(set ? value_bytes : 0, 'v');
  constexpr uint64_t kBatch = 64;
  for (uint64_t first = 0; first < count; first += kBatch) {
    const uint64_t n = std::min(kBatch, count - first);
    std::vector<std::string> names(n);
    std::vector<RedisCommand> commands(n);
    for (uint64_t i = 0; i < n; ++i) {
      names[i] = RandKey(first + i);
      RedisCommand& c = commands[i];
      c.args[c.argc++] = set ? "SET" : "UNLINK";
      c.args[c.argc++] = names[i];
      if (set) c.args[c.argc++] = value;
    }
    std::vector<RedisReplyPtr> replies(n);
    KV_RETURN_IF_ERROR(conn.Execute(commands, replies));
    for (const RedisReplyPtr& reply : replies) {
      if (const char* error = RedisErrorText(reply.get()); error != nullptr) {
        return Status::IoError(std::string("writing redis-benchmark's keys: ") + error);
      }
    }
  }
  return Status::Ok();
}

// redis-benchmark's SET and GET with the same value size, count and pipeline depth, as many
// clients as kvtier has connections, on the same server, `runs` times (medians, as kvtier's
// rounds). Its GET reads one key again and again, so the server sends one value that stays in its
// caches; it also runs GET over as many distinct keys as kvtier's rounds read (its -r: random keys
// among `requests`, written beforehand), the access pattern kvtier's gets have.
Result<RedisBenchmarkFigures> RunRedisBenchmark(const RedisEndpoint& e, uint64_t value_bytes,
                                                uint64_t requests, uint32_t pipeline, uint32_t runs,
                                                bool cluster, uint32_t clients) {
  RedisBenchmarkFigures f;
  Status s;
  for (uint32_t i = 0; i < runs && s.ok(); ++i) {
    Result<std::pair<double, double>> r =
        RunRedisBenchmarkOnce(e, value_bytes, requests, pipeline, clients, "set,get", {});
    if (!r.ok()) s = r.status();
    if (r.ok()) f.set_all.push_back(r->first), f.get_all.push_back(r->second);
  }
  Status distinct = cluster ? Status::NotSupported("not run on a cluster")
                            : RandKeys(e, requests, value_bytes, /*set=*/true);
  for (uint32_t i = 0; i < runs && s.ok() && distinct.ok(); ++i) {
    Result<std::pair<double, double>> r = RunRedisBenchmarkOnce(
        e, value_bytes, requests, pipeline, clients, "get", {"-r", std::to_string(requests)});
    if (!r.ok()) distinct = r.status();
    if (r.ok()) f.get_distinct_all.push_back(r->second);
  }
  // redis-benchmark's keys, ours and its own; leave the user's Redis as it was.
  if (!cluster) RandKeys(e, requests, 0, /*set=*/false).IgnoreError();  // Best effort, as:
  Capture({"redis-cli", "-h", e.host, "-p", std::to_string(e.port), "DEL", "key:__rand_int__"})
      .status()
      .IgnoreError();  // Best effort: a leftover key of redis-benchmark's own.
  KV_RETURN_IF_ERROR(s);
  if (!distinct.ok()) {
    f.get_distinct_all.clear();
    f.distinct_note = distinct.ToString();
  }
  f.set_bytes_per_s = Median(f.set_all);
  f.get_bytes_per_s = Median(f.get_all);
  f.get_distinct_bytes_per_s = Median(f.get_distinct_all);
  if (f.set_bytes_per_s == 0) return Status::IoError("redis-benchmark printed no SET figure");
  return f;
}

std::string Mbps(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MB/s", bytes_per_s / 1e6);
  return buf;
}

void Print(const RemoteBenchReport& r, const std::optional<RedisBenchmarkFigures>& rb,
           const std::string& rb_note, const std::string& sealed_open, const std::string& aes_gcm,
           bool json) {
  if (!json) {
    std::printf(
        "remote tier, %llu values of %llu bytes, batches of %llu on %llu connections, %llu rounds "
        "(medians)\n",
        static_cast<unsigned long long>(r.blocks), static_cast<unsigned long long>(r.block_bytes),
        static_cast<unsigned long long>(r.batch), static_cast<unsigned long long>(r.connections),
        static_cast<unsigned long long>(r.rounds));
    std::printf("sealed (AES-256-GCM)  put %s  get %s  (opened %s, %s)\n",
                Mbps(r.sealed.put_bytes_per_s_median).c_str(),
                Mbps(r.sealed.get_bytes_per_s_median).c_str(), sealed_open.c_str(),
                aes_gcm.c_str());
    std::printf("plaintext             put %s  get %s\n",
                Mbps(r.plaintext.put_bytes_per_s_median).c_str(),
                Mbps(r.plaintext.get_bytes_per_s_median).c_str());
    std::printf("encryption costs %.1f %% of put, %.1f %% of get throughput\n",
                100 * r.sealed_put_cost, 100 * r.sealed_get_cost);
    if (r.fs) {
      std::printf("plain files           put %s  get %s  (%s reads, %s)\n",
                  Mbps(r.files.put_bytes_per_s_median).c_str(),
                  Mbps(r.files.get_bytes_per_s_median).c_str(), r.fs_cold ? "cold" : "cached",
                  r.fs_fsync ? "synced" : "not synced");
    } else if (rb.has_value()) {
      std::printf("redis-benchmark       SET %s  GET %s (one key), %s (distinct keys)\n",
                  Mbps(rb->set_bytes_per_s).c_str(), Mbps(rb->get_bytes_per_s).c_str(),
                  Mbps(rb->get_distinct_bytes_per_s).c_str());
    } else {
      std::printf("redis-benchmark: %s\n", rb_note.c_str());
    }
    return;
  }
  nlohmann::ordered_json j;
  j["store"] = r.fs ? "fs" : "redis";
  j["put_bytes_per_s"] = r.sealed.put_bytes_per_s_median;
  j["get_bytes_per_s"] = r.sealed.get_bytes_per_s_median;
  j["plaintext_put_bytes_per_s"] = r.plaintext.put_bytes_per_s_median;
  j["plaintext_get_bytes_per_s"] = r.plaintext.get_bytes_per_s_median;
  j["encryption_put_cost"] = r.sealed_put_cost;
  j["encryption_get_cost"] = r.sealed_get_cost;
  j["redis_benchmark_set_bytes_per_s"] = rb.has_value() ? rb->set_bytes_per_s : 0.0;
  j["redis_benchmark_get_bytes_per_s"] = rb.has_value() ? rb->get_bytes_per_s : 0.0;
  j["redis_benchmark_get_distinct_bytes_per_s"] =
      rb.has_value() ? rb->get_distinct_bytes_per_s : 0.0;
  if (rb.has_value() && !rb->distinct_note.empty()) {
    j["redis_benchmark_distinct_note"] = rb->distinct_note;
  }
  if (!rb.has_value()) j["redis_benchmark_note"] = rb_note;
  if (r.fs) {
    j["fs_cold"] = r.fs_cold;
    j["fs_fsync"] = r.fs_fsync;
    j["files_put_bytes_per_s"] = r.files.put_bytes_per_s_median;
    j["files_get_bytes_per_s"] = r.files.get_bytes_per_s_median;
    j["files_put_bytes_per_s_all"] = r.files.put_bytes_per_s;
    j["files_get_bytes_per_s_all"] = r.files.get_bytes_per_s;
  }
  j["block_bytes"] = r.block_bytes;
  j["blocks"] = r.blocks;
  j["batch"] = r.batch;
  j["connections"] = r.connections;
  j["rounds"] = r.rounds;
  j["sealed_open"] = sealed_open;
  j["aes_gcm"] = aes_gcm;
  j["put_bytes_per_s_all"] = r.sealed.put_bytes_per_s;
  j["get_bytes_per_s_all"] = r.sealed.get_bytes_per_s;
  j["plaintext_put_bytes_per_s_all"] = r.plaintext.put_bytes_per_s;
  j["plaintext_get_bytes_per_s_all"] = r.plaintext.get_bytes_per_s;
  if (rb.has_value()) {
    j["redis_benchmark_set_bytes_per_s_all"] = rb->set_all;
    j["redis_benchmark_get_bytes_per_s_all"] = rb->get_all;
    j["redis_benchmark_get_distinct_bytes_per_s_all"] = rb->get_distinct_all;
  }
  std::printf("%s\n", JsonText(j, 2).c_str());
}

}  // namespace

BenchRemote::BenchRemote(CLI::App* bench)
    : app_(bench->add_subcommand(
          "remote",
          "Put/get throughput of the remote tier on a Redis (beside redis-benchmark) "
          "or on a directory (the fs tier, beside plain files), sealed and plaintext")) {
  app_->add_option("--redis", redis_, "host:port of the Redis (cluster: a seed)");
  app_->add_option("--fs-dir", fs_dir_,
                   "A directory: the fs tier there instead of a Redis (fs_dir; docs/fs_tier.md)");
  app_->add_flag("--cold", cold_,
                 "With --fs-dir: drop each round's values from the page cache before reading");
  app_->add_flag("--no-fsync", no_fsync_,
                 "With --fs-dir: publish values without syncing them first (fs_fsync=false)");
  app_->add_flag("--cluster", cluster_, "The endpoint is a Redis Cluster seed");
  app_->add_option("--user", user_, "ACL user (password from KVTIER_REDIS_PASSWORD)");
  app_->add_option("--block-bytes", block_text_, "Bytes per value (default 1MiB)");
  app_->add_option("--total-bytes", total_text_, "Bytes per round and mode (default 256MiB)");
  app_->add_option("--batch", batch_, "Values per pipeline (default 8)");
  app_->add_option("--connections", connections_,
                   "Connections side by side, each with its own pipeline, as the engine's "
                   "remote_connections lanes (default 1); redis-benchmark gets as many clients");
  app_->add_option("--rounds", rounds_, "Rounds per mode, alternating (default 5)");
  app_->add_option("--remote-key-file", key_file_,
                   "Deployment keys (mode 0600); else $KVTIER_REMOTE_KEY; else a fresh key");
  app_->add_option("--sealed-open", sealed_open_,
                   "When sealed gets decrypt: as-read (each as soon as it has landed, on the "
                   "reading thread; the default), overlapped (while later replies arrive, on a "
                   "worker) or after-reads (after the whole pipeline)")
      ->check(CLI::IsMember({"overlapped", "as-read", "after-reads"}));
  app_->add_option("--aes-gcm", aes_gcm_,
                   "AES-256-GCM implementation: auto (the fastest available; the default), "
                   "ipsec-mb or openssl")
      ->check(CLI::IsMember({"auto", "ipsec-mb", "openssl"}));
  app_->add_flag("--no-redis-benchmark", no_redis_benchmark_, "Do not run redis-benchmark");
  app_->add_flag("--json", json_, "Print one JSON object");
}

Status BenchRemote::Run() {
  RemoteBenchOptions o{.cluster = cluster_,
                       .user = user_,
                       .batch = batch_,
                       .rounds = rounds_,
                       .connections = connections_};
  o.sealed_open = sealed_open_ == "after-reads" ? SealedOpen::kAfterReads
                  : sealed_open_ == "as-read"   ? SealedOpen::kAsRead
                                                : SealedOpen::kOverlapped;
  if (aes_gcm_ == "openssl") o.aes_gcm = GcmImpl::kOpenSsl;
  if (aes_gcm_ == "ipsec-mb") {
    if (!GcmImplAvailable(GcmImpl::kIpsecMb)) {
      return Status::InvalidArgument(
          "--aes-gcm ipsec-mb: this build or CPU has no libipsec-mb AES-GCM");
    }
    o.aes_gcm = GcmImpl::kIpsecMb;
  }
  o.fs_dir = fs_dir_;
  o.fs_cold = cold_;
  o.fs_fsync = !no_fsync_;
  if (redis_.empty() == fs_dir_.empty()) {
    return Status::InvalidArgument("bench remote: give --redis or --fs-dir (one of them)");
  }
  const std::string_view url = redis_;
  o.endpoint = std::string(url.substr(url.rfind("redis://", 0) == 0 ? 8 : 0));
  RedisEndpoint endpoint;
  if (!o.endpoint.empty()) {
    KV_ASSIGN_OR_RETURN(endpoint, ParseRedisEndpoint(o.endpoint));
  }
  if (const char* pw = std::getenv("KVTIER_REDIS_PASSWORD"); pw != nullptr) o.password = pw;
  KV_ASSIGN_OR_RETURN(o.block_bytes, ParseBytes("--block-bytes", block_text_));
  KV_ASSIGN_OR_RETURN(o.total_bytes, ParseBytes("--total-bytes", total_text_));
  if (!key_file_.empty()) {
    KV_ASSIGN_OR_RETURN(o.keyring, RemoteKeyring::LoadFile(key_file_, "--remote-key-file"));
  } else if (const char* text = std::getenv("KVTIER_REMOTE_KEY"); text != nullptr) {
    Result<RemoteKeyring> ring = RemoteKeyring::Parse(text);
    if (!ring.ok()) return ring.status().WithContext("$KVTIER_REMOTE_KEY");
    o.keyring = std::move(ring).value();
  }
  KV_ASSIGN_OR_RETURN(const RemoteBenchReport r, ::kvtier::BenchRemote(o));
  std::optional<RedisBenchmarkFigures> rb;
  std::string note = "not run (--no-redis-benchmark)";
  if (r.fs) {
    note = "not run: --fs-dir (the plain files are the baseline)";
  } else if (!no_redis_benchmark_) {
    if (!o.password.empty()) {
      note = "not run: it would need the password on its command line";
    } else {
      Result<RedisBenchmarkFigures> f = RunRedisBenchmark(
          endpoint, o.block_bytes, r.blocks, o.batch, o.rounds, cluster_, o.connections);
      if (f.ok()) {
        rb = *f;
      } else {
        note = f.status().ToString();
      }
    }
  }
  Print(r, rb, note, sealed_open_, GcmImplName(o.aes_gcm.value_or(DefaultGcmImpl())), json_);
  return Status::Ok();
}

}  // namespace kvtier::cli
