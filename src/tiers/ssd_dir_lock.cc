// See ssd_dir_lock.h and docs/ssd_format.md §9.
#include "tiers/ssd_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <utility>

#include "core/logger.h"

namespace kvtier::ssd {
namespace {

// The pid text an exclusive holder writes: "<pid>\n", at most 20 digits and the newline.
constexpr size_t kLockTextBytesMax = 32;

bool ReadOnlyDirError(int err) { return err == EACCES || err == EROFS || err == EPERM; }

// Opens <dir>/LOCK, creating it with `file_mode` when missing and the directory allows it.
// An invalid fd (and OK) when it is missing and cannot be created in a read-only directory.
Result<UniqueFd> OpenLockFile(const std::string& path, DirLockMode mode, uint32_t file_mode) {
  // O_NONBLOCK: a FIFO named LOCK must not hang the open; it then fails the S_ISREG check.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                  static_cast<mode_t>(file_mode));
  if (fd < 0 && ReadOnlyDirError(errno) && mode == DirLockMode::kShared) {
    // A reader of a directory it cannot write: an existing LOCK still excludes a writer.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENOENT) return UniqueFd();
  }
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(owned.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::IoError(path + " is not a regular file");
  return owned;
}

// What the exclusive holder wrote into LOCK, or "" when there is nothing readable.
std::string HolderPid(int fd) {
  char text[kLockTextBytesMax] = {};
  const ssize_t got = ::pread(fd, text, sizeof(text) - 1, 0);
  if (got <= 0) return "";
  uint64_t pid = 0;
  const auto [end, ec] = std::from_chars(text, text + got, pid);
  if (ec != std::errc() || end == text || pid == 0) return "";
  return std::to_string(pid);
}

// The Busy status for a conflict on `fd`, after a failed non-blocking flock in `mode`.
Status BusyStatus(const std::string& dir, int fd, DirLockMode mode) {
  if (mode == DirLockMode::kExclusive && ::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    // Only shared holders (read-only tools) are in the way; their pids are not recorded.
    ::flock(fd, LOCK_UN);
    return Status::Busy(dir + " is in use by a reader (shared LOCK held)");
  }
  const std::string pid = HolderPid(fd);
  return Status::Busy(dir + " is in use by " +
                      (pid.empty() ? std::string("another process") : "process " + pid) +
                      " (LOCK held)");
}

Status WritePid(int fd, const std::string& path) {
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0) return Status::FromErrno(errno, "ftruncate " + path);
  const ssize_t put = ::pwrite(fd, text.data(), text.size(), 0);
  if (put != static_cast<ssize_t>(text.size())) {
    return Status::FromErrno(put < 0 ? errno : EIO, "write " + path);
  }
  return Status::Ok();
}

}  // namespace

DirLock::DirLock(std::string dir, UniqueFd fd, DirLockMode mode)
    : dir_(std::move(dir)), fd_(std::move(fd)), mode_(mode) {}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)), fd_(std::move(other.fd_)), mode_(other.mode_) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    Release();
    dir_ = std::move(other.dir_);
    fd_ = std::move(other.fd_);
    mode_ = other.mode_;
  }
  return *this;
}

DirLock::~DirLock() { Release(); }

bool DirLock::held() const { return fd_.valid(); }

void DirLock::Release() {
  if (!fd_.valid()) return;
  // The pid goes before the lock does, so nobody reads a stale holder. Best effort: a leftover
  // pid is informational only, and closing the descriptor releases the lock whatever happens.
  if (mode_ == DirLockMode::kExclusive) {
    const int rc = ::ftruncate(fd_.get(), 0);
    static_cast<void>(rc);
  }
  fd_.Reset();
}

Result<DirLock> DirLock::Acquire(Env* env, const std::string& dir, DirLockMode mode) {
  return Acquire(env, dir, mode, 0600);
}

Result<DirLock> DirLock::Acquire(Env* env, const std::string& dir, DirLockMode mode,
                                 uint32_t file_mode) {
  const std::string path = dir + "/" + kLockFileName;
  KV_ASSIGN_OR_RETURN(UniqueFd fd, OpenLockFile(path, mode, file_mode));
  if (!fd.valid()) {
    LogTo(env != nullptr ? env->logger() : nullptr, LogLevel::kInfo,
          "ssd: " + dir + " is read-only and has no LOCK; reading it unlocked");
    return DirLock(dir, UniqueFd(), mode);
  }
  const int op = (mode == DirLockMode::kExclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
  int rc = 0;
  do {
    rc = ::flock(fd.get(), op);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EWOULDBLOCK) return BusyStatus(dir, fd.get(), mode);
    return Status::FromErrno(errno, "flock " + path);
  }
  if (mode == DirLockMode::kExclusive) KV_RETURN_IF_ERROR(WritePid(fd.get(), path));
  return DirLock(dir, std::move(fd), mode);
}

Result<std::vector<DirLock>> AcquireAll(Env* env, const std::vector<std::string>& dirs,
                                        DirLockMode mode) {
  return AcquireAll(env, dirs, mode, 0600);
}

Result<std::vector<DirLock>> AcquireAll(Env* env, const std::vector<std::string>& dirs,
                                        DirLockMode mode, uint32_t file_mode) {
  std::vector<DirLock> locks;
  locks.reserve(dirs.size());
  for (const std::string& dir : dirs) {
    // On failure `locks` goes out of scope and releases every lock taken so far.
    KV_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(env, dir, mode, file_mode));
    locks.push_back(std::move(lock));
  }
  return locks;
}

}  // namespace kvtier::ssd
