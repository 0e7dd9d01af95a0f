// Thread CPU priority: lets a thread that does background work (writing blocks down to the SSD
// and the remote tier) give way to the process's other threads when both want a CPU, by raising
// its own Linux nice value. Linux keeps a nice value per thread (setpriority on the thread's id);
// a thread's later threads start with its value.
//
// Why nice by default and SCHED_IDLE only on request: a nice thread still gets a share of a busy
// CPU (nice 10 about a tenth of a nice-0 thread's), so writes that must reach the SSD within the
// write-back age limit keep moving on a machine that is never idle. A SCHED_IDLE thread gets
// about 0.3 % of a CPU another thread wants, and its wake-ups never preempt that thread: what a
// machine with idle cores between the inference engine's steps wants (measured in vLLM: the
// write threads' wake-ups preempting its forward pass). Its writes then wait for idle time; on
// a machine that is never idle they fall behind until back-pressure (a full queue, a memory
// tier full of blocks not yet written) makes the engine's own threads wait or refuse.
//
// The change cannot be undone without CAP_SYS_NICE (an unprivileged thread may only raise its nice
// value), so only threads that do nothing else are lowered.
//
// Thread safety: each function acts on the calling thread only.
#pragma once

#include "kvtier/result.h"

namespace kvtier {

// Nice values run from -20 (first) to 19 (last).
inline constexpr int kNiceMax = 19;

// The calling thread's nice value.
int ThisThreadNice();

// Raises the calling thread's nice value by `increment` (at most to kNiceMax; 0 changes nothing)
// and returns the new value. InvalidArgument for a negative increment; the error of setpriority
// (named with errno's text) otherwise, the thread left as it was.
Result<int> LowerThisThreadPriority(int increment);

// Moves the calling thread to SCHED_IDLE (sched(7)), keeping its nice value. The error of
// sched_setscheduler (named with errno's text) otherwise, the thread left as it was.
Status UseIdleScheduling();

// Whether the calling thread runs under SCHED_IDLE.
bool ThisThreadIdleScheduled();

}  // namespace kvtier
