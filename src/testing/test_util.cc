#include "testing/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

namespace kvtier {

Result<ScopedTempDir> ScopedTempDir::Create(const std::string& base) {
  std::string dir = base;
  if (dir.empty()) {
    // Tests may read the environment; engine code never does (see STYLE.md).
    const char* tmpdir = std::getenv("TMPDIR");
    dir = (tmpdir != nullptr && tmpdir[0] != '\0') ? tmpdir : "/tmp";
  }
  std::string templ = dir + "/kvtier-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + templ);
  return ScopedTempDir(std::move(templ));
}

ScopedTempDir::ScopedTempDir(ScopedTempDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

ScopedTempDir::~ScopedTempDir() {
  if (path_.empty()) return;
  std::error_code ec;  // A directory left behind in /tmp is not worth failing a test over.
  std::filesystem::remove_all(path_, ec);
}

void CapturingLogger::Log(LogLevel level, std::string_view message) {
  MutexLock lock(&mu_);
  lines_.push_back(std::string(LogLevelName(level)) + ": " + std::string(message));
}

std::vector<std::string> CapturingLogger::lines() const {
  MutexLock lock(&mu_);
  return lines_;
}

size_t CapturingLogger::CountContaining(std::string_view needle) const {
  MutexLock lock(&mu_);
  size_t count = 0;
  for (const std::string& line : lines_)
    if (line.find(needle) != std::string::npos) ++count;
  return count;
}

}  // namespace kvtier
