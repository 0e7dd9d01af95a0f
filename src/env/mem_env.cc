// MemEnv: file contents as byte vectors shared between the namespace and the Files open on them,
// directories as a set of paths, and the thread-pool IoQueue. See mem_env.h for the contract.
#include "env/mem_env.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "core/mutex.h"
#include "env/io_queues.h"

namespace kvtier {
namespace {

// Directories whose O_DIRECT refusal was logged, at most, as in the posix Env.
constexpr size_t kDirectFallbackDirsMax = 1024;

// Folds repeated slashes and drops a trailing one: "/a//b/" -> "/a/b".
std::string NormalizePath(const std::string& path) {
  std::string out;
  out.reserve(path.size());
  for (const char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out.push_back(c);
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// Adds the name of `path` to *names when `path` is right below the directory whose paths start
// with `prefix`. False once `path` no longer starts with it: the containers are sorted, so every
// path with the prefix has been seen.
bool AddChild(const std::string& prefix, const std::string& path, std::set<std::string>* names) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  std::string name = path.substr(prefix.size());
  if (!name.empty() && name.find('/') == std::string::npos) names->insert(std::move(name));
  return true;
}

// The bytes of every file's contents against the env's capacity.
class SpaceAccount {
 public:
  explicit SpaceAccount(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Takes `bytes` when they fit, atomically, so concurrent writers never overshoot.
  bool TryTake(uint64_t bytes) {
    uint64_t used = used_bytes_.load();
    do {
      if (bytes > capacity_bytes_ - used) return false;
    } while (!used_bytes_.compare_exchange_weak(used, used + bytes));
    return true;
  }
  void Give(uint64_t bytes) { used_bytes_.fetch_sub(bytes); }
  uint64_t free_bytes() const { return capacity_bytes_ - used_bytes_.load(); }

 private:
  const uint64_t capacity_bytes_;
  std::atomic<uint64_t> used_bytes_{0};  // At most capacity_bytes_: only TryTake adds.
};

// The contents of one file. Shared (shared_ptr) between the namespace and every File open on it
// because, as on posix, a removed or replaced file stays usable through the Files still open on
// it: the SSD tier keeps reading segments that its reclaim has already removed.
class MemFileData {
 public:
  explicit MemFileData(SpaceAccount* space) : space_(space) {}
  ~MemFileData() { space_->Give(bytes_.size()); }

  MemFileData(const MemFileData&) = delete;
  MemFileData& operator=(const MemFileData&) = delete;

  // Copies what exists of [offset, offset + dst.size()) into dst; returns the bytes copied.
  size_t Read(uint64_t offset, std::span<std::byte> dst) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (offset >= bytes_.size()) return 0;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(dst.size(), bytes_.size() - offset));
    std::memcpy(dst.data(), bytes_.data() + offset, n);
    return n;
  }
  // False, writing nothing, when the file would grow past the env's capacity.
  bool Write(uint64_t offset, std::span<const std::byte> src) KV_EXCLUDES(mu_) {
    if (src.empty()) return true;  // pwrite of nothing does not extend the file.
    MutexLock lock(&mu_);
    if (offset + src.size() > bytes_.size() && !ResizeLocked(offset + src.size())) return false;
    std::memcpy(bytes_.data() + offset, src.data(), src.size());
    return true;
  }
  // Truncate: any size. False when growing would pass the capacity.
  bool SetSize(uint64_t size) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return ResizeLocked(size);
  }
  // Allocate: extends to `size` when shorter, never shrinks.
  bool GrowTo(uint64_t size) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return size <= bytes_.size() || ResizeLocked(size);
  }
  uint64_t size() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return bytes_.size();
  }

 private:
  bool ResizeLocked(uint64_t size) KV_REQUIRES(mu_) {
    if (size > bytes_.size()) {
      if (!space_->TryTake(size - bytes_.size())) return false;
    } else {
      space_->Give(bytes_.size() - size);
    }
    bytes_.resize(static_cast<size_t>(size));  // New bytes are zero: a hole reads as zeros.
    return true;
  }

  SpaceAccount* const space_;
  Mutex mu_;
  std::vector<std::byte> bytes_ KV_GUARDED_BY(mu_);
};

enum class FileAccess : uint8_t { kReadOnly = 0, kReadWrite = 1 };

