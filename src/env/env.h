// Env: the seam between kvtier and the operating system. Every file, asynchronous I/O queue and
// clock that the tiers use comes from an Env passed in through their options, so tests can swap in
// a fault-injecting Env (src/testing/fault_injection_env.h) and a ManualClock and run crash and
// failure scenarios deterministically.
//
// Thread safety: Env and Clock implementations are safe for concurrent use. A File may be used
// from several threads at once for positional reads and writes (ReadAt/WriteAt at distinct
// ranges). An IoQueue belongs to one owner thread: only that thread calls Submit and Poll.
//
// Ownership: OpenFile and NewIoQueue return owning unique_ptrs. An IoRequest borrows its File and
// buffer; both must stay alive until the request's completion has been returned by Poll.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/logger.h"
#include "kvtier/result.h"

namespace kvtier {

// ---------------------------------------------------------------------------------------------
// Clock

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time for durations, rates and timeouts.
  virtual uint64_t NowMicros() const = 0;
  // Wall-clock time (microseconds since the Unix epoch) for expiries that are persisted and must
  // keep their meaning across restarts.
  virtual uint64_t WallMicros() const = 0;
  virtual void SleepForMicros(uint64_t micros) = 0;
};

// The process's steady and system clocks. Stateless; one instance may be shared by everything.
Clock* SystemClock();

// A clock that moves only when told to; SleepForMicros advances it instead of sleeping.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_micros = 1'000'000) : now_(start_micros) {}
  uint64_t NowMicros() const override { return now_.load(); }
  uint64_t WallMicros() const override { return now_.load(); }
  void SleepForMicros(uint64_t micros) override { Advance(micros); }
  void Advance(uint64_t micros) { now_.fetch_add(micros); }

 private:
  std::atomic<uint64_t> now_;
};

// ---------------------------------------------------------------------------------------------
// Files

enum class OpenMode : uint8_t {
  kReadOnly = 0,
  kReadWrite = 1,        // The file must exist.
  kCreate = 2,           // Read-write; created when missing, kept when present.
  kCreateExclusive = 3,  // Read-write; fails with InvalidArgument when the file exists.
  kTruncate = 4,         // Read-write; created when missing, emptied when present.
};

enum class DirectIo : uint8_t {
  kOff = 0,        // Buffered I/O through the page cache.
  kPreferred = 1,  // O_DIRECT when the filesystem supports it, else buffered with a logged reason.
  kRequired = 2,   // O_DIRECT or NotSupported.
};

// What a path must name for OpenFile to accept it.
enum class FileKind : uint8_t {
  kAny = 0,  // Whatever the path names; opening a FIFO may block until it has a writer.
  // A regular file (symlinks to one are followed). The open never blocks (O_NONBLOCK, dropped
  // once the file is known to be regular), so a FIFO, socket or device named like a data file
  // cannot hang the caller; anything else fails with InvalidArgument "<path> is not a regular
  // file (<what it is>)".
  kRegular = 1,
};

// What OpenFile does when the last component of the path is a symbolic link.
enum class Links : uint8_t {
  kFollow = 0,  // Opens what the link names: files the user names (models, prompts, keys).
  // O_NOFOLLOW: a link fails with InvalidArgument "<path> is a symbolic link ...", whether it
  // dangles or not, and nothing it names is opened, created or truncated. Every file kvtier opens
  // in a cache directory uses it, so a link planted there cannot redirect a write elsewhere.
  kRefuse = 1,
};

struct FileOptions {
  OpenMode mode = OpenMode::kReadOnly;
  DirectIo direct = DirectIo::kOff;
  FileKind kind = FileKind::kAny;
  // Permission bits of a file the open creates (before the process umask); ignored otherwise.
  uint32_t create_mode = 0644;
  Links links = Links::kFollow;
};

// A file accessed by position. With O_DIRECT in effect (direct() is true), buffers, offsets and
// lengths passed to ReadAt/WriteAt and to an IoQueue must be multiples of kDirectIoAlignment.
class File {
 public:
  virtual ~File() = default;

