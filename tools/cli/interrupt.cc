// Ctrl-C handling for the CLI: see interrupt.h.
#include "interrupt.h"

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace kvtier::cli {

namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnInterrupt(int signo) {
  if (g_interrupted.exchange(true)) {
    // The second signal: give the user their prompt back now.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
  }
}

}  // namespace

void InstallInterruptHandler() {
  static const bool installed = [] {
    struct sigaction sa = {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // No SA_RESTART: a blocked read returns EINTR and the loop sees the flag.
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    return true;
  }();
  (void)installed;
}

bool Interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

void PrintInterrupted(const char* command, const std::string& what) {
  std::fprintf(stderr, "\nkvtier %s: interrupted; %s\n", command, what.c_str());
}

ScopedRemoval::~ScopedRemoval() {
  for (const std::string& path : paths_) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) std::fprintf(stderr, "kvtier: cannot remove %s: %s\n", path.c_str(),
                         ec.message().c_str());
  }
}

Status CreateScratchDir(const std::string& dir, ScopedRemoval* removal) {
  std::error_code ec;
  // The topmost missing component: what this call creates and the removal takes back.
  std::filesystem::path top;
  for (std::filesystem::path p(dir); !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    top = p;
    if (p == p.parent_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::IoError(dir + " is not a directory");
  }
  if (!top.empty()) removal->Add(top.string());
  return Status::Ok();
}

Result<std::string> MakeScratchTempDir(std::string base, const std::string& prefix,
                                       ScopedRemoval* removal) {
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = (tmp != nullptr && *tmp != '\0') ? tmp : "/var/tmp";
  }
  KV_RETURN_IF_ERROR(CreateScratchDir(base, removal));
  std::string dir = base + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + dir);
  removal->Add(dir);
  return dir;
}

}  // namespace kvtier::cli
