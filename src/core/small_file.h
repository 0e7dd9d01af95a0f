// ReadSmallFile: the whole text of a small file such as a sysfs or procfs entry (a CPU list, a
// node's meminfo, /proc/self/cgroup), bounded so that a file larger than expected cannot make the
// caller allocate its size.
//
// Thread safety: reentrant.
#pragma once

#include <cstddef>
#include <string>

#include "kvtier/result.h"

namespace kvtier {

// sysfs and procfs files read this way are a few hundred bytes; a node's meminfo is under 2 KiB.
inline constexpr size_t kSmallFileBytesMax = 16 * 1024;

// At most kSmallFileBytesMax bytes of `path` (the rest is not read). The error names the path and
// errno's text (NotFound when it does not exist).
Result<std::string> ReadSmallFile(const std::string& path);

}  // namespace kvtier
