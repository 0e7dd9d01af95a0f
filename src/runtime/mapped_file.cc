#include "runtime/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/unique_fd.h"

namespace kvtier::runtime {

MappedFile::~MappedFile() { Reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void MappedFile::Reset() {
  if (data_ != nullptr) {
    munmap(const_cast<std::byte*>(data_), size_bytes_);
    data_ = nullptr;
    size_bytes_ = 0;
  }
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer would wait for one; it fails the S_ISREG check
  // instead (mmap ignores the flag).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  MappedFile file;
  if (st.st_size == 0) return file;
  const auto size_bytes = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + path);
  file.data_ = static_cast<const std::byte*>(p);
  file.size_bytes_ = size_bytes;
  return file;
}

}  // namespace kvtier::runtime
