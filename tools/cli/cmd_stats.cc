// `kvtier stats DIR...`: a report on an SSD tier cache (the directories of one striped cache, in
// their configured order): occupancy (segment files against the filesystems they live on; the
// tier's byte budget is an option of whoever opens it and is not recorded), live and dead bytes,
// blocks and chunks, the live blocks by age, and per layout their chunks, layers and codecs.
// Text, or one JSON object with --json (keys in README.md, "Cache statistics").
//
// Read-only: it takes the shared LOCK, as `verify` does, and refuses what verify refuses (a
// directory that is missing or not a cache, directories of two caches, a cache a running process
// holds) and a cache verify finds a problem in, naming it. Keys are salted hashes, so a record
// tells no tenant apart: blocks are grouped by layout, and no chunk hash or key appears.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "codecs/codec_params.h"
#include "command.h"
#include "env/env.h"
#include "progress.h"
#include "tiers/ssd/ssd_tools.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

// The codec a record's codec id names: the engine writes codecs::CodecId values; 0 is a record
// written without one (raw bytes, as `bench ssd` writes them).
std::string CodecLabel(uint8_t id) {
  return id == 0 ? "none" : codecs::CodecName(static_cast<codecs::CodecId>(id));
}

// "< 1m", "< 10m", ..., ">= 30d".
std::string AgeLabel(const ssd::StatsAgeBucket& b, uint64_t previous_bound_s) {
  const auto span = [](uint64_t s) {
    return s % 86400 == 0 ? std::to_string(s / 86400) + "d"
           : s % 3600 == 0 ? std::to_string(s / 3600) + "h"
                           : std::to_string(s / 60) + "m";
  };
  return b.max_age_s != 0 ? "< " + span(b.max_age_s) : ">= " + span(previous_bound_s);
}

struct Filesystem {
  std::string dir;
  uint64_t capacity_bytes = 0;
  uint64_t available_bytes = 0;
};

std::vector<Filesystem> Filesystems(const std::vector<std::string>& dirs) {
  std::vector<Filesystem> out;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    const std::filesystem::space_info s = std::filesystem::space(dir, ec);
    if (!ec) out.push_back({dir, s.capacity, s.available});
  }
  return out;
}

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

nlohmann::ordered_json ToJson(const ssd::StatsReport& r, size_t dirs,
                              const std::vector<Filesystem>& fss, uint64_t now_wall_us) {
  nlohmann::ordered_json j;
  j["directories"] = dirs;
  j["cache_id"] = r.cache_id;
  j["segments"] = r.segments;
  j["segment_bytes"] = r.segment_bytes;
  j["disk_bytes"] = r.disk_bytes;
  j["capacity_bytes"] = nullptr;  // The tier's budget is not recorded on disk.
  nlohmann::ordered_json filesystems = nlohmann::ordered_json::array();
  for (const Filesystem& f : fss) {
    filesystems.push_back({{"dir", f.dir},
                           {"capacity_bytes", f.capacity_bytes},
                           {"available_bytes", f.available_bytes}});
  }
  j["filesystems"] = std::move(filesystems);
  j["blocks"] = r.blocks;
  j["chunks"] = r.chunks;
  j["live_bytes"] = r.live_bytes;
  j["dead_bytes"] = r.dead_bytes;
  j["raw_bytes"] = r.raw_bytes;
  j["expired_blocks"] = r.expired_blocks;
  j["erased_keys"] = r.erased_keys;
  j["sequence_min"] = r.sequence_min;
  j["sequence_max"] = r.sequence_max;
  j["now_wall_us"] = now_wall_us;
  j["oldest_segment_wall_us"] = r.oldest_segment_wall_us;
  j["newest_segment_wall_us"] = r.newest_segment_wall_us;
  j["age_basis"] = "segment_created";
  nlohmann::ordered_json age = nlohmann::ordered_json::array();
  for (const ssd::StatsAgeBucket& b : r.age) {
    nlohmann::ordered_json e;
    if (b.max_age_s != 0) {
      e["max_age_s"] = b.max_age_s;
    } else {
      e["max_age_s"] = nullptr;
    }
    e["blocks"] = b.blocks;
    e["live_bytes"] = b.live_bytes;
    age.push_back(std::move(e));
  }
  j["age"] = std::move(age);
  nlohmann::ordered_json layouts = nlohmann::ordered_json::array();
  for (const ssd::StatsLayout& l : r.layouts) {
    nlohmann::ordered_json codecs = nlohmann::ordered_json::object();
    for (const auto& [id, blocks] : l.blocks_per_codec) codecs[CodecLabel(id)] = blocks;
    layouts.push_back({{"id", l.id},
                       {"blocks", l.blocks},
                       {"chunks", l.chunks},
                       {"layers", l.layers},
                       {"live_bytes", l.live_bytes},
                       {"raw_bytes", l.raw_bytes},
                       {"sealed_blocks", l.sealed_blocks},
                       {"codecs", std::move(codecs)}});
  }
  j["layouts"] = std::move(layouts);
  j["tenants_recorded"] = false;
  j["checkpoint_present"] = r.checkpoint_present;
  return j;
}

