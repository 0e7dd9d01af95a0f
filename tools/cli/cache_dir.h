// The check `kvtier run` and `kvtier chat` make of --cache-dir before loading anything, so that a
// directory that cannot hold the cache (read-only, not writable by this user, not a directory, a
// full disk) is a clear error at once rather than a run that claims to store chunks that never
// reach the disk.
//
// Thread safety: a free function. It creates and removes one probe file in the directory.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

// Creates `dir` (and missing parents, mode 0700) when missing, refuses it when it is a symbolic
// link, another user's or writable by others (env/dir_trust.h), then writes, syncs and removes
// a probe file of 4 KiB in it (an unpredictable name, created O_EXCL|O_NOFOLLOW), and checks that its filesystem has at least `free_bytes_min` bytes
// free. The error names the directory and the reason: "cache directory D cannot be used: ...",
// with the errno's code kept (NoSpace for a full disk, IoError for a read-only one,
// InvalidArgument when D is not a directory).
Status CheckCacheDirUsable(const std::string& dir, uint64_t free_bytes_min);

}  // namespace kvtier::cli
