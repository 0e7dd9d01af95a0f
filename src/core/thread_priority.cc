#include "core/thread_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier {
namespace {

id_t ThisThreadId() { return static_cast<id_t>(syscall(SYS_gettid)); }

}  // namespace

// getpriority returns -1 both for nice -1 and on error; it cannot fail for the caller's own id.
int ThisThreadNice() { return getpriority(PRIO_PROCESS, ThisThreadId()); }

Result<int> LowerThisThreadPriority(int increment) {
  if (increment < 0) {
    return Status::InvalidArgument("thread priority: a negative nice increment (" +
                                   std::to_string(increment) + ") would raise the priority");
  }
  const int now = ThisThreadNice();
  if (increment == 0) return now;
  const int next = std::min(now + increment, kNiceMax);
  if (setpriority(PRIO_PROCESS, ThisThreadId(), next) != 0) {
    const int err = errno;
    return Status::IoError("thread priority: setpriority(nice " + std::to_string(next) +
                           ") failed: " + std::strerror(err));
  }
  return next;
}

Status UseIdleScheduling() {
  const sched_param param{.sched_priority = 0};
  // pid 0: the calling thread (Linux keeps the policy per thread).
  if (sched_setscheduler(0, SCHED_IDLE, &param) != 0) {
    const int err = errno;
    return Status::IoError(std::string("thread priority: sched_setscheduler(SCHED_IDLE) failed: ") +
                           std::strerror(err));
  }
  return Status::Ok();
}

bool ThisThreadIdleScheduled() { return sched_getscheduler(0) == SCHED_IDLE; }

}  // namespace kvtier
