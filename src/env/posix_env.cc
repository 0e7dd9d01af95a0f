// The Linux Env: positional file I/O with O_DIRECT where the filesystem allows it, directory
// operations, and io_uring queues with the thread-pool fallback. See env.h for the contracts.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "core/aligned_buffer.h"
#include "core/limits.h"
#include "core/mutex.h"
#include "core/unique_fd.h"
#include "env/dir_trust.h"
#include "env/env.h"
#include "env/io_queues.h"

namespace kvtier {
namespace {

// Directories whose O_DIRECT refusal was logged, at most: beyond it the env stays quiet rather
// than grow without bound. Real deployments use a handful of cache directories.
constexpr size_t kDirectFallbackDirsMax = 1024;

class PosixFile final : public File {
 public:
  PosixFile(std::string path, UniqueFd fd, bool direct)
      : path_(std::move(path)), fd_(std::move(fd)), direct_(direct) {}

  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_; }
  int fd() const override { return fd_.get(); }

  Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override;
  Status WriteAt(uint64_t offset, std::span<const std::byte> src) override;
  Status Sync() override;
  Status Truncate(uint64_t size_bytes) override;
  Status Allocate(uint64_t offset, uint64_t len) override;
  Result<uint64_t> Size() override;
  Status Close() override { return fd_.Close().WithContext(path_); }

 private:
  // Rejects ranges the kernel would refuse, with a message naming the file and offset.
  Status CheckRange(std::string_view what, uint64_t offset, const void* buffer, size_t len) const;

  const std::string path_;
  UniqueFd fd_;
  const bool direct_;
};

Status PosixFile::CheckRange(std::string_view what, uint64_t offset, const void* buffer,
                             size_t len) const {
  return CheckFileRange(what, path_, direct_, offset, buffer, len);
}

Status PosixFile::ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) {
  *read_bytes = 0;
  KV_RETURN_IF_ERROR(CheckRange("pread", offset, dst.data(), dst.size()));
  size_t done = 0;
  // Each round either moves bytes, ends, or retries an EINTR.
  while (done < dst.size()) {
    const ssize_t n =
        ::pread(fd_.get(), dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(
          errno, DescribeFileRange("pread", path_, offset + done, dst.size() - done));
    }
    if (n == 0) break;  // End of file.
    done += static_cast<size_t>(n);
    // With O_DIRECT a transfer that ends mid-block ends at end of file, and a next read at that
    // unaligned offset would fail.
    if (direct_ && !IsAligned(done, kDirectIoAlignment)) break;
  }
  *read_bytes = done;
  return Status::Ok();
}

