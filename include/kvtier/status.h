// Status: the outcome of an operation that can fail for operating reasons (I/O, corruption, full
// disks, bad input). kvtier never throws; every fallible call returns a Status or a Result<T>.
//
// The set of codes is closed and only ever appended to. A Status must be looked at: the type is
// [[nodiscard]], and an error that is dropped on purpose goes through IgnoreError(), which is
// greppable.
//
// Thread safety: a Status is a value; distinct objects may be used from different threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kCorruption = 2,
  kIoError = 3,
  kInvalidArgument = 4,
  kNotSupported = 5,
  kNoSpace = 6,
  kBusy = 7,
  kAborted = 8,
  kTimedOut = 9,
  kUnavailable = 10,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotSupported(std::string msg) {
    return {StatusCode::kNotSupported, std::move(msg)};
  }
  static Status NoSpace(std::string msg) { return {StatusCode::kNoSpace, std::move(msg)}; }
  static Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status TimedOut(std::string msg) { return {StatusCode::kTimedOut, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }

  // Maps an errno value to the closest code: ENOSPC/EDQUOT -> NoSpace, ENOENT -> NotFound,
  // EINVAL -> InvalidArgument, EAGAIN/EBUSY -> Busy, ETIMEDOUT -> TimedOut, else IoError. The
  // message is "<context>: <strerror>".
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsIoError() const { return code_ == StatusCode::kIoError; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsNotSupported() const { return code_ == StatusCode::kNotSupported; }
  bool IsNoSpace() const { return code_ == StatusCode::kNoSpace; }
  bool IsBusy() const { return code_ == StatusCode::kBusy; }
  bool IsAborted() const { return code_ == StatusCode::kAborted; }
  bool IsTimedOut() const { return code_ == StatusCode::kTimedOut; }
  bool IsUnavailable() const { return code_ == StatusCode::kUnavailable; }

  // Busy, TimedOut and Unavailable describe a condition that may pass; retrying can succeed.
  bool IsRetryable() const {
    return code_ == StatusCode::kBusy || code_ == StatusCode::kTimedOut ||
           code_ == StatusCode::kUnavailable;
  }

  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // The one sanctioned way to drop an error on purpose. Search for it when auditing.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace kvtier

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define KV_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::kvtier::Status kv_status_tmp_ = (expr);        \
    if (!kv_status_tmp_.ok()) return kv_status_tmp_; \
  } while (0)
