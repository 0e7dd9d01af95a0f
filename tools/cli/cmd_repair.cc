// `kvtier repair DIR...`: makes a damaged SSD tier cache consistent (docs/ssd_format.md §11): a
// segment with damaged records is rewritten with its valid records and the old file renamed to
// "<name>.bad", a bad segment is renamed the same way, and the checkpoint is rebuilt from a scan
// of every segment. Prints what it dropped and moved, then verifies again;
// exit status 0 when the cache verifies afterwards. Refuses a cache a running tier holds.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "env/env.h"
#include "tiers/ssd/ssd_tools.h"

namespace kvtier::cli {
namespace {

class RepairCommand final : public Command {
 public:
  explicit RepairCommand(CLI::App* app)
      : Command(app->add_subcommand("repair",
                                    "Drop the damaged parts of an SSD tier cache and rebuild its "
                                    "checkpoint; keeps every record that verifies")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    Result<ssd::RepairReport> r = ssd::RepairDir(env.get(), dirs_);
    if (!r.ok()) return Fail(r.status());
    std::printf("repair: found %zu problems%s\n", r->before.problems.size(),
                r->before.problems.empty() ? ", nothing to repair" : "");
    for (const std::string& action : r->actions) std::printf("repair: %s\n", action.c_str());
    PrintVerifyProblems(r->after.problems);
    std::printf("repair: now %llu records verified, %zu problems\n",
                static_cast<unsigned long long>(r->after.records_verified),
                r->after.problems.size());
    if (r->after.problems.empty()) return kExitOk;
    return Fail(Status::Corruption("the cache still has " +
                                   std::to_string(r->after.problems.size()) + " problems"));
  }

 private:
  std::vector<std::string> dirs_;
};

}  // namespace

std::unique_ptr<Command> MakeRepairCommand(CLI::App* app) {
  return std::make_unique<RepairCommand>(app);
}

}  // namespace kvtier::cli
