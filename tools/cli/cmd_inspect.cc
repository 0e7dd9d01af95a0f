// `kvtier inspect DIR...`: a read-only summary of an SSD tier cache directory (the directories of
// one striped cache, in their configured order): its segments with their valid and dead bytes,
// the live block count, records per layout digest and the checkpoint's state. Text, or one JSON
// object with --json. On a cache a running tier holds it reads a snapshot and says so (the newest
// records may be missing or still being written).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "env/env.h"
#include "tiers/ssd/ssd_tools.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

nlohmann::ordered_json ToJson(const ssd::InspectReport& r) {
  nlohmann::ordered_json j;
  j["blocks"] = r.blocks;
  j["live_bytes"] = r.live_bytes;
  j["dead_bytes"] = r.dead_bytes;
  j["checkpoint_present"] = r.checkpoint_present;
  j["checkpoint_valid"] = r.checkpoint_valid;
  if (!r.checkpoint_problem.empty()) j["checkpoint_problem"] = r.checkpoint_problem;
  if (!r.in_use.empty()) j["in_use"] = r.in_use;
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const ssd::InspectSegment& s : r.segments) {
    nlohmann::ordered_json e;
    e["path"] = s.path;
    e["segment_id"] = s.segment_id;
    e["file_bytes"] = s.file_bytes;
    e["valid_bytes"] = s.valid_bytes;
    e["records"] = s.records;
    e["tombstones"] = s.tombstones;
    e["bad"] = s.bad;
    e["stop_reason"] = s.stop_reason;
    segments.push_back(std::move(e));
  }
  j["segments"] = std::move(segments);
  nlohmann::ordered_json layouts = nlohmann::ordered_json::object();
  for (const auto& [digest, records] : r.records_per_layout) layouts[digest] = records;
  j["records_per_layout"] = std::move(layouts);
  j["other_files"] = r.other_files;
  return j;
}

void PrintText(const ssd::InspectReport& r) {
  if (!r.in_use.empty()) {
    std::printf("in use: %s; this is a snapshot of a running cache\n", r.in_use.c_str());
  }
  std::printf("blocks %llu, live %llu bytes, dead %llu bytes, checkpoint %s\n",
              static_cast<unsigned long long>(r.blocks),
              static_cast<unsigned long long>(r.live_bytes),
              static_cast<unsigned long long>(r.dead_bytes),
              !r.checkpoint_present ? "absent"
              : r.checkpoint_valid  ? "valid"
                                    : "invalid");
  for (const ssd::InspectSegment& s : r.segments) {
    std::printf("segment %llu %s: %llu bytes, %llu valid, %llu records, %llu tombstones%s%s\n",
                static_cast<unsigned long long>(s.segment_id), s.path.c_str(),
                static_cast<unsigned long long>(s.file_bytes),
                static_cast<unsigned long long>(s.valid_bytes),
                static_cast<unsigned long long>(s.records),
                static_cast<unsigned long long>(s.tombstones), s.bad ? ", BAD" : "",
                s.stop_reason.empty() ? "" : (", stopped: " + s.stop_reason).c_str());
  }
  for (const auto& [digest, records] : r.records_per_layout) {
    std::printf("layout %s: %llu records\n", digest.c_str(),
                static_cast<unsigned long long>(records));
  }
  if (!r.checkpoint_problem.empty()) {
    std::printf("checkpoint problem: %s\n", r.checkpoint_problem.c_str());
  }
  for (const std::string& f : r.other_files) std::printf("other file %s\n", f.c_str());
}

class InspectCommand final : public Command {
 public:
  explicit InspectCommand(CLI::App* app)
      : Command(app->add_subcommand("inspect", "Summarize an SSD tier cache directory")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
    subcommand()->add_flag("--json", json_, "Print one JSON object");
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    Result<ssd::InspectReport> r = ssd::InspectDir(env.get(), dirs_);
    if (!r.ok()) return Fail(r.status());
    if (json_) {
      std::printf("%s\n", JsonText(ToJson(*r), 2).c_str());
    } else {
      PrintText(*r);
    }
    return kExitOk;
  }

 private:
  std::vector<std::string> dirs_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeInspectCommand(CLI::App* app) {
  return std::make_unique<InspectCommand>(app);
}

}  // namespace kvtier::cli
