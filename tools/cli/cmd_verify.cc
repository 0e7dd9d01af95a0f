// `kvtier verify DIR...`: checks every record of an SSD tier cache directory (CRCs, headers,
// segment headers) and names each damaged one by segment file and byte offset. Exit status 0
// when every record verified, 1 otherwise; a torn tail left by a crash also counts as damage
// (recovery would drop it). Run it on a cache no process has open for writing.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "env/env.h"
#include "tiers/ssd_tools.h"

namespace kvtier::cli {
namespace {

class VerifyCommand final : public Command {
 public:
  explicit VerifyCommand(CLI::App* app)
      : Command(app->add_subcommand("verify",
                                    "Check every record of an SSD tier cache "
                                    "directory; non-zero exit if any is damaged")) {
    subcommand()->add_option("dir", dirs_, "Cache directories, in the tier's order")->required();
  }

  int Run() override {
    std::unique_ptr<Env> env = NewPosixEnv();
    if (Status s = ssd::CheckCacheDirs(env.get(), dirs_); !s.ok()) return Fail(s);
    Result<std::vector<ssd::CorruptRecord>> bad = ssd::VerifyDir(env.get(), dirs_);
    if (!bad.ok()) return Fail(bad.status());
    if (bad->empty()) {
      std::printf("verify: every record verified\n");
      return kExitOk;
    }
    for (const ssd::CorruptRecord& c : *bad) {
      std::fprintf(stderr, "kvtier verify: %s offset %llu: %s\n", c.path.c_str(),
                   static_cast<unsigned long long>(c.offset), c.reason.c_str());
    }
    return kExitFailure;
  }

 private:
  std::vector<std::string> dirs_;
};

}  // namespace

std::unique_ptr<Command> MakeVerifyCommand(CLI::App* app) {
  return std::make_unique<VerifyCommand>(app);
}

}  // namespace kvtier::cli
