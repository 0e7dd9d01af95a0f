// ListNumaNodes: reads the NUMA topology from sysfs (<root>/devices/system/node/node<N>/). A node
// with memory and an empty cpulist is how Linux shows a CXL memory expander.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "core/small_file.h"
#include "tiers/memory_tier.h"

namespace kvtier {
namespace {

constexpr int32_t kNumaNodesMax = 4096;  // Linux's MAX_NUMNODES is at most 1024.

// "node12" -> 12; -1 for any other name.
int32_t ParseNodeName(std::string_view name) {
  constexpr std::string_view kPrefix = "node";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int32_t node = 0;
  for (const char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    node = node * 10 + (c - '0');
    if (node >= kNumaNodesMax) return -1;
  }
  return node;
}

// Finds `field` ("MemTotal:", "MemFree:") in a node's meminfo ("Node 0 MemTotal:  24610028 kB")
// and returns bytes.
Result<uint64_t> ParseMemField(const std::string& meminfo, std::string_view field,
                               const std::string& path) {
  const size_t at = meminfo.find(field);
  if (at == std::string::npos) {
    return Status::Corruption(path + ": no " + std::string(field) + " line");
  }
  const char* p = meminfo.c_str() + at + field.size();
  char* end = nullptr;
  const unsigned long long kib = std::strtoull(p, &end, 10);
  if (end == p) return Status::Corruption(path + ": " + std::string(field) + " has no number");
  return static_cast<uint64_t>(kib) * 1024;
}

bool HasNonSpace(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return c != ' ' && c != '\n' && c != '\t'; });
}

Result<NumaNodeInfo> ReadNode(const std::string& dir, int32_t node) {
  NumaNodeInfo info;
  info.node = node;
  KV_ASSIGN_OR_RETURN(const std::string cpulist, ReadSmallFile(dir + "/cpulist"));
  info.has_cpus = HasNonSpace(cpulist);
  const std::string meminfo_path = dir + "/meminfo";
  KV_ASSIGN_OR_RETURN(const std::string meminfo, ReadSmallFile(meminfo_path));
  KV_ASSIGN_OR_RETURN(info.memory_bytes, ParseMemField(meminfo, "MemTotal:", meminfo_path));
  Result<uint64_t> free_bytes = ParseMemField(meminfo, "MemFree:", meminfo_path);
  if (free_bytes.ok()) info.memory_free_bytes = *free_bytes;
  return info;
}

}  // namespace

Result<std::vector<NumaNodeInfo>> ListNumaNodes(const std::string& sysfs_root) {
  const std::string root = sysfs_root + "/devices/system/node";
  std::error_code ec;
  std::filesystem::directory_iterator it(root, ec);
  if (ec) {
    return Status::NotFound("ListNumaNodes: cannot list " + root + ": " + ec.message() +
                            " (no NUMA information in sysfs)");
  }
  std::vector<NumaNodeInfo> nodes;
  // increment(ec) ends the loop on an error; ec is checked after it.
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const int32_t node = ParseNodeName(name);
    if (node < 0) continue;  // has_cpu, online, possible, power, ...
    KV_ASSIGN_OR_RETURN(NumaNodeInfo info, ReadNode(root + "/" + name, node));
    nodes.push_back(info);
  }
  if (ec) return Status::IoError("ListNumaNodes: listing " + root + ": " + ec.message());
  if (nodes.empty()) return Status::NotFound("ListNumaNodes: no node<N> directory in " + root);
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNodeInfo& a, const NumaNodeInfo& b) { return a.node < b.node; });
  return nodes;
}

}  // namespace kvtier
