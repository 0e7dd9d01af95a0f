// ParseCpuList, AllowedCpus and ScopedThreadCpus (thread_cpus.h).
#include "env/thread_cpus.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>
#include <sstream>

#include "core/small_file.h"

namespace kvtier {
namespace {

// Every item of `text` parses; CPUs are below CPU_SETSIZE.
bool ParseInto(std::string_view text, std::set<int>* out) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return false;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    auto number = [](std::string_view s, int* v) {
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
      return !s.empty() && ec == std::errc() && end == s.data() + s.size() && *v >= 0 &&
             *v < CPU_SETSIZE;
    };
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!number(item, &lo)) return false;
      hi = lo;
    } else if (!number(item.substr(0, dash), &lo) || !number(item.substr(dash + 1), &hi) ||
               hi < lo) {
      return false;
    }
    for (int c = lo; c <= hi; ++c) out->insert(c);
    pos = comma + 1;
  }
  return true;
}

// The process's cgroup v2 path ("0::/a/b" in /proc/self/cgroup); "" when there is none.
std::string CgroupPath(const std::string& sys_root) {
  Result<std::string> text = ReadSmallFile(sys_root + "/proc/self/cgroup");
  if (!text.ok()) return "";
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  std::set<int> cpus;
  if (!ParseInto(text, &cpus)) {
    return Status::InvalidArgument("\"" + std::string(text) +
                                   "\" is not a CPU list (such as 0-3,8; CPUs below " +
                                   std::to_string(CPU_SETSIZE) + ")");
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<std::vector<int>> AllowedCpus(const std::string& sys_root) {
  KV_ASSIGN_OR_RETURN(const std::string online_text,
                      ReadSmallFile(sys_root + "/sys/devices/system/cpu/online"));
  KV_ASSIGN_OR_RETURN(std::vector<int> online, ParseCpuList(online_text));
  // The nearest cgroup (this one, then its parents) with an effective cpuset.
  std::string path = CgroupPath(sys_root);
  while (!path.empty()) {
    const Result<std::string> text = ReadSmallFile(
        sys_root + "/sys/fs/cgroup" + (path == "/" ? "" : path) + "/cpuset.cpus.effective");
    std::set<int> cpus;
    if (text.ok() && ParseInto(*text, &cpus)) {
      std::vector<int> both;
      for (int c : online) {
        if (cpus.count(c) != 0) both.push_back(c);
      }
      if (!both.empty()) return both;
    }
    if (path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return online;
}

Result<std::vector<int>> ResolveThreadCpus(std::string_view spec, const std::string& sys_root) {
  if (spec.empty()) return std::vector<int>{};
  KV_ASSIGN_OR_RETURN(std::vector<int> allowed, AllowedCpus(sys_root));
  if (spec == "all") return allowed;
  Result<std::vector<int>> cpus = ParseCpuList(spec);
  if (!cpus.ok()) {
    return Status::InvalidArgument("thread_cpus: " + cpus.status().message() +
                                   ", \"all\", or empty to keep the caller's CPUs");
  }
  std::vector<int> outside;
  for (int c : *cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), c)) outside.push_back(c);
  }
  if (!outside.empty()) {
    const bool one = outside.size() == 1;
    return Status::InvalidArgument("thread_cpus=" + std::string(spec) + (one ? ": CPU " : ": CPUs ") +
                                   FormatCpuList(outside) +
                                   (one ? " is not one" : " are not ones") +
                                   " this process may use (" + FormatCpuList(allowed) + ")");
  }
  return cpus;
}

Result<std::vector<int>> CurrentThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    return Status::IoError(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(static_cast<size_t>(c), &set)) out.push_back(c);
  }
  return out;
}

Result<ScopedThreadCpus> ScopedThreadCpus::Enter(const std::vector<int>& cpus) {
  ScopedThreadCpus scope;
  if (cpus.empty()) return scope;
  if (::sched_getaffinity(0, sizeof(scope.saved_), &scope.saved_) != 0) {
    return Status::IoError(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(static_cast<size_t>(c), &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Status::IoError("thread_cpus: cannot run on CPUs " + FormatCpuList(cpus) + ": " +
                           std::strerror(errno));
  }
  scope.active_ = true;
  return scope;
}

ScopedThreadCpus::ScopedThreadCpus(ScopedThreadCpus&& other) noexcept
    : active_(other.active_), saved_(other.saved_) {
  other.active_ = false;
}

ScopedThreadCpus::~ScopedThreadCpus() {
  // Best effort: the set was the thread's own a moment ago.
  if (active_) ::sched_setaffinity(0, sizeof(saved_), &saved_);
}

}  // namespace kvtier
