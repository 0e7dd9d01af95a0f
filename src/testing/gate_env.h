// GateEnv: a test-only Env decorator whose segment files (".kvs") can hold their next Sync or
// ReadAt at a Gate until the test releases it (and then fail it), so that a chosen interleaving
// of a tier's threads happens on every run instead of by luck.
//
// Thread safety: gates may be armed, passed and released from any thread. Ownership: the base
// Env is borrowed and must outlive this env and its files.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "env/env.h"

namespace kvtier {

// One point where a segment file's operation can be held: armed, the next such operation blocks
// until Release() (or 10 s, so a broken test cannot hang) and then returns `result`.
class Gate {
 public:
  void Arm(Status result) {
    MutexLock lock(&mu_);
    armed_ = true;
    entered_ = released_ = false;
    result_ = std::move(result);
  }
  // Called by the operation; nullopt when the gate was not armed.
  std::optional<Status> Pass() {
    MutexLock lock(&mu_);
    if (!armed_) return std::nullopt;
    armed_ = false;
    entered_ = true;
    cv_.SignalAll();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!released_ && std::chrono::steady_clock::now() < deadline) {
      cv_.WaitFor(std::chrono::milliseconds(10));
    }
    return result_;
  }
  bool WaitEntered() {
    MutexLock lock(&mu_);
    for (int i = 0; i < 1000 && !entered_; ++i) cv_.WaitFor(std::chrono::milliseconds(10));
    return entered_;
  }
  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
    cv_.SignalAll();
  }

 private:
  Mutex mu_;
  CondVar cv_{&mu_};
  bool armed_ KV_GUARDED_BY(mu_) = false;
  bool entered_ KV_GUARDED_BY(mu_) = false;
  bool released_ KV_GUARDED_BY(mu_) = false;
  Status result_ KV_GUARDED_BY(mu_);
};

// Decorator over the posix Env: segment files (".kvs") pass their Sync and ReadAt through gates.
class GateEnv final : public Env {
 public:
  explicit GateEnv(Env* base) : base_(base) {}
  Gate sync_gate;
  Gate read_gate;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->OpenFile(path, options));
    if (path.find(".kvs") == std::string::npos) return f;
    return std::unique_ptr<File>(std::make_unique<GatedFile>(this, std::move(f)));
  }
  Result<std::unique_ptr<IoQueue>> NewIoQueue(const IoQueueOptions& o) override {
    return base_->NewIoQueue(o);
  }
  Status CreateDirs(const std::string& p, uint32_t mode) override {
    return base_->CreateDirs(p, mode);
  }
  Result<std::vector<std::string>> ListDir(const std::string& p) override {
    return base_->ListDir(p);
  }
  Status RemoveFile(const std::string& p) override { return base_->RemoveFile(p); }
  Status RenameFile(const std::string& a, const std::string& b) override {
    return base_->RenameFile(a, b);
  }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  bool FileExists(const std::string& p) override { return base_->FileExists(p); }
  Result<uint64_t> FreeSpaceBytes(const std::string& p) override {
    return base_->FreeSpaceBytes(p);
  }
  Clock* clock() override { return base_->clock(); }
  Logger* logger() override { return base_->logger(); }

 private:
  class GatedFile final : public File {
   public:
    GatedFile(GateEnv* env, std::unique_ptr<File> f) : env_(env), f_(std::move(f)) {}
    const std::string& path() const override { return f_->path(); }
    bool direct() const override { return f_->direct(); }
    int fd() const override { return f_->fd(); }
    Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override {
      std::optional<Status> gated = env_->read_gate.Pass();
      if (gated.has_value() && !gated->ok()) return *gated;
      return f_->ReadAt(offset, dst, read_bytes);
    }
    Status WriteAt(uint64_t offset, std::span<const std::byte> src) override {
      return f_->WriteAt(offset, src);
    }
    Status Sync() override {
      std::optional<Status> gated = env_->sync_gate.Pass();
      if (gated.has_value() && !gated->ok()) return *gated;
      return f_->Sync();
    }
    Status Truncate(uint64_t size_bytes) override { return f_->Truncate(size_bytes); }
    Status Allocate(uint64_t offset, uint64_t len) override { return f_->Allocate(offset, len); }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Close() override { return f_->Close(); }

   private:
    GateEnv* const env_;
    const std::unique_ptr<File> f_;
  };

  Env* const base_;
};

}  // namespace kvtier