  virtual const std::string& path() const = 0;
  // True when the file was opened with O_DIRECT.
  virtual bool direct() const = 0;
  // The descriptor an IoQueue submits on; -1 for files that have none (in-memory Envs).
  virtual int fd() const = 0;

  // Reads up to dst.size() bytes at `offset`; *read_bytes is less than dst.size() only at end of
  // file. Retries EINTR and partial reads internally.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) = 0;
  // Writes all of src at `offset`, or returns an error (NoSpace for a full disk).
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> src) = 0;
  // fdatasync: the data written so far, and the size, survive a power loss once this returns.
  virtual Status Sync() = 0;
  virtual Status Truncate(uint64_t size_bytes) = 0;
  // Reserves [offset, offset + len) on disk (fallocate). NotSupported where the filesystem can't.
  virtual Status Allocate(uint64_t offset, uint64_t len) = 0;
  virtual Result<uint64_t> Size() = 0;
  // Closes and reports the error of close(2). The destructor closes quietly.
  virtual Status Close() = 0;
};

// ---------------------------------------------------------------------------------------------
// Asynchronous I/O queue

enum class IoOp : uint8_t { kRead = 0, kWrite = 1, kSync = 2 };

struct IoRequest {
  IoOp op = IoOp::kRead;
  File* file = nullptr;         // Borrowed; must outlive the completion.
  uint64_t offset = 0;          // Ignored for kSync.
  std::byte* buffer = nullptr;  // Borrowed; read into or written from. Ignored for kSync.
  size_t length = 0;            // Bytes; at most kIoRequestBytesMax. Ignored for kSync.
  uint64_t user_data = 0;       // Returned unchanged in the completion.
  // kWrite only, instead of `buffer`: a gathered write (pwritev) of these buffers back to back
  // from `offset`, at most kIoVectorsMax of them, `length` their total. Borrowed (the array and
  // the buffers) until the completion.
  std::span<const iovec> gather;
};

// Buffers of one gathered write at most (Linux's IOV_MAX).
inline constexpr size_t kIoVectorsMax = 1024;

struct IoCompletion {
  uint64_t user_data = 0;
  Status status = Status::Ok();  // Not OK when the operation failed (errno mapped by FromErrno).
  size_t bytes = 0;              // Bytes transferred; less than the length means a short transfer.
};

enum class IoBackend : uint8_t {
  kAuto = 0,        // io_uring; the thread-pool fallback when io_uring_setup is refused.
  kIoUring = 1,     // io_uring or an error.
  kThreadPool = 2,  // pread/pwrite on worker threads.
};

struct IoQueueOptions {
  uint32_t depth = 32;  // Requests in flight at most; in [1, kIoDepthMax].
  IoBackend backend = IoBackend::kAuto;
  uint32_t fallback_threads = 4;  // Worker threads of the thread-pool backend.
};

// A batched submission/completion queue. Submit never blocks: it accepts as many requests as
// there is room for (depth minus in-flight) and returns that count. Poll waits until at least
// `min_completions` completions are available (never more than are in flight) or the timeout
// passes, and returns the number written to `out`; with nothing in flight it returns 0 at once.
// A request that fails validation (ValidateIoRequest) makes Submit return InvalidArgument without
// submitting anything from that call. The destructor waits for the requests still in flight, so
// the buffers they borrow are never written after the queue is gone.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // "io_uring" or "threadpool", for logs and benchmarks.
  virtual std::string_view backend_name() const = 0;
  virtual uint32_t depth() const = 0;
  virtual uint32_t in_flight() const = 0;

  virtual Result<size_t> Submit(std::span<const IoRequest> requests) = 0;
  virtual Result<size_t> Poll(std::span<IoCompletion> out, size_t min_completions,
                              uint64_t timeout_micros) = 0;
};

// "read", "write" or "sync", for messages.
std::string_view IoOpName(IoOp op);
// "write of <path> at offset <offset> (<length> bytes)", for error messages.
std::string DescribeIoRequest(const IoRequest& request);

