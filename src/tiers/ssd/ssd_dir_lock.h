// DirLock: one owner per SSD cache directory. A tier holds an exclusive flock(2) on <dir>/LOCK for
// its whole life; read-only tools hold a shared one (docs/ssd_format.md §9).
//
// Why: two processes writing one directory would delete each other's checkpoint temporaries and
// interleave segments; the second opener must be refused with a Status that names the holder.
//
// Why POSIX calls and not the Env: a lock is only meaningful when the kernel arbitrates it between
// processes, so there is nothing an in-memory or fault-injecting Env could usefully substitute;
// every Env in use (posix_env, FaultInjectionEnv over it) works on real directories. The Env is
// taken for its logger and so callers need not change if locking moves behind it later.
//
// flock locks belong to an open file description, so two Acquires in one process conflict just as
// two processes do. The exclusive holder writes its pid ("<pid>\n") into LOCK after locking, for
// the Busy message; the file's content is informational and never trusted for the locking itself.
//
// Thread safety: a DirLock is a value owned by one thread at a time; Acquire may be called
// concurrently. Ownership: a DirLock owns the LOCK file's descriptor; destruction releases it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/unique_fd.h"
#include "env/env.h"
#include "kvtier/result.h"

namespace kvtier::ssd {

inline constexpr const char* kLockFileName = "LOCK";

// The file_mode the cache tools pass, which do not know the tier's: LOCK is created 0600 when
// missing, and the directory may be group-writable only when its LOCK is (a tier with
// file_mode 0660 made it).
inline constexpr uint32_t kFileModeOfCache = 0;

enum class DirLockMode : uint8_t { kExclusive = 0, kShared = 1 };

// Holds flock on <dir>/LOCK for its lifetime (move-only RAII).
class DirLock {
 public:
  DirLock() = default;
  DirLock(DirLock&&) noexcept;
  DirLock& operator=(DirLock&&) noexcept;
  ~DirLock();

  // Busy "<dir> is in use by process <pid>" when another holder conflicts; IoError otherwise.
  // kShared is what read-only tools take: it excludes an exclusive holder (a running tier) and
  // repair, but allows other readers. Creates LOCK (mode 0600) if missing, unless the
  // directory is not writable, in which case kShared on a dir without LOCK succeeds unlocked.
  // First opens `dir` without following a link and refuses (InvalidArgument naming owner and
  // mode) a directory this user does not own or others can write (env/dir_trust.h); LOCK is
  // opened relative to that directory with O_NOFOLLOW, so a link named LOCK is refused, as is a
  // LOCK with several hard links. A pid left in LOCK by a holder that died without releasing it
  // is taken over with a warning that names it.
  static Result<DirLock> Acquire(Env* env, const std::string& dir, DirLockMode mode);
  // As above, creating a missing LOCK with `file_mode` (SsdTierOptions::file_mode) instead.
  static Result<DirLock> Acquire(Env* env, const std::string& dir, DirLockMode mode,
                                 uint32_t file_mode);

  // True when a lock is held (false for a default-constructed, moved-from or unlocked one).
  bool held() const;
  const std::string& dir() const { return dir_; }

 private:
  DirLock(std::string dir, UniqueFd fd, DirLockMode mode);
  void Release();

  std::string dir_;
  UniqueFd fd_;
  DirLockMode mode_ = DirLockMode::kShared;
};

// Every directory of a set, in order; on failure releases those already taken.
Result<std::vector<DirLock>> AcquireAll(Env* env, const std::vector<std::string>& dirs,
                                        DirLockMode mode);
// As above with the mode of a missing LOCK file.
Result<std::vector<DirLock>> AcquireAll(Env* env, const std::vector<std::string>& dirs,
                                        DirLockMode mode, uint32_t file_mode);

}  // namespace kvtier::ssd
