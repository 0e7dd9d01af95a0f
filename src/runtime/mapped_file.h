// MappedFile: a whole file mapped read-only into memory, for the model and tokenizer loaders.
//
// Why mmap: model files are read once, front to back or tensor by tensor; mapping avoids a copy
// of the raw file on top of the decoded weights. Loaders treat the bytes as untrusted and check
// every size against bytes().size() before use.
//
// Thread safety: immutable after Open; concurrent readers are safe. Ownership: owns the mapping
// (unmapped by the destructor); move-only; spans must not outlive the object.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "kvtier/result.h"

namespace kvtier::runtime {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // Maps `path`. NotFound when it does not exist, IoError for other failures, InvalidArgument
  // for a directory or other non-regular file.
  static Result<MappedFile> Open(const std::string& path);

  std::span<const std::byte> bytes() const { return {data_, size_bytes_}; }

 private:
  void Reset();

  const std::byte* data_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace kvtier::runtime
