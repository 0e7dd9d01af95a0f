// `kvtier clear DIR...`: empties an SSD tier cache: removes its segments, checkpoint, checkpoint
// temporary and the ".bad" files `kvtier repair` left, and nothing else (the directories, their
// MANIFEST and LOCK and any other file stay). Refuses a directory that is not a cache, so a
// mistyped path deletes nothing, and a cache a running tier holds. Prints each path removed.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "env/env.h"
#include "tiers/ssd/ssd_tools.h"

namespace kvtier::cli {
namespace {

class ClearCommand final : public Command {
 public:
  explicit ClearCommand(CLI::App* app)
      : Command(app->add_subcommand("clear",
                                    "Remove every block of an SSD tier cache (its segments and "
                                    "checkpoint); the directories stay")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    Result<ssd::ClearReport> r = ssd::ClearDir(env.get(), dirs_);
    if (!r.ok()) return Fail(r.status());
    for (const std::string& path : r->removed) std::printf("removed %s\n", path.c_str());
    for (const std::string& why : r->failed) std::printf("not removed: %s\n", why.c_str());
    std::printf("clear: removed %zu files\n", r->removed.size());
    if (r->failed.empty()) return kExitOk;
    return Fail(Status::IoError(std::to_string(r->failed.size()) +
                                " entries could not be removed (listed above)"));
  }

 private:
  std::vector<std::string> dirs_;
};

}  // namespace

std::unique_ptr<Command> MakeClearCommand(CLI::App* app) {
  return std::make_unique<ClearCommand>(app);
}

}  // namespace kvtier::cli
