// See input_file.h.
#include "input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/unique_fd.h"
#include "env/dir_trust.h"

namespace kvtier::cli {
namespace {

constexpr size_t kReadChunkBytes = 64 * 1024;

Status CheckStat(const struct stat& st, const std::string& name, uint64_t bytes_max) {
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(name + ": " + FileKindName(st.st_mode) +
                                   ", not a regular file (only regular files are read)");
  }
  if (static_cast<uint64_t>(st.st_size) > bytes_max) {
    return Status::InvalidArgument(name + ": " + std::to_string(st.st_size) +
                                   " bytes, more than the limit of " + SizeText(bytes_max));
  }
  return Status::Ok();
}

// Reads `fd` to its end into *out; at most bytes_max bytes, so a file that grows while it is
// read, or an endless stream, stops with the same message as a file too large.
Status ReadBounded(int fd, const std::string& name, uint64_t bytes_max, std::string* out) {
  out->clear();
  char buffer[kReadChunkBytes];
  // Bounded: every pass appends at least one byte, and the loop ends past bytes_max.
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) return Status::Ok();
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, name);
    }
    if (out->size() + static_cast<size_t>(n) > bytes_max) {
      return Status::InvalidArgument(name + ": more than the limit of " + SizeText(bytes_max));
    }
    out->append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

std::string SizeText(uint64_t bytes) {
  const struct {
    uint64_t unit;
    const char* name;
  } units[] = {{uint64_t{1} << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}};
  for (const auto& u : units) {
    if (bytes != 0 && bytes % u.unit == 0) return std::to_string(bytes / u.unit) + " " + u.name;
  }
  return std::to_string(bytes) + " B";
}

Status ReadInputFile(const std::string& path, const std::string& name, uint64_t bytes_max,
                     std::string* out) {
  if (path == "-") return ReadBounded(STDIN_FILENO, name, bytes_max, out);
  // O_NONBLOCK: opening a FIFO without a writer would block; it fails the S_ISREG check instead.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno(errno, name);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, name);
  KV_RETURN_IF_ERROR(CheckStat(st, name, bytes_max));
  return ReadBounded(fd.get(), name, bytes_max, out);
}

Status CheckInputFile(const std::string& path, const std::string& name, uint64_t bytes_max) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, name);
  return CheckStat(st, name, bytes_max);
}

}  // namespace kvtier::cli
