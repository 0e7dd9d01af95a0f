// The fs store's rows of the options table (engine/options_table.h merges them in through
// TierProvider::OptionRows()): fs_dir (the switch), the fs_* settings and the two every store of
// the remote tier has (remote_key_prefix, remote_insecure_plaintext, which the Redis store's rows
// hold too), each written into FsStoreOptions.
#include <any>
#include <span>
#include <string>
#include <vector>

#include "core/option_spec.h"
#include "tiers/fs/fs_options.h"
#include "tiers/fs/fs_provider.h"

namespace kvtier {
namespace {

constexpr std::string_view kFsNote =
    "Python, the CLI, its config file and kvtier serve (so C and C++ programs through "
    "kvtier_engine_connect / Engine::Connect); not in the fixed C struct or the public C++ "
    "options yet";

constexpr OptionSpec kRows[] = {
    {.name = "fs_dir", .type = OptionType::kString, .default_text = "\"\"",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "A shared directory (NFS, Lustre, CephFS, local) as the remote tier instead of "
            "Redis, one file per block; empty: none",
     .note = kFsNote,
     .tier = kFsStoreName, .tier_switch = true,
     .set_tier = [](std::any& a, const OptionValue& v) {
       const std::string& dir = OptionString(v);
       if (dir.empty()) {
         a.reset();
         return Status::Ok();
       }
       if (!a.has_value()) a = FsStoreOptions{};
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) { f.dir = dir; });
     }},
    {.name = "fs_bytes_max", .type = OptionType::kBytes, .default_text = "0", .min = 0,
     .max = kOptionBytesMax, .unit = "bytes", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Bytes the shared directory may hold, over every node; above it the oldest values "
            "go; 0: no bound",
     .note = kFsNote,
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) {
         f.bytes_max = OptionU64(v);
       });
     }},
    {.name = "fs_max_age_s", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = 10ull * 365 * 86400, .unit = "s", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Values not read or written for this long are removed; 0: no bound",
     .note = kFsNote,
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) {
         f.max_age_s = OptionU64(v);
       });
     }},
    {.name = "fs_sweep_interval_ms", .type = OptionType::kUint, .default_text = "10000",
     .min = 1, .max = 3'600'000, .unit = "ms", .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Time between two sweeps of the shared directory (with a bound set)",
     .note = kFsNote,
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) {
         f.sweep_interval_ms = OptionU32(v);
       });
     }},
    {.name = "fs_fsync", .type = OptionType::kBool, .default_text = "true",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Sync each value before it is published (a crash then leaves it whole or absent)",
     .note = kFsNote,
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) { f.fsync = OptionBool(v); });
     }},
    {.name = "fs_group_shared", .type = OptionType::kBool, .default_text = "false",
     .surfaces = kSurfacePython | kSurfaceCli,
     .doc = "Files 0660 and a group-writable directory allowed, for nodes that run as several "
            "users of one group",
     .note = kFsNote,
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) {
         f.group_shared = OptionBool(v);
       });
     }},
    {.name = "remote_key_prefix", .type = OptionType::kString, .default_text = "kvt",
     .cpp_field = "remote.key_prefix", .doc = "Prefix of every key name in the remote store",
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& f) {
         f.key_prefix = OptionString(v);
       });
     }},
    {.name = "remote_insecure_plaintext", .type = OptionType::kBool, .default_text = "false",
     .cpp_field = "remote.insecure_plaintext",
     .doc = "Remote values in the clear (only for a Redis or fs_dir nobody else can reach)",
     .tier = kFsStoreName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<FsStoreOptions>(a, [&](FsStoreOptions& r) {
         r.insecure_plaintext = OptionBool(v);
       });
     }},
};

}  // namespace

std::span<const OptionSpec> FsOptionRows() { return kRows; }

}  // namespace kvtier
