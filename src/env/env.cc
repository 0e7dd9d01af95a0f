// The parts of env.h that every Env shares: the system clock, request validation,
// RunToCompletion, and the path and range helpers.
#include "env/env.h"

#include <sys/random.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/limits.h"

namespace kvtier {
namespace {

class SystemClockImpl final : public Clock {
 public:
  uint64_t NowMicros() const override { return Micros(std::chrono::steady_clock::now()); }
  uint64_t WallMicros() const override { return Micros(std::chrono::system_clock::now()); }
  void SleepForMicros(uint64_t micros) override {
    std::this_thread::sleep_for(std::chrono::microseconds(micros));
  }

 private:
  template <typename TimePoint>
  static uint64_t Micros(TimePoint t) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
    return static_cast<uint64_t>(us.count());
  }
};

// Requests submitted per Submit call by RunToCompletion: a stack array, so no allocation.
constexpr size_t kRunBatchMax = 64;
// How long RunToCompletion waits in one Poll before polling again. It only bounds one wait; the
// loop ends when every request has completed.
constexpr uint64_t kRunPollTimeoutMicros = 1'000'000;

}  // namespace

Clock* SystemClock() {
  // Stateless and immutable, so sharing one instance is not shared mutable state.
  static SystemClockImpl clock;
  return &clock;
}

std::string_view IoOpName(IoOp op) {
  switch (op) {
    case IoOp::kRead:
      return "read";
    case IoOp::kWrite:
      return "write";
    case IoOp::kSync:
      return "sync";
  }
  return "?";
}

std::string DescribeIoRequest(const IoRequest& r) {
  std::string where = std::string(IoOpName(r.op)) + " of " +
                      (r.file != nullptr ? r.file->path() : std::string("<no file>"));
  if (r.op != IoOp::kSync) {
    where += " at offset " + std::to_string(r.offset) + " (" + std::to_string(r.length) + " bytes)";
  }
  return where;
}

Status ValidateIoQueueOptions(const IoQueueOptions& options) {
  if (options.depth == 0 || options.depth > kIoDepthMax) {
    return Status::InvalidArgument("io queue depth must be in [1, " + std::to_string(kIoDepthMax) +
                                   "], got " + std::to_string(options.depth));
  }
  if (options.fallback_threads == 0 || options.fallback_threads > kIoFallbackThreadsMax) {
    return Status::InvalidArgument("io queue fallback_threads must be in [1, " +
                                   std::to_string(kIoFallbackThreadsMax) + "], got " +
                                   std::to_string(options.fallback_threads));
  }
  return Status::Ok();
}

// A gathered write: within the limits, its length the buffers' total, each buffer aligned for a
// direct() file.
static Status ValidateGather(const IoRequest& r) {
  if (r.op != IoOp::kWrite || r.gather.size() > kIoVectorsMax) {
    return Status::InvalidArgument("io request gathers " + std::to_string(r.gather.size()) +
                                   " buffers (writes only, at most " +
                                   std::to_string(kIoVectorsMax) + "): " + DescribeIoRequest(r));
  }
  uint64_t total = 0;
  for (const iovec& v : r.gather) {
    if (v.iov_base == nullptr) {
      return Status::InvalidArgument("io request gathers a null buffer: " + DescribeIoRequest(r));
    }
    if (r.file->direct() && (!IsAligned(reinterpret_cast<uintptr_t>(v.iov_base),
                                        kDirectIoAlignment) ||
                             !IsAligned(v.iov_len, kDirectIoAlignment))) {
      return Status::InvalidArgument("O_DIRECT needs each gathered buffer aligned to " +
                                     std::to_string(kDirectIoAlignment) +
                                     " bytes: " + DescribeIoRequest(r));
    }
    total += v.iov_len;
  }
  if (total != r.length || r.length > kIoRequestBytesMax ||
      (r.file->direct() && !IsAligned(r.offset, kDirectIoAlignment))) {
    return Status::InvalidArgument("io request gathers " + std::to_string(total) +
                                   " bytes, not its length, or is misplaced: " +
                                   DescribeIoRequest(r));
  }
  return Status::Ok();
}

Status ValidateIoRequest(const IoRequest& r) {
  if (r.file == nullptr) return Status::InvalidArgument("io request without a file");
  if (r.op == IoOp::kSync) return Status::Ok();
  if (!r.gather.empty()) return ValidateGather(r);
  if (r.buffer == nullptr) {
    return Status::InvalidArgument("io request without a buffer: " + DescribeIoRequest(r));
  }
  if (r.length > kIoRequestBytesMax) {
    return Status::InvalidArgument("io request longer than " + std::to_string(kIoRequestBytesMax) +
                                   " bytes: " + DescribeIoRequest(r));
  }
  if (r.file->direct()) {
    const auto address = reinterpret_cast<uintptr_t>(r.buffer);
    if (!IsAligned(address, kDirectIoAlignment) || !IsAligned(r.offset, kDirectIoAlignment) ||
        !IsAligned(r.length, kDirectIoAlignment)) {
      return Status::InvalidArgument("O_DIRECT needs buffer, offset and length aligned to " +
                                     std::to_string(kDirectIoAlignment) +
                                     " bytes: " + DescribeIoRequest(r));
    }
  }
  return Status::Ok();
}