// A File over shared contents. Close drops the reference; a closed file fails every call with
// EBADF, as a closed descriptor does.
class MemFile final : public File {
 public:
  MemFile(std::string path, std::shared_ptr<MemFileData> data, FileAccess access, bool direct)
      : path_(std::move(path)), data_(std::move(data)), access_(access), direct_(direct) {}

  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_; }
  int fd() const override { return -1; }

  Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override {
    *read_bytes = 0;
    if (data_ == nullptr) return Failed(EBADF, "pread", offset, dst.size());
    KV_RETURN_IF_ERROR(CheckFileRange("pread", path_, direct_, offset, dst.data(), dst.size()));
    *read_bytes = data_->Read(offset, dst);
    return Status::Ok();
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> src) override {
    if (data_ == nullptr || access_ == FileAccess::kReadOnly) {
      return Failed(EBADF, "pwrite", offset, src.size());
    }
    KV_RETURN_IF_ERROR(CheckFileRange("pwrite", path_, direct_, offset, src.data(), src.size()));
    if (!data_->Write(offset, src)) return Failed(ENOSPC, "pwrite", offset, src.size());
    return Status::Ok();
  }
  // Every byte is durable once written; a sync only needs an open file.
  Status Sync() override {
    if (data_ == nullptr) return Status::FromErrno(EBADF, "fdatasync " + path_);
    return Status::Ok();
  }
  Status Truncate(uint64_t size_bytes) override;
  Status Allocate(uint64_t offset, uint64_t len) override;
  Result<uint64_t> Size() override {
    if (data_ == nullptr) return Status::FromErrno(EBADF, "fstat " + path_);
    return data_->size();
  }
  Status Close() override {
    data_.reset();
    return Status::Ok();
  }

 private:
  Status Failed(int error_number, std::string_view what, uint64_t offset, uint64_t len) const {
    return Status::FromErrno(error_number, DescribeFileRange(what, path_, offset, len));
  }

  const std::string path_;
  std::shared_ptr<MemFileData> data_;  // nullptr once closed.
  const FileAccess access_;
  const bool direct_;
};

Status MemFile::Truncate(uint64_t size_bytes) {
  const std::string where = "truncate " + path_ + " to " + std::to_string(size_bytes) + " bytes";
  if (data_ == nullptr) return Status::FromErrno(EBADF, where);
  if (access_ == FileAccess::kReadOnly) return Status::FromErrno(EINVAL, where);  // As ftruncate.
  if (size_bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return Status::InvalidArgument(where + ": beyond the largest offset");
  }
  if (!data_->SetSize(size_bytes)) return Status::FromErrno(ENOSPC, where);
  return Status::Ok();
}

Status MemFile::Allocate(uint64_t offset, uint64_t len) {
  if (data_ == nullptr || access_ == FileAccess::kReadOnly) {
    return Failed(EBADF, "fallocate", offset, len);
  }
  KV_RETURN_IF_ERROR(CheckFileRange("fallocate", path_, /*direct=*/false, offset, nullptr, len));
  if (!data_->GrowTo(offset + len)) return Failed(ENOSPC, "fallocate", offset, len);
  return Status::Ok();
}

class MemEnv final : public Env {
 public:
  explicit MemEnv(const MemEnvOptions& options)
      : clock_(options.clock != nullptr ? options.clock : SystemClock()),
        logger_(options.logger),
        direct_io_(options.direct_io),
        space_(options.capacity_bytes) {}

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
  enum class Entry : uint8_t { kNone = 0, kFile = 1, kDir = 2 };

  // What the normalized path `norm` names now. "/" and "." always name directories.
  Entry Find(const std::string& norm) const KV_REQUIRES(mu_);
  // NotFound unless the parent of `norm` is a directory (IoError when it is a file). `what` and
  // `path` (as the caller wrote it) go into the message.
  Status CheckParent(const std::string& norm, std::string_view what, const std::string& path) const
      KV_REQUIRES(mu_);
  Result<std::shared_ptr<MemFileData>> OpenDataLocked(const std::string& norm,
                                                      const std::string& path,
                                                      const FileOptions& options, bool* created)
      KV_REQUIRES(mu_);
  // Whether a file opened with `direct` is direct; NotSupported for kRequired where refused.
  Result<bool> ResolveDirect(const std::string& path, DirectIo direct) KV_EXCLUDES(mu_);
  Status MakeDir(const std::string& path) KV_EXCLUDES(mu_);

