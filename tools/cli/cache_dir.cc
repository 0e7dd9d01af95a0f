// See cache_dir.h.
#include "cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "core/limits.h"

namespace kvtier::cli {
namespace {

Status Unusable(const std::string& dir, const Status& why) {
  return why.WithContext("cache directory " + dir + " cannot be used");
}

Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("not a directory");
  return Status::Ok();
}

// One block written and synced: what the SSD tier does first with a new segment.
Status WriteProbe(const std::string& dir) {
  const std::string path = dir + "/.kvtier-probe-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::FromErrno(errno, "creating a file in it");
  const std::vector<char> block(4096, 0);
  Status s;
  const ssize_t n = ::write(fd, block.data(), block.size());
  if (n < 0) {
    s = Status::FromErrno(errno, "writing a file in it");
  } else if (static_cast<size_t>(n) != block.size()) {
    s = Status::NoSpace("writing a file in it: only " + std::to_string(n) + " of 4096 bytes fit");
  } else if (::fdatasync(fd) != 0) {
    s = Status::FromErrno(errno, "syncing a file in it");
  }
  ::close(fd);
  ::unlink(path.c_str());
  return s;
}

}  // namespace

Status CheckCacheDirUsable(const std::string& dir, uint64_t free_bytes_min) {
  if (dir.empty()) return Status::InvalidArgument("--cache-dir is empty");
  Status s = MakeDirs(dir);
  if (s.ok()) s = WriteProbe(dir);
  if (!s.ok()) return Unusable(dir, s);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return Unusable(dir, Status::FromErrno(errno, "statvfs"));
  const uint64_t free_bytes = uint64_t{st.f_bavail} * uint64_t{st.f_frsize};
  if (free_bytes < free_bytes_min) {
    return Unusable(dir, Status::NoSpace("no space left on device: " + std::to_string(free_bytes) +
                                         " bytes free, at least " +
                                         std::to_string(free_bytes_min) + " needed"));
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
