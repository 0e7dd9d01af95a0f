#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kBusy:
      return "Busy";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kTimedOut:
      return "TimedOut";
    case StatusCode::kUnavailable:
      return "Unavailable";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  std::string msg = std::string(context) + ": " + text;
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return NoSpace(std::move(msg));
    case ENOENT:
      return NotFound(std::move(msg));
    case EINVAL:
      return InvalidArgument(std::move(msg));
    case EAGAIN:
    case EBUSY:
      return Busy(std::move(msg));
    case ETIMEDOUT:
      return TimedOut(std::move(msg));
    case EOPNOTSUPP:
      return NotSupported(std::move(msg));
    default:
      return IoError(std::move(msg));
  }
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

}  // namespace kvtier