  Clock* const clock_;
  Logger* const logger_;
  const MemDirectIo direct_io_;
  // Declared before files_: the contents give their bytes back to it when destroyed.
  SpaceAccount space_;
  mutable Mutex mu_;
  std::set<std::string> dirs_ KV_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<MemFileData>> files_ KV_GUARDED_BY(mu_);
  std::set<std::string> direct_fallback_dirs_ KV_GUARDED_BY(mu_);
};

MemEnv::Entry MemEnv::Find(const std::string& norm) const {
  if (norm == "/" || norm == "." || dirs_.count(norm) != 0) return Entry::kDir;
  return files_.count(norm) != 0 ? Entry::kFile : Entry::kNone;
}

Status MemEnv::CheckParent(const std::string& norm, std::string_view what,
                           const std::string& path) const {
  const std::string where = std::string(what) + " " + path;
  if (norm.empty()) return Status::FromErrno(ENOENT, where);
  switch (Find(DirName(norm))) {
    case Entry::kDir:
      return Status::Ok();
    case Entry::kFile:
      return Status::FromErrno(ENOTDIR, where);
    case Entry::kNone:
      break;
  }
  return Status::FromErrno(ENOENT, where);
}

Result<std::shared_ptr<MemFileData>> MemEnv::OpenDataLocked(const std::string& norm,
                                                            const std::string& path,
                                                            const FileOptions& options,
                                                            bool* created) {
  *created = false;
  const Entry entry = Find(norm);
  if (entry == Entry::kDir) {
    if (options.kind == FileKind::kRegular) {
      return Status::InvalidArgument(path + " is not a regular file (a directory)");
    }
    return Status::FromErrno(EISDIR, "open " + path);
  }
  if (entry == Entry::kFile) {
    if (options.mode == OpenMode::kCreateExclusive) {
      return Status::InvalidArgument("open " + path + ": the file already exists");
    }
    std::shared_ptr<MemFileData> data = files_.at(norm);
    if (options.mode == OpenMode::kTruncate) KV_CHECK(data->SetSize(0));  // Shrinking fits.
    return data;
  }
  if (options.mode == OpenMode::kReadOnly || options.mode == OpenMode::kReadWrite) {
    return Status::FromErrno(ENOENT, "open " + path);
  }
  KV_RETURN_IF_ERROR(CheckParent(norm, "open", path));
  auto data = std::make_shared<MemFileData>(&space_);
  files_.emplace(norm, data);
  *created = true;
  return data;
}

Result<bool> MemEnv::ResolveDirect(const std::string& path, DirectIo direct) {
  if (direct == DirectIo::kOff) return false;
  if (direct_io_ == MemDirectIo::kSupported) return true;
  const std::string dir = DirName(NormalizePath(path));
  if (direct == DirectIo::kRequired) {
    return Status::NotSupported("O_DIRECT is required for " + path + " but the in-memory env of " +
                                dir + " refuses it (MemDirectIo::kRefused)");
  }
  bool first = false;
  {
    MutexLock lock(&mu_);
    first = direct_fallback_dirs_.size() < kDirectFallbackDirsMax &&
            direct_fallback_dirs_.insert(dir).second;
  }
  if (first) {
    LogTo(logger_, LogLevel::kWarn,
          "O_DIRECT refused in " + dir + " (in-memory env); files there use buffered I/O");
  }
  return false;
}

Result<std::unique_ptr<File>> MemEnv::OpenFile(const std::string& path,
                                               const FileOptions& options) {
  const std::string norm = NormalizePath(path);
  std::shared_ptr<MemFileData> data;
  bool created = false;
  {
    MutexLock lock(&mu_);
    KV_ASSIGN_OR_RETURN(data, OpenDataLocked(norm, path, options, &created));
  }
  Result<bool> direct = ResolveDirect(path, options.direct);
  if (!direct.ok()) {
    // As posix: only an exclusive create proves this call made the file, so only then is it
    // removed again.
    if (created && options.mode == OpenMode::kCreateExclusive) RemoveFile(path).IgnoreError();
    return direct.status();
  }
  const FileAccess access =
      options.mode == OpenMode::kReadOnly ? FileAccess::kReadOnly : FileAccess::kReadWrite;
  return std::unique_ptr<File>(std::make_unique<MemFile>(path, std::move(data), access, *direct));
}

