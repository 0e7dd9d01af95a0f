// The Redis store's rows of the options table (engine/options_table.h merges them in through
// TierProvider::OptionRows()): remote_endpoints (the switch) and the settings of the Redis
// connection, among them the two every store of the remote tier has (remote_key_prefix,
// remote_insecure_plaintext, which the fs store's rows hold too), each written into
// RedisStoreOptions.
#include <any>
#include <span>
#include <string>
#include <vector>

#include "core/option_spec.h"
#include "tiers/redis/redis_options.h"
#include "tiers/redis/redis_provider.h"

namespace kvtier {
namespace {

constexpr OptionSpec kRows[] = {
    {.name = "remote_endpoints", .type = OptionType::kStrings, .default_text = "none",
     .cpp_field = "remote.endpoints",
     .doc = "Redis host:port (cluster: seeds); none: no remote tier",
     .note = "C: one comma-separated string", .aliases = "redis",
     .tier = kRedisStoreName, .tier_switch = true,
     .set_tier = [](std::any& a, const OptionValue& v) {
       const std::vector<std::string>& endpoints = OptionStrings(v);
       if (endpoints.empty()) {
         a.reset();
         return Status::Ok();
       }
       if (!a.has_value()) a = RedisStoreOptions{};
       return OnTierOptions<RedisStoreOptions>(
           a, [&](RedisStoreOptions& r) { r.endpoints = endpoints; });
     }},
    {.name = "remote_cluster", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "remote.mode", .doc = "The endpoints are Redis Cluster seeds",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.mode = OptionBool(v) ? RedisMode::kCluster : RedisMode::kStandalone;
       });
     }},
    {.name = "remote_user", .type = OptionType::kString, .default_text = "\"\"",
     .cpp_field = "remote.user", .doc = "Redis ACL user; empty: the default user",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.user = OptionString(v);
       });
     }},
    {.name = "remote_password", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "remote.password",
     .doc = "Redis AUTH password; empty: no AUTH",
     .note = "Not on the CLI: a password on a command line is visible to every user (ps)",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.password = OptionString(v);
       });
     }},
    {.name = "remote_key_prefix", .type = OptionType::kString, .default_text = "kvt",
     .cpp_field = "remote.key_prefix", .doc = "Prefix of every key name in the remote store",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.key_prefix = OptionString(v);
       });
     }},
    {.name = "remote_connect_timeout_ms", .type = OptionType::kUint, .default_text = "200",
     .min = 1, .max = 600000, .unit = "ms", .cpp_field = "remote.connect_timeout_ms",
     .doc = "Redis connect timeout",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.connect_timeout_ms = OptionU32(v);
       });
     }},
    {.name = "remote_command_timeout_ms", .type = OptionType::kUint, .default_text = "500",
     .min = 1, .max = 600000, .unit = "ms", .cpp_field = "remote.command_timeout_ms",
     .doc = "Deadline of one Redis command's write, and of its whole reply",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.command_timeout_ms = OptionU32(v);
       });
     }},
    {.name = "remote_breaker_failures_to_open", .type = OptionType::kUint, .default_text = "3",
     .min = 1, .max = 1000, .cpp_field = "remote.breaker_failures_to_open",
     .doc = "Consecutive failures that open a node's circuit breaker",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.breaker.failures_to_open = OptionU32(v);
       });
     }},
    {.name = "remote_breaker_open_cooldown_us", .type = OptionType::kUint,
     .default_text = "1000000", .min = 0, .max = kOptionUsHour, .unit = "us",
     .cpp_field = "remote.breaker_open_cooldown_us",
     .doc = "Time a breaker stays open before one probe goes through",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.breaker.open_cooldown_us = OptionU64(v);
       });
     }},
    {.name = "remote_redirects_max", .type = OptionType::kUint, .default_text = "5", .min = 0,
     .max = 16, .cpp_field = "remote.redirects_max", .doc = "MOVED/ASK hops per entry",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.redirects_max = OptionU32(v);
       });
     }},
    {.name = "remote_topology_refresh_interval_us", .type = OptionType::kUint,
     .default_text = "100000", .min = 0, .max = kOptionUsHour, .unit = "us",
     .cpp_field = "remote.topology_refresh_interval_us",
     .doc = "Minimum time between CLUSTER SLOTS refreshes",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.topology_refresh_interval_us = OptionU64(v);
       });
     }},
    {.name = "remote_cluster_allowed_hosts", .type = OptionType::kStrings, .default_text = "none",
     .cpp_field = "remote.cluster_allowed_hosts",
     .doc = "Hosts besides the seeds' that CLUSTER SLOTS, MOVED and ASK may name",
     .note = "C: one comma-separated string",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.cluster_allowed_hosts = OptionStrings(v);
       });
     }},
    {.name = "remote_insecure_plaintext", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "remote.insecure_plaintext",
     .doc = "Remote values in the clear (only for a Redis or fs_dir nobody else can reach)",
     .tier = kRedisStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<RedisStoreOptions>(a, [&](RedisStoreOptions& r) {
         r.insecure_plaintext = OptionBool(v);
       });
     }},
};

}  // namespace

std::span<const OptionSpec> RedisOptionRows() { return kRows; }

}  // namespace kvtier
