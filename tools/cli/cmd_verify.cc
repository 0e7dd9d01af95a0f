// `kvtier verify DIR...`: checks every record of an SSD tier cache (the directories of one cache,
// in their configured order), going on past damage, and every checkpoint entry against the record
// it points at (docs/ssd_format.md §11). Prints each problem, then
// "N records verified, M problems" (with --json one object: the counts, "problem_count" and
// "problems"); exit status 0 when there is none, 1 otherwise. A torn tail
// left by a crash counts (recovery would drop it). Refuses a cache a running tier holds, whose
// newest records would read as damage; `kvtier inspect` reads one as a snapshot.
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

nlohmann::ordered_json ToJson(const ssd::VerifyReport& r) {
  nlohmann::ordered_json j;
  j["segments"] = r.segments;
  j["records_verified"] = r.records_verified;
  j["checkpoint_present"] = r.checkpoint_present;
  j["checkpoint_valid"] = r.checkpoint_valid;
  j["checkpoint_entries_verified"] = r.checkpoint_entries_verified;
  j["problem_count"] = r.problems.size();
  nlohmann::ordered_json problems = nlohmann::ordered_json::array();
  for (const ssd::VerifyProblem& p : r.problems) {
    nlohmann::ordered_json e;
    e["path"] = p.path;
    e["offset_begin"] = p.offset_begin;
    e["offset_end"] = p.offset_end;
    e["what"] = p.what;
    problems.push_back(std::move(e));
  }
  j["problems"] = std::move(problems);
  return j;
}

class VerifyCommand final : public Command {
 public:
  explicit VerifyCommand(CLI::App* app)
      : Command(app->add_subcommand("verify",
                                    "Check every record and checkpoint entry of an SSD tier "
                                    "cache; non-zero exit on any problem")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
    subcommand()->add_flag("--json", json_, "Print one JSON object");
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    Result<ssd::VerifyReport> r = ssd::VerifyDir(env.get(), dirs_);
    if (!r.ok()) return Fail(r.status());
    if (json_) {
      std::printf("%s\n", JsonText(ToJson(*r), 2).c_str());
    } else {
      PrintVerifyProblems(r->problems);
      std::printf("verify: %llu records verified, %zu problems\n",
                  static_cast<unsigned long long>(r->records_verified), r->problems.size());
    }
    if (r->problems.empty()) return kExitOk;
    return Fail(Status::Corruption(std::to_string(r->problems.size()) + " problems (" +
                                   (json_ ? "in the JSON" : "listed above") + ")"));
  }

 private:
  std::vector<std::string> dirs_;
  bool json_ = false;
};

}  // namespace

void PrintVerifyProblems(const std::vector<ssd::VerifyProblem>& problems) {
  for (const ssd::VerifyProblem& p : problems) {
    if (p.offset_end > p.offset_begin) {
      std::printf("%s offset %llu..%llu: %s\n", p.path.c_str(),
                  static_cast<unsigned long long>(p.offset_begin),
                  static_cast<unsigned long long>(p.offset_end), p.what.c_str());
    } else {
      std::printf("%s: %s\n", p.path.c_str(), p.what.c_str());
    }
  }
}

std::unique_ptr<Command> MakeVerifyCommand(CLI::App* app) {
  return std::make_unique<VerifyCommand>(app);
}

}  // namespace kvtier::cli
