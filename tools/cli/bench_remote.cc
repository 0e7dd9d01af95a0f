// See bench_remote.h.
#include "bench_remote.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "bench/remote_bench.h"
#include "byte_size.h"
#include "subprocess.h"
#include "tiers/redis_connection.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

struct RedisBenchmarkFigures {
  double set_bytes_per_s = 0, get_bytes_per_s = 0;
};

// redis-benchmark's SET and GET with the same value size, count and pipeline depth, one client,
// on the same server; its CSV lines look like "SET","1234.57",... (requests per second).
Result<RedisBenchmarkFigures> RunRedisBenchmark(const RedisEndpoint& e, uint64_t value_bytes,
                                                uint64_t requests, uint32_t pipeline) {
  KV_ASSIGN_OR_RETURN(
      const std::string csv,
      Capture({"redis-benchmark", "-h", e.host, "-p", std::to_string(e.port), "-t", "set,get", "-n",
               std::to_string(requests), "-d", std::to_string(value_bytes), "-P",
               std::to_string(pipeline), "-c", "1", "--csv"}));
  RedisBenchmarkFigures f;
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
    if (const double r = rps("SET"); r > 0) f.set_bytes_per_s = r * double(value_bytes);
    if (const double r = rps("GET"); r > 0) f.get_bytes_per_s = r * double(value_bytes);
  }
  // redis-benchmark writes one key of its own; leave the user's Redis as it was.
  Capture({"redis-cli", "-h", e.host, "-p", std::to_string(e.port), "DEL", "key:__rand_int__"})
      .status()
      .IgnoreError();  // Best effort: a leftover key of redis-benchmark's own.
  if (too_fast) {
    return Status::IoError("redis-benchmark's run of " + std::to_string(requests) +
                           " requests was too short to time (raise --total-bytes)");
  }
  if (f.set_bytes_per_s == 0 || f.get_bytes_per_s == 0) {
    return Status::IoError("redis-benchmark printed no SET/GET figures");
  }
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
    std::printf("remote tier, %llu values of %llu bytes, batches of %llu, %llu rounds (medians)\n",
                static_cast<unsigned long long>(r.blocks),
                static_cast<unsigned long long>(r.block_bytes),
                static_cast<unsigned long long>(r.batch),
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
    if (rb.has_value()) {
      std::printf("redis-benchmark       SET %s  GET %s\n", Mbps(rb->set_bytes_per_s).c_str(),
                  Mbps(rb->get_bytes_per_s).c_str());
    } else {
      std::printf("redis-benchmark: %s\n", rb_note.c_str());
    }
    return;
  }
  nlohmann::ordered_json j;
  j["put_bytes_per_s"] = r.sealed.put_bytes_per_s_median;
  j["get_bytes_per_s"] = r.sealed.get_bytes_per_s_median;
  j["plaintext_put_bytes_per_s"] = r.plaintext.put_bytes_per_s_median;
  j["plaintext_get_bytes_per_s"] = r.plaintext.get_bytes_per_s_median;
  j["encryption_put_cost"] = r.sealed_put_cost;
  j["encryption_get_cost"] = r.sealed_get_cost;
  j["redis_benchmark_set_bytes_per_s"] = rb.has_value() ? rb->set_bytes_per_s : 0.0;
  j["redis_benchmark_get_bytes_per_s"] = rb.has_value() ? rb->get_bytes_per_s : 0.0;
  if (!rb.has_value()) j["redis_benchmark_note"] = rb_note;
  j["block_bytes"] = r.block_bytes;
  j["blocks"] = r.blocks;
  j["batch"] = r.batch;
  j["rounds"] = r.rounds;
  j["sealed_open"] = sealed_open;
  j["aes_gcm"] = aes_gcm;
  j["put_bytes_per_s_all"] = r.sealed.put_bytes_per_s;
  j["get_bytes_per_s_all"] = r.sealed.get_bytes_per_s;
  j["plaintext_put_bytes_per_s_all"] = r.plaintext.put_bytes_per_s;
  j["plaintext_get_bytes_per_s_all"] = r.plaintext.get_bytes_per_s;
  std::printf("%s\n", JsonText(j, 2).c_str());
}

}  // namespace