void PrintText(const ssd::StatsReport& r, size_t dirs, const std::vector<Filesystem>& fss) {
  const auto bytes = [](uint64_t b) { return Progress::FormatBytes(static_cast<double>(b)); };
  std::printf("cache %s: %zu director%s, %llu segment%s of %s, %s on disk\n",
              r.cache_id.empty() ? "(no MANIFEST)" : r.cache_id.c_str(), dirs,
              dirs == 1 ? "y" : "ies", static_cast<unsigned long long>(r.segments),
              r.segments == 1 ? "" : "s", bytes(r.segment_bytes).c_str(),
              bytes(r.disk_bytes).c_str());
  for (const Filesystem& f : fss) {
    std::printf("  %s: on a filesystem of %s, %s available\n", f.dir.c_str(),
                bytes(f.capacity_bytes).c_str(), bytes(f.available_bytes).c_str());
  }
  std::printf("capacity: not recorded in the cache (the --ssd-bytes of whoever opens it)\n");
  std::printf("blocks %llu (%llu chunks), live %s, dead %s (%.1f%% of the segment bytes), "
              "%s before encoding\n",
              static_cast<unsigned long long>(r.blocks), static_cast<unsigned long long>(r.chunks),
              bytes(r.live_bytes).c_str(), bytes(r.dead_bytes).c_str(),
              Percent(r.dead_bytes, r.live_bytes + r.dead_bytes), bytes(r.raw_bytes).c_str());
  std::printf("expired blocks %llu, erased keys %llu, live sequences %llu..%llu\n",
              static_cast<unsigned long long>(r.expired_blocks),
              static_cast<unsigned long long>(r.erased_keys),
              static_cast<unsigned long long>(r.sequence_min),
              static_cast<unsigned long long>(r.sequence_max));
  std::printf("age of the live blocks (from their segment's creation; a block is at most this "
              "old):\n");
  uint64_t previous = 0;
  for (const ssd::StatsAgeBucket& b : r.age) {
    std::printf("  %-7s %10llu blocks  %s\n", AgeLabel(b, previous).c_str(),
                static_cast<unsigned long long>(b.blocks), bytes(b.live_bytes).c_str());
    previous = b.max_age_s;
  }
  for (const ssd::StatsLayout& l : r.layouts) {
    std::string codecs;
    for (const auto& [id, blocks] : l.blocks_per_codec) {
      codecs += (codecs.empty() ? "" : ", ") + CodecLabel(id) + " " + std::to_string(blocks);
    }
    std::printf("layout %s: %llu blocks, %llu chunks, %u layers, live %s, %llu sealed; codecs: "
                "%s\n",
                l.id.c_str(), static_cast<unsigned long long>(l.blocks),
                static_cast<unsigned long long>(l.chunks), l.layers, bytes(l.live_bytes).c_str(),
                static_cast<unsigned long long>(l.sealed_blocks), codecs.c_str());
  }
  std::printf("tenants: not recorded (keys are salted hashes); blocks are grouped by layout\n");
}

class StatsCommand final : public Command {
 public:
  explicit StatsCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "stats", "Occupancy, live and dead bytes, ages, layouts and codecs of an SSD tier "
                     "cache (read-only)")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
    subcommand()->add_flag("--json", json_, "Print one JSON object");
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    const uint64_t now_wall_us = env->clock()->WallMicros();
    Result<ssd::StatsReport> r = ssd::StatsDir(env.get(), dirs_, now_wall_us);
    if (!r.ok() && r.status().IsBusy()) {
      return Fail(Status::Busy(r.status().message() +
                               "; stop it first, or read a snapshot with kvtier inspect"));
    }
    if (!r.ok()) return Fail(r.status());
    const std::vector<Filesystem> fss = Filesystems(dirs_);
    if (json_) {
      std::printf("%s\n", JsonText(ToJson(*r, dirs_.size(), fss, now_wall_us), 2).c_str());
    } else {
      PrintText(*r, dirs_.size(), fss);
    }
    return kExitOk;
  }

 private:
  std::vector<std::string> dirs_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeStatsCommand(CLI::App* app) {
  return std::make_unique<StatsCommand>(app);
}

}  // namespace kvtier::cli