Status PosixFile::WriteAt(uint64_t offset, std::span<const std::byte> src) {
  KV_RETURN_IF_ERROR(CheckRange("pwrite", offset, src.data(), src.size()));
  size_t done = 0;
  while (done < src.size()) {
    const ssize_t n = ::pwrite(fd_.get(), src.data() + done, src.size() - done,
                               static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(
          errno, DescribeFileRange("pwrite", path_, offset + done, src.size() - done));
    }
    if (n == 0) {
      return Status::IoError(DescribeFileRange("pwrite", path_, offset + done, src.size() - done) +
                             ": wrote nothing");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PosixFile::Sync() {
  while (::fdatasync(fd_.get()) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "fdatasync " + path_);
  }
  return Status::Ok();
}

Status PosixFile::Truncate(uint64_t size_bytes) {
  if (size_bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return Status::InvalidArgument("truncate " + path_ + " to " + std::to_string(size_bytes) +
                                   " bytes: beyond the largest offset");
  }
  while (::ftruncate(fd_.get(), static_cast<off_t>(size_bytes)) != 0) {
    if (errno != EINTR) {
      return Status::FromErrno(
          errno, "truncate " + path_ + " to " + std::to_string(size_bytes) + " bytes");
    }
  }
  return Status::Ok();
}

Status PosixFile::Allocate(uint64_t offset, uint64_t len) {
  KV_RETURN_IF_ERROR(CheckFileRange("fallocate", path_, /*direct=*/false, offset, nullptr, len));
  while (::fallocate(fd_.get(), 0, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0) {
    if (errno == EINTR) continue;
    const std::string where = DescribeFileRange("fallocate", path_, offset, len);
    if (errno == EOPNOTSUPP) {
      return Status::NotSupported(where + ": the filesystem does not support fallocate");
    }
    return Status::FromErrno(errno, where);
  }
  return Status::Ok();
}

Result<uint64_t> PosixFile::Size() {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
  return static_cast<uint64_t>(st.st_size);
}

// FileKind::kRegular: checks what an O_NONBLOCK open found and, for a regular file, clears
// O_NONBLOCK again (it means nothing to regular files, but later I/O should not depend on that).
Status RequireRegular(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is not a regular file (" + FileKindName(st.st_mode) +
                                   ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return Status::FromErrno(errno, "fcntl(F_GETFL) " + path);
  if (::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Status::FromErrno(errno, "fcntl(F_SETFL) " + path);
  }
  return Status::Ok();
}

int OpenFlags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kReadOnly:
      return O_RDONLY;
    case OpenMode::kReadWrite:
      return O_RDWR;
    case OpenMode::kCreate:
      return O_RDWR | O_CREAT;
    case OpenMode::kCreateExclusive:
      return O_RDWR | O_CREAT | O_EXCL;
    case OpenMode::kTruncate:
      return O_RDWR | O_CREAT | O_TRUNC;
  }
  return O_RDONLY;
}

// Turns O_DIRECT on for an open descriptor. Returns false when the filesystem refuses it (EINVAL,
// with the reason in *reason), true when it is on.
Result<bool> EnableDirectIo(int fd, const std::string& path, std::string* reason) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return Status::FromErrno(errno, "fcntl(F_GETFL) " + path);
  if (::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0) return true;
  if (errno != EINVAL) return Status::FromErrno(errno, "fcntl(F_SETFL, O_DIRECT) " + path);
  *reason = Status::FromErrno(errno, "fcntl(F_SETFL, O_DIRECT)").message();
  return false;
}

class PosixEnv final : public Env {
 public:
  explicit PosixEnv(const PosixEnvOptions& options)
      : logger_(options.logger), clock_(options.clock != nullptr ? options.clock : SystemClock()) {}

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<IoQueue>> NewIoQueue(const IoQueueOptions& options) override;
  Status CreateDirs(const std::string& path, uint32_t mode) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> FreeSpaceBytes(const std::string& path) override;
  Clock* clock() override { return clock_; }
  Logger* logger() override { return logger_; }

 private:
  // Logs the buffered-I/O fallback once per directory.
  void NoteDirectIoFallback(const std::string& path, const std::string& reason) KV_EXCLUDES(mu_);
  Status MakeDir(const std::string& path, uint32_t mode);

  Logger* const logger_;
  Clock* const clock_;
  Mutex mu_;
  std::set<std::string> direct_fallback_dirs_ KV_GUARDED_BY(mu_);
  bool io_uring_fallback_logged_ KV_GUARDED_BY(mu_) = false;
};

Result<std::unique_ptr<File>> PosixEnv::OpenFile(const std::string& path,
                                                 const FileOptions& options) {
  // O_DIRECT is set with fcntl after a buffered open rather than passed to open(2): a refused
  // O_DIRECT open may already have created the file, so a retry with O_EXCL would then fail.
  const bool regular = options.kind == FileKind::kRegular;
  const bool no_follow = options.links == Links::kRefuse;
  const int flags = OpenFlags(options.mode) | O_CLOEXEC | (regular ? O_NONBLOCK | O_NOCTTY : 0) |
                    (no_follow ? O_NOFOLLOW : 0);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags, static_cast<mode_t>(options.create_mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == EEXIST && options.mode == OpenMode::kCreateExclusive) {
      return Status::InvalidArgument("open " + path + ": the file already exists");
    }
    // O_NOFOLLOW reports a link as the last component with ELOOP, dangling or not.
    if (no_follow && errno == ELOOP) {
      return Status::InvalidArgument(path + " is a symbolic link: refusing to follow it");
    }
    // A directory opened for writing, or a FIFO without a reader, fails before fstat can tell.
    if (regular && (errno == EISDIR || errno == ENXIO)) {
      return Status::InvalidArgument(path + " is not a regular file (" +
                                     (errno == EISDIR ? "a directory" : "a FIFO or device") + ")");
    }
    return Status::FromErrno(errno, "open " + path);
  }
  UniqueFd owned(fd);
  if (regular) KV_RETURN_IF_ERROR(RequireRegular(owned.get(), path));
  bool direct = false;
  if (options.direct != DirectIo::kOff) {
    std::string reason;
    KV_ASSIGN_OR_RETURN(direct, EnableDirectIo(owned.get(), path, &reason));
    if (!direct && options.direct == DirectIo::kRequired) {
      owned.Reset();
      // Only an exclusive create proves this call made the file, so only then is it removed.
      if (options.mode == OpenMode::kCreateExclusive) ::unlink(path.c_str());
      return Status::NotSupported("O_DIRECT is required for " + path + " but the filesystem of " +
                                  DirName(path) + " refuses it (" + reason + ")");
    }
    if (!direct) NoteDirectIoFallback(path, reason);
  }
  return std::unique_ptr<File>(std::make_unique<PosixFile>(path, std::move(owned), direct));
}