// Checks `options` against core/limits.h: depth in [1, kIoDepthMax] and fallback_threads in
// [1, kIoFallbackThreadsMax]. InvalidArgument otherwise. Every NewIoQueue calls it.
Status ValidateIoQueueOptions(const IoQueueOptions& options);

// Checks one request as every IoQueue's Submit does: a file, a buffer for reads and writes, a
// length of at most kIoRequestBytesMax and, for a direct() file, a buffer, offset and length that
// are multiples of kDirectIoAlignment. InvalidArgument (naming the file and offset) otherwise.
Status ValidateIoRequest(const IoRequest& request);

// Runs `requests` to completion on `queue` (submitting as room frees up) and returns the first
// error, with a short transfer reported as IoError naming the file and offset. `completions`
// receives one entry per request, in completion order. A convenience for simple callers: the
// queue must have nothing else in flight, since its completions are matched to `requests`.
Status RunToCompletion(IoQueue& queue, std::span<const IoRequest> requests,
                       std::vector<IoCompletion>* completions = nullptr);

// ---------------------------------------------------------------------------------------------
// Helpers every Env shares

// The directory part of `path`: "." for a bare name, "/" for an entry of the root.
std::string DirName(const std::string& path);

// "<what> <path> at offset <offset> (<len> bytes)", for error messages.
std::string DescribeFileRange(std::string_view what, const std::string& path, uint64_t offset,
                              size_t len);

// Checks a positional transfer as File::ReadAt and WriteAt do before any I/O: the range must end
// within the largest off_t, and for a `direct` file the buffer, offset and length must be
// multiples of kDirectIoAlignment. InvalidArgument naming `what`, the path and the offset.
Status CheckFileRange(std::string_view what, const std::string& path, bool direct, uint64_t offset,
                      const void* buffer, size_t len);

// "<path>.<16 hex digits>" with the digits from getrandom(2): the name of a temporary that
// nobody can predict, so nobody can plant a link or file under it beforehand. Create it with
// OpenMode::kCreateExclusive and Links::kRefuse, then rename it into place. IoError when the
// kernel has no randomness to give.
Result<std::string> UniqueTempPath(const std::string& path);

// The walk of Env::CreateDirs: runs `make_dir` on each parent of `path`, shortest first (empty
// components as in "a//b" skipped), then on `path` itself, and stops at the first error.
// `make_dir` creates one directory whose parent exists, and is OK when it already exists.
Status CreateDirsWith(const std::string& path,
                      const std::function<Status(const std::string&)>& make_dir);

// ---------------------------------------------------------------------------------------------
// Env

class Env {
 public:
  virtual ~Env() = default;

  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 const FileOptions& options) = 0;
  virtual Result<std::unique_ptr<IoQueue>> NewIoQueue(const IoQueueOptions& options) = 0;

  // Creates the directory and its missing parents with permission bits `mode` (before the process
  // umask); OK when it already exists, whose permissions are left as they are.
  virtual Status CreateDirs(const std::string& path, uint32_t mode) = 0;
  Status CreateDirs(const std::string& path) { return CreateDirs(path, 0755); }
  // Names (not paths) of the entries of a directory, without "." and "..", sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)).
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // fsync of a directory, so that creations, renames and removals in it survive a crash.
  virtual Status SyncDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Bytes free to an unprivileged writer on the filesystem that holds `path`.
  virtual Result<uint64_t> FreeSpaceBytes(const std::string& path) = 0;

  virtual Clock* clock() = 0;
  // May be nullptr (silent).
  virtual Logger* logger() = 0;
};

struct PosixEnvOptions {
  Logger* logger = nullptr;  // Borrowed; receives the O_DIRECT and io_uring fallback lines.
  Clock* clock = nullptr;    // Borrowed; nullptr means SystemClock().
};

// The Linux Env: O_DIRECT with fallback, io_uring queues with the pread/pwrite fallback.
std::unique_ptr<Env> NewPosixEnv(const PosixEnvOptions& options = {});

// The in-memory Env for fast unit tests is in env/mem_env.h; decorators build on env/env_wrapper.h.

}  // namespace kvtier