Result<std::string> UniqueTempPath(const std::string& path) {
  std::array<unsigned char, 8> bytes{};
  size_t got = 0;
  // Bounded: each round either gets bytes or retries an EINTR; 8 bytes never come back short
  // from getrandom(2) once the pool is ready, but the loop does not rely on it.
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "getrandom for a temporary name beside " + path);
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = path + ".";
  for (const unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string DescribeFileRange(std::string_view what, const std::string& path, uint64_t offset,
                              size_t len) {
  return std::string(what) + " " + path + " at offset " + std::to_string(offset) + " (" +
         std::to_string(len) + " bytes)";
}

Status CheckFileRange(std::string_view what, const std::string& path, bool direct, uint64_t offset,
                      const void* buffer, size_t len) {
  constexpr auto kOffMax = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  if (offset > kOffMax || len > kOffMax - offset) {
    return Status::InvalidArgument(DescribeFileRange(what, path, offset, len) +
                                   ": beyond the largest offset");
  }
  if (direct && (!IsAligned(offset, kDirectIoAlignment) || !IsAligned(len, kDirectIoAlignment) ||
                 !IsAligned(reinterpret_cast<uintptr_t>(buffer), kDirectIoAlignment))) {
    return Status::InvalidArgument(DescribeFileRange(what, path, offset, len) +
                                   ": O_DIRECT needs buffer, offset and length aligned to " +
                                   std::to_string(kDirectIoAlignment) + " bytes");
  }
  return Status::Ok();
}

Status CreateDirsWith(const std::string& path,
                      const std::function<Status(const std::string&)>& make_dir) {
  if (path.empty()) return Status::InvalidArgument("CreateDirs: empty path");
  // Each prefix that ends before a '/' is a parent; the loop visits each '/' once.
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (path[slash - 1] == '/') continue;  // "a//b"
    KV_RETURN_IF_ERROR(make_dir(path.substr(0, slash)));
  }
  if (path.back() == '/') return Status::Ok();
  return make_dir(path);
}

namespace {

// Folds one completion into RunToCompletion's result: the caller's user_data is restored and a
// short transfer becomes an IoError naming the file and offset.
void FinishRunCompletion(std::span<const IoRequest> requests, IoCompletion c, Status* first_error,
                         std::vector<IoCompletion>* completions) {
  KV_CHECK(c.user_data < requests.size());
  const IoRequest& r = requests[c.user_data];
  if (c.status.ok() && r.op != IoOp::kSync && c.bytes < r.length) {
    c.status = Status::IoError("short " + DescribeIoRequest(r) + ": transferred " +
                               std::to_string(c.bytes) + " bytes");
  }
  if (!c.status.ok() && first_error->ok()) *first_error = c.status;
  c.user_data = r.user_data;
  if (completions != nullptr) completions->push_back(std::move(c));
}

}  // namespace

Status RunToCompletion(IoQueue& queue, std::span<const IoRequest> requests,
                       std::vector<IoCompletion>* completions) {
  KV_CHECK(queue.in_flight() == 0);
  if (completions != nullptr) {
    completions->clear();
    completions->reserve(requests.size());
  }
  std::array<IoRequest, kRunBatchMax> batch;
  std::array<IoCompletion, kRunBatchMax> reaped;
  Status first_error;
  size_t submitted = 0;
  size_t finished = 0;
  bool submit_failed = false;
  // Requests are resubmitted with user_data set to their index, so completions map back to them.
  while (finished < submitted || (!submit_failed && submitted < requests.size())) {
    if (!submit_failed && submitted < requests.size()) {
      const size_t count = std::min(kRunBatchMax, requests.size() - submitted);
      for (size_t i = 0; i < count; ++i) {
        batch[i] = requests[submitted + i];
        batch[i].user_data = submitted + i;
      }
      Result<size_t> accepted = queue.Submit(std::span<const IoRequest>(batch.data(), count));
      if (accepted.ok()) {
        submitted += *accepted;
      } else {
        // Nothing more is submitted, but what is in flight must finish: it borrows buffers.
        if (first_error.ok()) first_error = accepted.status();
        submit_failed = true;
      }
    }
    if (finished == submitted) continue;
    KV_ASSIGN_OR_RETURN(const size_t count, queue.Poll(reaped, 1, kRunPollTimeoutMicros));
    for (size_t i = 0; i < count; ++i) {
      FinishRunCompletion(requests, std::move(reaped[i]), &first_error, completions);
    }
    finished += count;
  }
  return first_error;
}

}  // namespace kvtier