void PosixEnv::NoteDirectIoFallback(const std::string& path, const std::string& reason) {
  const std::string dir = DirName(path);
  {
    MutexLock lock(&mu_);
    if (direct_fallback_dirs_.size() >= kDirectFallbackDirsMax) return;
    if (!direct_fallback_dirs_.insert(dir).second) return;
  }
  LogTo(logger_, LogLevel::kWarn,
        "O_DIRECT refused in " + dir + " (" + reason + "); files there use buffered I/O");
}

Result<std::unique_ptr<IoQueue>> PosixEnv::NewIoQueue(const IoQueueOptions& options) {
  KV_RETURN_IF_ERROR(ValidateIoQueueOptions(options));
  switch (options.backend) {
    case IoBackend::kIoUring:
      return NewIoUringQueue(options);
    case IoBackend::kThreadPool:
      return NewThreadPoolIoQueue(options);
    case IoBackend::kAuto:
      break;
  }
  Result<std::unique_ptr<IoQueue>> ring = NewIoUringQueue(options);
  if (ring.ok()) return ring;
  bool first = false;
  {
    MutexLock lock(&mu_);
    first = !io_uring_fallback_logged_;
    io_uring_fallback_logged_ = true;
  }
  if (first) {
    LogTo(logger_, LogLevel::kWarn,
          "io_uring unavailable (" + ring.status().ToString() +
              "); I/O queues use the pread/pwrite thread pool");
  }
  return NewThreadPoolIoQueue(options);
}

Status PosixEnv::MakeDir(const std::string& path, uint32_t mode) {
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) == 0) return Status::Ok();
  if (errno != EEXIST) return Status::FromErrno(errno, "mkdir " + path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("mkdir " + path + ": exists and is not a directory");
  }
  return Status::Ok();
}

Status PosixEnv::CreateDirs(const std::string& path, uint32_t mode) {
  return CreateDirsWith(path, [this, mode](const std::string& dir) { return MakeDir(dir, mode); });
}

Result<std::vector<std::string>> PosixEnv::ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return Status::FromErrno(errno, "opendir " + path);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int read_errno = errno;
  ::closedir(dir);
  if (read_errno != 0) return Status::FromErrno(read_errno, "readdir " + path);
  std::sort(names.begin(), names.end());
  return names;
}

Status PosixEnv::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "unlink " + path);
  return Status::Ok();
}

Status PosixEnv::RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + from + " to " + to);
  }
  return Status::Ok();
}

Status PosixEnv::SyncDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open directory " + path);
  while (::fsync(fd.get()) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "fsync directory " + path);
  }
  return fd.Close().WithContext(path);
}

bool PosixEnv::FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Result<uint64_t> PosixEnv::FreeSpaceBytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return Status::FromErrno(errno, "statvfs " + path);
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

}  // namespace

std::unique_ptr<Env> NewPosixEnv(const PosixEnvOptions& options) {
  return std::make_unique<PosixEnv>(options);
}

}  // namespace kvtier
