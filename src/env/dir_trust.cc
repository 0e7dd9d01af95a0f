// See dir_trust.h.
#include "env/dir_trust.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <string>

#include "env/env.h"

namespace kvtier {
namespace {

// Room for getpwuid_r's strings; a name that does not fit is simply not shown.
constexpr size_t kPasswdBufferBytes = 4096;

std::string OctalMode(mode_t mode) {
  std::array<char, 16> text{};
  std::snprintf(text.data(), text.size(), "0%o", static_cast<unsigned>(mode & 07777));
  return text.data();
}

}  // namespace

std::string DescribeUid(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::array<char, kPasswdBufferBytes> buffer{};
  if (::getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr) {
    out += std::string(" (") + found->pw_name + ")";
  }
  return out;
}

Status CheckDirTrust(const std::string& dir, const struct stat& st, uid_t euid,
                     GroupWrite group_write) {
  const std::string what = "cache directory " + dir + " (owner " + DescribeUid(st.st_uid) +
                           ", mode " + OctalMode(st.st_mode) + ")";
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(what + " is not a directory");
  if (st.st_uid != euid) {
    return Status::InvalidArgument(what + " is not owned by this user (" + DescribeUid(euid) +
                                   "): refusing a directory another user controls");
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return Status::InvalidArgument(what + " is writable by others: refusing it (chmod o-w " + dir +
                                   ")");
  }
  if ((st.st_mode & S_IWGRP) != 0 && group_write == GroupWrite::kRefuse) {
    return Status::InvalidArgument(
        what + " is writable by its group, but ssd_file_mode does not share the cache with the " +
        "group: refusing it (chmod g-w " + dir + ", or set ssd_file_mode 0660)");
  }
  return Status::Ok();
}

Result<UniqueFd> OpenDirNoFollow(const std::string& dir) {
  int fd = -1;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    // O_NOFOLLOW|O_DIRECTORY on a link fails with ELOOP or ENOTDIR; lstat tells which it was.
    if ((err == ELOOP || err == ENOTDIR) && ::lstat(dir.c_str(), &lst) == 0 &&
        S_ISLNK(lst.st_mode)) {
      return Status::InvalidArgument("cache directory " + dir +
                                     " is a symbolic link: refusing to follow it (give the "
                                     "directory it names instead)");
    }
    if (err == ENOTDIR) {
      return Status::InvalidArgument("cache directory " + dir + " is not a directory");
    }
    return Status::FromErrno(err, "open directory " + dir);
  }
  return UniqueFd(fd);
}

Result<UniqueFd> OpenTrustedDir(const std::string& dir, GroupWrite group_write) {
  KV_ASSIGN_OR_RETURN(UniqueFd owned, OpenDirNoFollow(dir));
  struct stat st {};
  if (::fstat(owned.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + dir);
  KV_RETURN_IF_ERROR(CheckDirTrust(dir, st, ::geteuid(), group_write));
  return owned;
}

const char* FileKindName(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

namespace {

// Writes all of `bytes` to `fd`, retrying EINTR and short writes.
Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "write " + path);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// fsync of a directory, so that a rename in it is durable.
Status SyncDir(const std::string& dir) {
  int fd = -1;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, "open " + dir);
  UniqueFd owned(fd);
  if (::fsync(owned.get()) != 0) return Status::FromErrno(errno, "fsync " + dir);
  return Status::Ok();
}

}  // namespace

namespace {

// CheckReplaceable's checks of `path` itself (ReplaceRegularFile makes them again just before it
// writes).
Status CheckTarget(const std::string& what, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(what + ": empty path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(what + " " + path + " is " + FileKindName(st.st_mode) +
                                   ", not a regular file: refusing to replace it");
  }
  return Status::Ok();
}

}  // namespace

Status CheckReplaceable(const std::string& what, const std::string& path) {
  KV_RETURN_IF_ERROR(CheckTarget(what, path));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::FromErrno(errno, what + " " + path + ": its directory " + dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(what + " " + path + ": " + dir + " is not a directory");
  }
  return Status::Ok();
}

Status ReplaceRegularFile(const std::string& what, const std::string& path, std::string_view bytes,
                          uint32_t file_mode, bool durable) {
  KV_RETURN_IF_ERROR(CheckTarget(what, path));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  KV_ASSIGN_OR_RETURN(const std::string tmp, UniqueTempPath(dir + "." + name + ".tmp"));
  int fd = -1;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                static_cast<mode_t>(file_mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, what + ": create " + tmp);
  UniqueFd owned(fd);
  Status s = WriteAll(owned.get(), bytes, tmp);
  if (s.ok() && durable && ::fsync(owned.get()) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  if (s.ok()) s = owned.Close();
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::FromErrno(errno, "rename " + tmp + " to " + path);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());  // Our own temporary: O_EXCL made it, so nothing else is removed.
    return s.WithContext(what);
  }
  if (durable) return SyncDir(dir.empty() ? "." : dir).WithContext(what);
  return Status::Ok();
}

}  // namespace kvtier
