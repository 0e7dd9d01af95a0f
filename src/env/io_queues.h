// The two IoQueue backends of the posix Env, exposed so that other Envs (an in-memory Env, the
// fault-injecting decorator) and benchmarks can build one directly.
//
// - NewIoUringQueue: one io_uring ring per queue, sized to the queue depth. The fast path: one
//   io_uring_submit per Submit batch and batched reaping of completions.
// - NewThreadPoolIoQueue: worker threads that run File::ReadAt/WriteAt/Sync (pread/pwrite/
//   fdatasync for posix files), for kernels or containers that refuse io_uring. It works with any
//   File, including those without a descriptor.
//
// Both keep a fixed table of `depth` request slots made at creation, so the data path allocates
// nothing; both return InvalidArgument for options outside core/limits.h.
//
// Thread safety and ownership: as IoQueue in env.h (one owner thread; requests borrow their File
// and buffer until Poll returns their completion; the destructor waits for requests in flight).
#pragma once

#include <memory>

#include "env/env.h"

namespace kvtier {

// Fails with the error of io_uring_queue_init (e.g. "Operation not permitted" under seccomp).
Result<std::unique_ptr<IoQueue>> NewIoUringQueue(const IoQueueOptions& options);

Result<std::unique_ptr<IoQueue>> NewThreadPoolIoQueue(const IoQueueOptions& options);

}  // namespace kvtier
