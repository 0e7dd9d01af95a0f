// `kvtier numa`: the NUMA nodes Linux reports, with their memory and free memory; a node with
// memory and no CPUs is marked as a CXL candidate (how a CXL memory expander shows up), which the
// host tier can be bound to (EngineOptions::cxl, docs/memory_tiers.md).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "tiers/memory_tier.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

class NumaCommand final : public Command {
 public:
  explicit NumaCommand(CLI::App* app)
      : Command(app->add_subcommand("numa", "List NUMA nodes, marking CPU-less ones as CXL "
                                            "candidates, with their free memory")) {
    subcommand()->add_flag("--json", json_, "Print JSON");
    subcommand()
        ->add_option("--sysfs", sysfs_, "Where sysfs is mounted (tests point it at a fake tree)")
        ->capture_default_str();
  }

  int Run() override {
    Result<std::vector<NumaNodeInfo>> nodes = ListNumaNodes(sysfs_);
    if (!nodes.ok()) return Fail(nodes.status());
    if (json_) {
      nlohmann::ordered_json j = nlohmann::ordered_json::array();
      for (const NumaNodeInfo& n : *nodes) {
        j.push_back({{"node", n.node},
                     {"has_cpus", n.has_cpus},
                     {"cxl_candidate", !n.has_cpus && n.memory_bytes > 0},
                     {"memory_bytes", n.memory_bytes},
                     {"memory_free_bytes", n.memory_free_bytes}});
      }
      std::printf("%s\n", JsonText(j, 1).c_str());
      return kExitOk;
    }
    std::printf("%-6s %-6s %12s %12s  %s\n", "node", "cpus", "memory", "free", "");
    for (const NumaNodeInfo& n : *nodes) {
      std::printf("%-6d %-6s %9.1f GiB %9.1f GiB  %s\n", n.node, n.has_cpus ? "yes" : "no",
                  double(n.memory_bytes) / double(1ull << 30),
                  double(n.memory_free_bytes) / double(1ull << 30),
                  !n.has_cpus && n.memory_bytes > 0 ? "CXL candidate (memory without CPUs)" : "");
    }
    return kExitOk;
  }

 private:
  bool json_ = false;
  std::string sysfs_ = "/sys";
};

}  // namespace

std::unique_ptr<Command> MakeNumaCommand(CLI::App* app) {
  return std::make_unique<NumaCommand>(app);
}

}  // namespace kvtier::cli
