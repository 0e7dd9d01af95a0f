// Trusted directories: the check kvtier makes before it uses a cache directory, so that a
// directory another user owns or can write (a pre-created /tmp/cache, a 0777 shared folder) is
// refused instead of used. Whoever can write a directory can plant links and files in it, and
// whoever owns it can change that at any time; only a directory owned by the effective user and
// writable by nobody else (or by its group, when the cache is configured to share it with the
// group) keeps its entries under this user's control (docs/security.md).
//
// Why POSIX calls and not the Env: ownership and modes exist only on real directories; the
// in-memory Env has no other users to defend against.
//
// Thread safety: free functions. Ownership: OpenTrustedDir returns an owning descriptor.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/unique_fd.h"
#include "kvtier/result.h"

namespace kvtier {

// Whether the directory's group may write it.
enum class GroupWrite : uint8_t {
  kRefuse = 0,  // The cache's files are private (file_mode 0600 or 0640).
  kAllow = 1,   // The cache is shared with the group (file_mode 0660).
};

// Checks the fstat of a directory against the effective user `euid`: InvalidArgument naming the
// directory, its owner (uid and name when known) and its mode when another user owns it, when
// others may write it, or when its group may and `group_write` is kRefuse. A pure function of
// its arguments, so tests can check the rules without other users.
Status CheckDirTrust(const std::string& dir, const struct stat& st, uid_t euid,
                     GroupWrite group_write);

// Opens `dir` with O_DIRECTORY|O_NOFOLLOW and nothing else: InvalidArgument when `dir` is a
// symbolic link or not a directory, NotFound when it does not exist. For callers that decide
// `group_write` from what the directory holds before calling CheckDirTrust themselves.
Result<UniqueFd> OpenDirNoFollow(const std::string& dir);

// Opens `dir` with O_DIRECTORY|O_NOFOLLOW (a link in its place is refused, not followed) and
// checks it with CheckDirTrust against geteuid(). The descriptor lets callers open entries with
// *at() calls relative to the directory that was checked, so a directory swapped for a link
// afterwards is not followed. NotFound when `dir` does not exist.
Result<UniqueFd> OpenTrustedDir(const std::string& dir, GroupWrite group_write);

// Replaces the file `path` with `bytes`, for reports the user names (--metrics-file, stats
// files): the bytes go to a fresh temporary "<dir>/.<name>.tmp.<16 random hex digits>" created
// O_EXCL|O_NOFOLLOW with `file_mode` in the same directory, which is then renamed over `path`.
// A `path` that exists and is not a regular file (a FIFO, a device node such as /dev/null, a
// directory, a symbolic link) is refused with InvalidArgument naming what it is, and left as it
// was; `what` starts every message ("--metrics-file"). With `durable`, the temporary is synced
// before the rename and the directory after it, so the new bytes survive a crash (state files).
Status ReplaceRegularFile(const std::string& what, const std::string& path, std::string_view bytes,
                          uint32_t file_mode, bool durable = false);

// What ReplaceRegularFile would refuse before it writes anything: an empty path, a `path` that
// exists and is not a regular file, a directory part that does not exist or is not a directory.
// For a command to fail at its start, not after its work (--metrics-file is written at exit).
Status CheckReplaceable(const std::string& what, const std::string& path);

// What a file that is not a regular file is, for messages: "a symbolic link", "a directory",
// "a FIFO", "a socket", "a character device", "a block device" (else "not a regular file").
const char* FileKindName(mode_t mode);

// "uid 1000 (alice)", or "uid 1000" when the user database has no name for it.
std::string DescribeUid(uid_t uid);

}  // namespace kvtier
