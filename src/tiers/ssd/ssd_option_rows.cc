// The SSD tier's rows of the options table (engine/options_table.h merges them in through
// TierProvider::OptionRows()): its ssd_* settings, ssd_dirs the switch, each written into
// SsdTierOptions.
#include <any>
#include <span>
#include <string>
#include <vector>

#include "core/option_spec.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/ssd/ssd_provider.h"

namespace kvtier {
namespace {

constexpr std::string_view kAdmission = "always|after_requests";

constexpr OptionSpec kRows[] = {
    {.name = "ssd_dirs", .type = OptionType::kStrings, .default_text = "none",
     .surfaces = kSurfaceCpp | kSurfaceC | kSurfacePython, .cpp_field = "ssd.dirs",
     .doc = "SSD tier directories (their order is part of the cache); none: no SSD tier",
     .note = "Not a CLI flag: --cache-dir gives run and chat one directory, with 16 MiB "
             "segments, periodic sync and write-through (a CLI run stores little and may be "
             "killed)",
     .tier = kSsdTierName, .tier_switch = true,
     .set_tier = [](std::any& a, const OptionValue& v) {
       const std::vector<std::string>& dirs = OptionStrings(v);
       if (dirs.empty()) {
         a.reset();
         return Status::Ok();
       }
       if (!a.has_value()) a = SsdTierOptions{};
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) { t.dirs = dirs; });
     }},
    {.name = "ssd_bytes", .type = OptionType::kBytes, .default_text = "4 GiB", .min = 1 << 20,
     .max = kOptionBytesMax, .unit = "bytes", .cpp_field = "ssd.capacity_bytes",
     .doc = "SSD tier capacity, all directories together",
     .note = "0 in C and Python: the default; CLI default: 1 GiB",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.capacity_bytes = OptionU64(v);
       });
     }},
    {.name = "ssd_segment_bytes", .type = OptionType::kBytes, .default_text = "64 MiB",
     .min = 1 << 20, .max = 1 << 30, .unit = "bytes", .cpp_field = "ssd.segment_bytes",
     .doc = "Segment file size, a multiple of 4 KiB",
     .note = "0 in C and Python: the default; CLI default: 16 MiB",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.segment_bytes = OptionU64(v);
       });
     }},
    {.name = "ssd_sync", .type = OptionType::kChoice, .default_text = "per_batch",
     .choices = "none|per_batch|periodic", .cpp_field = "ssd.sync",
     .doc = "What a completed SSD write promises: nothing, fdatasync per batch, or periodic",
     .note = "CLI default: periodic",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.sync = OptionPick<SsdSyncMode>("none|per_batch|periodic", v);
       });
     }},
    {.name = "ssd_sync_interval_ms", .type = OptionType::kUint, .default_text = "100", .min = 1,
     .max = kOptionMsHour, .unit = "ms", .cpp_field = "ssd.sync_interval_ms",
     .doc = "Time between fdatasyncs with ssd_sync periodic",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.sync_interval_ms = OptionU32(v);
       });
     }},
    {.name = "ssd_checkpoint_interval_ms", .type = OptionType::kUint, .default_text = "0",
     .min = 0, .max = 24 * kOptionMsHour, .unit = "ms", .cpp_field = "ssd.checkpoint_interval_ms",
     .doc = "Time between index checkpoints; 0: only on close and after errors",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.checkpoint_interval_ms = OptionU32(v);
       });
     }},
    {.name = "ssd_io_depth", .type = OptionType::kUint, .default_text = "32", .min = 1,
     .max = 256, .cpp_field = "ssd.io_depth", .doc = "In-flight I/Os per directory",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.io_depth = OptionU32(v);
       });
     }},
    {.name = "ssd_io_backend", .type = OptionType::kChoice, .default_text = "auto",
     .choices = "auto|io_uring|thread_pool", .cpp_field = "ssd.io_backend",
     .doc = "io_uring, a pread/pwrite thread pool, or auto (io_uring when permitted)",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.io_backend = OptionPick<IoBackend>("auto|io_uring|thread_pool", v);
       });
     }},
    {.name = "ssd_direct_io", .type = OptionType::kChoice, .default_text = "preferred",
     .choices = "off|preferred|required", .cpp_field = "ssd.direct_io",
     .doc = "O_DIRECT: off, where the filesystem takes it, or required",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.direct_io = OptionPick<DirectIo>("off|preferred|required", v);
       });
     }},
    {.name = "ssd_queue_jobs_max", .type = OptionType::kUint, .default_text = "64", .min = 1,
     .max = 4096, .cpp_field = "ssd.queue_jobs_max",
     .doc = "Queued jobs per directory before callers wait",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.queue_jobs_max = OptionU32(v);
       });
     }},
    {.name = "ssd_staging_buffer_bytes", .type = OptionType::kBytes, .default_text = "1 MiB",
     .min = 4096, .max = 64 << 20, .unit = "bytes", .cpp_field = "ssd.staging_buffer_bytes",
     .doc = "Write staging buffer size, a multiple of 4 KiB",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.staging_buffer_bytes = OptionU64(v);
       });
     }},
    {.name = "ssd_staging_buffers", .type = OptionType::kUint, .default_text = "0", .min = 0,
     .max = 4096, .cpp_field = "ssd.staging_buffers",
     .doc = "Write staging buffers per directory; 0: min(ssd_io_depth, 64)",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.staging_buffers = OptionU32(v);
       });
     }},
    {.name = "ssd_write_stall_ms_max", .type = OptionType::kUint, .default_text = "10000",
     .min = 0, .max = kOptionMsHour, .unit = "ms", .cpp_field = "ssd.write_stall_ms_max",
     .doc = "A writer waiting for space gets Busy when reclaim frees no segment for this long",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.write_stall_ms_max = OptionU32(v);
       });
     }},
    {.name = "ssd_admission", .type = OptionType::kChoice, .default_text = "always",
     .choices = kAdmission, .cpp_field = "ssd.admission",
     .doc = "Which writes the SSD takes: all, or blocks requested ssd_admission_requests times",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.admission = OptionPick<SsdAdmission>(kAdmission, v);
       });
     }},
    {.name = "ssd_admission_requests", .type = OptionType::kUint, .default_text = "2", .min = 1,
     .max = 255, .cpp_field = "ssd.admission_requests",
     .doc = "Requests (writes and misses) before a block is admitted to the SSD",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.admission_requests = OptionU32(v);
       });
     }},
    {.name = "ssd_admission_slots", .type = OptionType::kUint, .default_text = "65536",
     .min = 1, .max = 1 << 26, .cpp_field = "ssd.admission_slots",
     .doc = "Counters of the SSD admission sketch (1 byte each)",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.admission_slots = OptionU32(v);
       });
     }},
    {.name = "ssd_write_budget_bytes_per_s", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kOptionBytesMax, .unit = "bytes/s",
     .cpp_field = "ssd.write_budget_bytes_per_s",
     .doc = "Bytes written to the SSD per second; 0: unlimited",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.write_budget_bytes_per_s = OptionU64(v);
       });
     }},
    {.name = "ssd_write_budget_burst_bytes", .type = OptionType::kBytes, .default_text = "0",
     .min = 0, .max = kOptionBytesMax, .unit = "bytes", .cpp_field = "ssd.write_budget_burst_bytes",
     .doc = "Burst above the SSD write budget; 0: one second of budget",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.write_budget_burst_bytes = OptionU64(v);
       });
     }},
    {.name = "ssd_key_file", .type = OptionType::kString, .default_text = "none",
     .cpp_field = "ssd.keys.file",
     .doc = "Deployment keys (a mode 0600 file) that seal SSD records at rest (AES-256-GCM)",
     .tier = kSsdTierName},
    {.name = "ssd_key_env", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceC | kSurfacePython,
     .doc = "An environment variable holding the SSD keys' text", .note = kOptionKeyEnvNote,
     .tier = kSsdTierName},
    {.name = "ssd_key_text", .type = OptionType::kString, .default_text = "none",
     .surfaces = kSurfaceCpp, .cpp_field = "ssd.keys.text",
     .doc = "The SSD keys' text, in the key file's format", .note = kOptionKeyTextNote,
     .tier = kSsdTierName},
    {.name = "ssd_file_mode", .type = OptionType::kUint, .default_text = "0600", .min = 0600,
     .max = 0660, .cpp_field = "ssd.file_mode",
     .doc = "Mode of the SSD tier's files: 0600, 0640 or 0660 (octal; group modes share the "
            "cache)",
     .tier = kSsdTierName,
     .set_tier = [](std::any& a, const OptionValue& v) {
       return OnTierOptions<SsdTierOptions>(a, [&](SsdTierOptions& t) {
         t.file_mode = OptionU32(v);
       });
     }},
};

}  // namespace

std::span<const OptionSpec> SsdOptionRows() { return kRows; }

}  // namespace kvtier
