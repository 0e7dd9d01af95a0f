// EnvWrapper and FileWrapper: bases for Env and File decorators (fault injection, gates that hold
// an operation, metrics) that forward every call to a wrapped object, so that a decorator
// overrides only what it changes (after leveldb's EnvWrapper).
//
// Why a second level of inheritance where kvtier otherwise keeps one: without these bases every
// decorator restates a dozen forwarding methods, a decorator's real behaviour hides among them,
// and each new Env or File method must be added to every decorator by hand. The bases hold no
// state but the target, and every decorator built on them is still `final`.
//
// Thread safety: as the wrapped object's; the wrappers add no state of their own.
// Ownership: an EnvWrapper borrows its target Env, which must outlive it. A FileWrapper owns its
// target File (decorators hand out files that replace the ones they wrap).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "env/env.h"

namespace kvtier {

class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) { KV_CHECK(target != nullptr); }

  // The Env every call is forwarded to.
  Env* target() const { return target_; }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    return target_->OpenFile(path, options);
  }
  Result<std::unique_ptr<IoQueue>> NewIoQueue(const IoQueueOptions& options) override {
    return target_->NewIoQueue(options);
  }
  using Env::CreateDirs;
  Status CreateDirs(const std::string& path, uint32_t mode) override {
    return target_->CreateDirs(path, mode);
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  bool FileExists(const std::string& path) override { return target_->FileExists(path); }
  Result<uint64_t> FreeSpaceBytes(const std::string& path) override {
    return target_->FreeSpaceBytes(path);
  }
  Clock* clock() override { return target_->clock(); }
  Logger* logger() override { return target_->logger(); }

 private:
  Env* const target_;
};

class FileWrapper : public File {
 public:
  explicit FileWrapper(std::unique_ptr<File> target) : target_(std::move(target)) {
    KV_CHECK(target_ != nullptr);
  }

  // The File every call is forwarded to; owned by this wrapper.
  File* target() const { return target_.get(); }

  const std::string& path() const override { return target_->path(); }
  bool direct() const override { return target_->direct(); }
  int fd() const override { return target_->fd(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override {
    return target_->ReadAt(offset, dst, read_bytes);
  }
  Status WriteAt(uint64_t offset, std::span<const std::byte> src) override {
    return target_->WriteAt(offset, src);
  }
  Status Sync() override { return target_->Sync(); }
  Status Truncate(uint64_t size_bytes) override { return target_->Truncate(size_bytes); }
  Status Allocate(uint64_t offset, uint64_t len) override { return target_->Allocate(offset, len); }
  Result<uint64_t> Size() override { return target_->Size(); }
  Status Close() override { return target_->Close(); }

 private:
  const std::unique_ptr<File> target_;
};

}  // namespace kvtier
