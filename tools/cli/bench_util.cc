// See bench_util.h.
#include "bench_util.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace kvtier::cli {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Result<std::string> MakeScratchDir(const std::string& parent, const std::string& prefix) {
  std::string base = parent;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string pattern = base + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IoError("cannot create a directory in " + base + ": " + std::strerror(errno));
  }
  return pattern;
}

std::optional<std::string> FindSharedModel(const std::string& file) {
  std::vector<std::filesystem::path> starts;
  std::error_code ec;
  starts.push_back(std::filesystem::current_path(ec));
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (std::filesystem::path dir : starts) {
    for (int up = 0; up < 12 && !dir.empty(); ++up) {
      const std::filesystem::path candidate = dir / "shared" / "models" / file;
      if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
      if (dir == dir.parent_path()) break;
      dir = dir.parent_path();
    }
  }
  return std::nullopt;
}

}  // namespace kvtier::cli
