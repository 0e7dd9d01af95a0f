#include "core/unique_fd.h"

#include <unistd.h>

#include <cerrno>

namespace kvtier {

void UniqueFd::Reset() {
  if (fd_ >= 0) {
    ::close(fd_);  // The error is deliberately dropped; Close() reports it.
    fd_ = -1;
  }
}

Status UniqueFd::Close() {
  if (fd_ < 0) return Status::Ok();
  const int fd = std::exchange(fd_, -1);
  // Linux releases the descriptor even when close fails, so it must not be retried.
  if (::close(fd) != 0) return Status::FromErrno(errno, "close");
  return Status::Ok();
}

}  // namespace kvtier
