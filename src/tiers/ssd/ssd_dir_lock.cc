// See ssd_dir_lock.h and docs/ssd_format.md §9.
#include "tiers/ssd/ssd_dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <utility>

#include "core/logger.h"
#include "env/dir_trust.h"

namespace kvtier::ssd {
namespace {

// The pid text an exclusive holder writes: "<pid>\n", at most 20 digits and the newline.
constexpr size_t kLockTextBytesMax = 32;

bool ReadOnlyDirError(int err) { return err == EACCES || err == EROFS || err == EPERM; }

// open(2) relative to the checked directory's descriptor, retrying EINTR.
int OpenAt(int dir_fd, int flags, mode_t mode) {
  int fd = -1;
  do {
    fd = ::openat(dir_fd, kLockFileName, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Opens LOCK in the directory `dir_fd`, creating it with `file_mode` when missing and the
// directory allows it. O_NOFOLLOW: a link named LOCK (to a file elsewhere, or dangling) is refused
// and nothing it names is opened, created or truncated. An invalid fd (and OK) when LOCK is
// missing and cannot be created in a read-only directory.
Result<UniqueFd> OpenLockFile(int dir_fd, const std::string& path, DirLockMode mode,
                              uint32_t file_mode) {
  // O_NONBLOCK: a FIFO named LOCK must not hang the open; it then fails the S_ISREG check.
  constexpr int kFlags = O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW;
  int fd = OpenAt(dir_fd, O_RDWR | O_CREAT | kFlags, static_cast<mode_t>(file_mode));
  if (fd < 0 && ReadOnlyDirError(errno) && mode == DirLockMode::kShared) {
    // A reader of a directory it cannot write: an existing LOCK still excludes a writer.
    fd = OpenAt(dir_fd, O_RDONLY | kFlags, 0);
    if (fd < 0 && errno == ENOENT) return UniqueFd();
  }
  if (fd < 0 && errno == ELOOP) {
    return Status::InvalidArgument(path + " is a symbolic link: refusing to follow it (remove " +
                                   "it; LOCK is recreated at the next open)");
  }
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(owned.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::IoError(path + " is not a regular file");
  // A hard link shares its inode with a file elsewhere, which writing the pid would truncate.
  if (st.st_nlink > 1) {
    return Status::InvalidArgument(path + " has " + std::to_string(st.st_nlink) +
                                   " hard links: refusing a LOCK that is also a file elsewhere");
  }
  return owned;
}

// The GroupWrite rule for `dir`: from `file_mode` when the caller knows it; for the tools
// (kFileModeOfCache), the group may write the directory when the cache's LOCK, which a tier
// creates with its file_mode, is group-writable.
GroupWrite GroupWriteFor(int dir_fd, uint32_t file_mode) {
  if (file_mode != kFileModeOfCache) {
    return (file_mode & S_IWGRP) != 0 ? GroupWrite::kAllow : GroupWrite::kRefuse;
  }
  struct stat lock {};
  if (::fstatat(dir_fd, kLockFileName, &lock, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(lock.st_mode) &&
      (lock.st_mode & S_IWGRP) != 0) {
    return GroupWrite::kAllow;
  }
  return GroupWrite::kRefuse;
}

// Opens `dir` without following a link and checks that this user may trust it (dir_trust.h).
Result<UniqueFd> OpenCheckedDir(const std::string& dir, uint32_t file_mode) {
  KV_ASSIGN_OR_RETURN(UniqueFd dir_fd, OpenDirNoFollow(dir));
  struct stat st {};
  if (::fstat(dir_fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + dir);
  KV_RETURN_IF_ERROR(CheckDirTrust(dir, st, ::geteuid(), GroupWriteFor(dir_fd.get(), file_mode)));
  return dir_fd;
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

// True when `pid` (HolderPid's text) names no process this one can see.
bool ProcessGone(const std::string& pid) {
  int32_t value = 0;
  const auto [end, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), value);
  if (ec != std::errc() || end != pid.data() + pid.size() || value <= 0) return false;
  return ::kill(static_cast<pid_t>(value), 0) != 0 && errno == ESRCH;
}

// The Busy status for a conflict on `fd`, after a failed non-blocking flock in `mode`.
Status BusyStatus(const std::string& dir, int fd, DirLockMode mode) {
  if (mode == DirLockMode::kExclusive && ::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    // Only shared holders (read-only tools) are in the way; their pids are not recorded.
    ::flock(fd, LOCK_UN);
    return Status::Busy(dir + " is in use by a reader (shared LOCK held)");
  }
  const std::string pid = HolderPid(fd);
  if (ProcessGone(pid)) {
    // flock belongs to the open file description: a child the holder forked (without exec)
    // keeps the lock after the holder is gone. It is not taken over: from another pid namespace
    // a live holder looks the same.
    return Status::Busy(dir + " is locked by a process that inherited LOCK from process " + pid +
                        ", which is not running (or is in another pid namespace): end the " +
                        "processes it forked, then retry");
  }
  return Status::Busy(dir + " is in use by " +
                      (pid.empty() ? std::string("another process") : "process " + pid) +
                      " (LOCK held)");
}

// Called with the exclusive lock just taken: a pid still in LOCK belongs to a holder that ended
// without releasing it (a clean release empties LOCK first), such as a worker killed by SIGKILL.
// The kernel dropped its flock when it died, so the directory is simply taken over; the log line
// says whose it was.
void NoteStaleHolder(Env* env, const std::string& dir, int fd) {
  const std::string pid = HolderPid(fd);
  if (pid.empty() || pid == std::to_string(::getpid())) return;
  LogTo(env != nullptr ? env->logger() : nullptr, LogLevel::kWarn,
        "ssd: " + dir + "/" + kLockFileName + " was left by process " + pid +
            ", which ended without releasing it; taking the directory over");
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
  return Acquire(env, dir, mode, kFileModeOfCache);
}

Result<DirLock> DirLock::Acquire(Env* env, const std::string& dir, DirLockMode mode,
                                 uint32_t file_mode) {
  const std::string path = dir + "/" + kLockFileName;
  KV_ASSIGN_OR_RETURN(UniqueFd dir_fd, OpenCheckedDir(dir, file_mode));
  const uint32_t create_mode = file_mode == kFileModeOfCache ? 0600 : file_mode;
  KV_ASSIGN_OR_RETURN(UniqueFd fd, OpenLockFile(dir_fd.get(), path, mode, create_mode));
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
  if (mode == DirLockMode::kExclusive) {
    NoteStaleHolder(env, dir, fd.get());
    KV_RETURN_IF_ERROR(WritePid(fd.get(), path));
  }
  return DirLock(dir, std::move(fd), mode);
}

Result<std::vector<DirLock>> AcquireAll(Env* env, const std::vector<std::string>& dirs,
                                        DirLockMode mode) {
  return AcquireAll(env, dirs, mode, kFileModeOfCache);
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
