// The CPUs an engine's threads run on (EngineOptions::thread_cpus, docs/options.md).
//
// A thread starts on the CPUs of the thread that created it. Inference engines bind their compute
// threads to cores (vLLM's CPU worker pins its whole process to the cores it computes on, one on a
// small machine), so an engine opened there would run its I/O, codec and write-back threads on
// the very cores the model computes on, and nowhere else. ScopedThreadCpus moves the calling
// thread to the chosen CPUs while the engine starts its threads, which keep them, and moves it
// back when it goes out of scope.
//
// Spec: "" keeps the caller's CPUs (no change); "all" is every CPU the process may use (its
// cgroup's effective cpuset, else every online CPU); a list such as "0-3,8" names CPUs, each of
// which must be one the process may use.
//
// Thread safety: ResolveThreadCpus and AllowedCpus are reentrant; a ScopedThreadCpus changes only
// the calling thread and must be destroyed on it.
#pragma once

#include <sched.h>

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier {

// "0-3,8" -> {0,1,2,3,8}, sorted and unique. InvalidArgument naming the text when it is not a
// CPU list (empty items, a range backwards, CPUs at or above CPU_SETSIZE).
Result<std::vector<int>> ParseCpuList(std::string_view text);
// {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs the process may use: the effective cpuset of its cgroup (cgroup v2, read from `root`,
// normally /sys/fs/cgroup, through /proc/self/cgroup), intersected with the online CPUs; every
// online CPU when there is no cpuset. `sys_root` prefixes the /sys and /proc paths (tests).
Result<std::vector<int>> AllowedCpus(const std::string& sys_root = "");

// The CPUs `spec` names (see above); an empty vector for "" (no change). InvalidArgument naming
// the option and the CPUs the process may use when the spec is malformed or names others.
Result<std::vector<int>> ResolveThreadCpus(std::string_view spec, const std::string& sys_root = "");

class ScopedThreadCpus {
 public:
  // Moves the calling thread to `cpus` (nothing for an empty vector); the error names the CPUs.
  static Result<ScopedThreadCpus> Enter(const std::vector<int>& cpus);
  ScopedThreadCpus(ScopedThreadCpus&& other) noexcept;
  ScopedThreadCpus& operator=(ScopedThreadCpus&&) = delete;
  ScopedThreadCpus(const ScopedThreadCpus&) = delete;
  ~ScopedThreadCpus();  // The caller's CPUs again.

 private:
  ScopedThreadCpus() = default;
  bool active_ = false;
  cpu_set_t saved_{};
};

// The calling thread's CPUs (sched_getaffinity).
Result<std::vector<int>> CurrentThreadCpus();

}  // namespace kvtier
