// UniqueFd: the single owner of a POSIX file descriptor. Move-only. The destructor closes quietly
// (errors at that point have nowhere to go); call Close() to see a close error, which on some
// filesystems reports a failed delayed write.
//
// Thread safety: not synchronized; one owner at a time.
#pragma once

#include <utility>

#include "kvtier/status.h"

namespace kvtier {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int Release() { return std::exchange(fd_, -1); }
  // Closes quietly if open.
  void Reset();
  // Closes and reports the error of close(2), if any.
  Status Close();

 private:
  int fd_ = -1;
};

}  // namespace kvtier
