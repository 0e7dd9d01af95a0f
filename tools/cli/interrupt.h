// Ctrl-C for long CLI commands. InstallInterruptHandler() makes the first SIGINT or SIGTERM set a
// flag that the command's loops poll (Interrupted()), so the command stops at the next item,
// removes what it created (ScopedRemoval), and exits with kExitInterrupted (130, as shells report
// a SIGINT death). A second signal restores the default action and re-raises it: a user who
// presses Ctrl-C twice always gets their prompt back.
//
// Thread safety: Interrupted() may be read from any thread; the handler only stores to a
// lock-free atomic.
#pragma once

#include <string>
#include <vector>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::cli {

inline constexpr int kExitInterrupted = 130;

// Idempotent; the handlers stay for the life of the process.
void InstallInterruptHandler();
// True once SIGINT or SIGTERM arrived after InstallInterruptHandler().
bool Interrupted();
// The message a command prints when it stops early: "interrupted; <what>".
void PrintInterrupted(const char* command, const std::string& what);

// Removes the listed paths (files or whole directory trees) when destroyed, unless Keep() was
// called: benchmark scratch data must not outlive an interrupted or failed run.
class ScopedRemoval {
 public:
  ScopedRemoval() = default;
  explicit ScopedRemoval(std::string path) { Add(std::move(path)); }
  ~ScopedRemoval();
  ScopedRemoval(const ScopedRemoval&) = delete;
  ScopedRemoval& operator=(const ScopedRemoval&) = delete;

  void Add(std::string path) { paths_.push_back(std::move(path)); }
  void Keep() { paths_.clear(); }

 private:
  std::vector<std::string> paths_;
};

// Creates `dir` and its missing parents for a command's scratch data. The topmost directory this
// call made is added to `removal`, so a --dir that did not exist is gone afterwards, with what
// the command put in it, while a directory that existed stays. IoError naming the path when it
// cannot be made or exists as something other than a directory.
Status CreateScratchDir(const std::string& dir, ScopedRemoval* removal);

// A fresh "<base>/<prefix>-XXXXXX" directory for a command's scratch data; `base` empty means
// $TMPDIR, or /var/tmp. A missing `base` is created (CreateScratchDir); the new directory is
// added to `removal` too.
Result<std::string> MakeScratchTempDir(std::string base, const std::string& prefix,
                                       ScopedRemoval* removal);

}  // namespace kvtier::cli