BenchRemote::BenchRemote(CLI::App* bench)
    : app_(bench->add_subcommand(
          "remote", "Put/get throughput of the remote tier on a Redis, sealed and plaintext, "
                    "beside redis-benchmark")) {
  app_->add_option("--redis", redis_, "host:port of the Redis (cluster: a seed) (required)")
      ->required();
  app_->add_flag("--cluster", cluster_, "The endpoint is a Redis Cluster seed");
  app_->add_option("--user", user_, "ACL user (password from KVTIER_REDIS_PASSWORD)");
  app_->add_option("--block-bytes", block_text_, "Bytes per value (default 1MiB)");
  app_->add_option("--total-bytes", total_text_, "Bytes per round and mode (default 256MiB)");
  app_->add_option("--batch", batch_, "Values per pipeline (default 8)");
  app_->add_option("--rounds", rounds_, "Rounds per mode, alternating (default 5)");
  app_->add_option("--remote-key-file", key_file_,
                   "Deployment keys (mode 0600); else $KVTIER_REMOTE_KEY; else a fresh key");
  app_->add_option("--sealed-open", sealed_open_,
                   "When sealed gets decrypt: overlapped (while later replies arrive, on a "
                   "worker; the default) or after-reads (after the whole pipeline)")
      ->check(CLI::IsMember({"overlapped", "after-reads"}));
  app_->add_option("--aes-gcm", aes_gcm_,
                   "AES-256-GCM implementation: auto (the fastest available; the default), "
                   "ipsec-mb or openssl")
      ->check(CLI::IsMember({"auto", "ipsec-mb", "openssl"}));
  app_->add_flag("--no-redis-benchmark", no_redis_benchmark_, "Do not run redis-benchmark");
  app_->add_flag("--json", json_, "Print one JSON object");
}

Status BenchRemote::Run() {
  RemoteBenchOptions o{.cluster = cluster_, .user = user_, .batch = batch_, .rounds = rounds_};
  o.sealed_open =
      sealed_open_ == "after-reads" ? SealedOpen::kAfterReads : SealedOpen::kOverlapped;
  if (aes_gcm_ == "openssl") o.aes_gcm = GcmImpl::kOpenSsl;
  if (aes_gcm_ == "ipsec-mb") {
    if (!GcmImplAvailable(GcmImpl::kIpsecMb)) {
      return Status::InvalidArgument(
          "--aes-gcm ipsec-mb: this build or CPU has no libipsec-mb AES-GCM");
    }
    o.aes_gcm = GcmImpl::kIpsecMb;
  }
  const std::string_view url = redis_;
  o.endpoint = std::string(url.substr(url.rfind("redis://", 0) == 0 ? 8 : 0));
  KV_ASSIGN_OR_RETURN(const RedisEndpoint endpoint, ParseRedisEndpoint(o.endpoint));
  if (const char* pw = std::getenv("KVTIER_REDIS_PASSWORD"); pw != nullptr) o.password = pw;
  KV_ASSIGN_OR_RETURN(o.block_bytes, ParseBytes("--block-bytes", block_text_));
  KV_ASSIGN_OR_RETURN(o.total_bytes, ParseBytes("--total-bytes", total_text_));
  if (!key_file_.empty()) {
    KV_ASSIGN_OR_RETURN(o.keyring, RemoteKeyring::LoadFile(key_file_));
  } else if (const char* text = std::getenv("KVTIER_REMOTE_KEY"); text != nullptr) {
    Result<RemoteKeyring> ring = RemoteKeyring::Parse(text);
    if (!ring.ok()) return ring.status().WithContext("$KVTIER_REMOTE_KEY");
    o.keyring = std::move(ring).value();
  }
  KV_ASSIGN_OR_RETURN(const RemoteBenchReport r, ::kvtier::BenchRemote(o));
  std::optional<RedisBenchmarkFigures> rb;
  std::string note = "not run (--no-redis-benchmark)";
  if (!no_redis_benchmark_) {
    if (!o.password.empty()) {
      note = "not run: it would need the password on its command line";
    } else {
      Result<RedisBenchmarkFigures> f =
          RunRedisBenchmark(endpoint, o.block_bytes, r.blocks, o.batch);
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