Result<std::unique_ptr<IoQueue>> MemEnv::NewIoQueue(const IoQueueOptions& options) {
  KV_RETURN_IF_ERROR(ValidateIoQueueOptions(options));
  if (options.backend == IoBackend::kIoUring) {
    return Status::NotSupported("io_uring: in-memory files have no descriptor to submit on");
  }
  return NewThreadPoolIoQueue(options);
}

Status MemEnv::MakeDir(const std::string& path) {
  const std::string norm = NormalizePath(path);
  MutexLock lock(&mu_);
  switch (Find(norm)) {
    case Entry::kDir:
      return Status::Ok();
    case Entry::kFile:
      return Status::InvalidArgument("mkdir " + path + ": exists and is not a directory");
    case Entry::kNone:
      break;
  }
  KV_RETURN_IF_ERROR(CheckParent(norm, "mkdir", path));
  dirs_.insert(norm);
  return Status::Ok();
}

Status MemEnv::CreateDirs(const std::string& path, uint32_t /*mode: not kept*/) {
  return CreateDirsWith(path, [this](const std::string& dir) { return MakeDir(dir); });
}

Result<std::vector<std::string>> MemEnv::ListDir(const std::string& path) {
  const std::string norm = NormalizePath(path);
  MutexLock lock(&mu_);
  switch (Find(norm)) {
    case Entry::kNone:
      return Status::FromErrno(ENOENT, "opendir " + path);
    case Entry::kFile:
      return Status::FromErrno(ENOTDIR, "opendir " + path);
    case Entry::kDir:
      break;
  }
  // Entries are the paths right below `norm`: its prefix and then a name without a slash.
  const std::string prefix = norm == "/" ? "/" : (norm == "." ? "" : norm + "/");
  std::set<std::string> names;  // Sorted and without duplicates.
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && AddChild(prefix, *it, &names);
       ++it) {
  }
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && AddChild(prefix, it->first, &names); ++it) {
  }
  return std::vector<std::string>(names.begin(), names.end());
}

Status MemEnv::RemoveFile(const std::string& path) {
  const std::string norm = NormalizePath(path);
  MutexLock lock(&mu_);
  switch (Find(norm)) {
    case Entry::kNone:
      return Status::FromErrno(ENOENT, "unlink " + path);
    case Entry::kDir:
      return Status::FromErrno(EISDIR, "unlink " + path);
    case Entry::kFile:
      break;
  }
  files_.erase(norm);  // Files open on it keep the contents alive.
  return Status::Ok();
}

Status MemEnv::RenameFile(const std::string& from, const std::string& to) {
  const std::string from_norm = NormalizePath(from);
  const std::string to_norm = NormalizePath(to);
  const std::string where = "rename " + from + " to " + to;
  MutexLock lock(&mu_);
  switch (Find(from_norm)) {
    case Entry::kNone:
      return Status::FromErrno(ENOENT, where);
    case Entry::kDir:
      return Status::NotSupported(where + ": the in-memory env renames files only");
    case Entry::kFile:
      break;
  }
  if (Find(to_norm) == Entry::kDir) return Status::FromErrno(EISDIR, where);
  KV_RETURN_IF_ERROR(CheckParent(to_norm, "rename", from + " to " + to));
  if (from_norm == to_norm) return Status::Ok();
  std::shared_ptr<MemFileData> data = std::move(files_.at(from_norm));
  files_.erase(from_norm);
  files_[to_norm] = std::move(data);  // A replaced file lives on in the Files open on it.
  return Status::Ok();
}

Status MemEnv::SyncDir(const std::string& path) {
  MutexLock lock(&mu_);
  switch (Find(NormalizePath(path))) {
    case Entry::kNone:
      return Status::FromErrno(ENOENT, "open directory " + path);
    case Entry::kFile:
      return Status::FromErrno(ENOTDIR, "open directory " + path);
    case Entry::kDir:
      break;
  }
  return Status::Ok();
}

bool MemEnv::FileExists(const std::string& path) {
  MutexLock lock(&mu_);
  return Find(NormalizePath(path)) != Entry::kNone;
}

Result<uint64_t> MemEnv::FreeSpaceBytes(const std::string& path) {
  {
    MutexLock lock(&mu_);
    if (Find(NormalizePath(path)) == Entry::kNone) {
      return Status::FromErrno(ENOENT, "statvfs " + path);
    }
  }
  return space_.free_bytes();
}

}  // namespace

std::unique_ptr<Env> NewMemEnv(const MemEnvOptions& options) {
  return std::make_unique<MemEnv>(options);
}

}  // namespace kvtier
