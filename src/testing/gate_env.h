// GateEnv: a test-only Env decorator whose segment files (".kvs") can hold their next Sync,
// ReadAt or WriteAt at a Gate until the test releases it (and then fail it), so that a chosen
// interleaving of a tier's threads happens on every run instead of by luck. A held WriteAt has
// written nothing yet: until it is released, its place in the file is a hole.
//
// Thread safety: gates may be armed, passed and released from any thread. Ownership: the base
// Env is borrowed and must outlive this env and its files. Everything but the segment files'
// Sync and ReadAt is forwarded unchanged (EnvWrapper, FileWrapper).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "env/env.h"
#include "env/env_wrapper.h"

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

// Decorator over any Env: segment files (".kvs") pass their Sync, ReadAt and WriteAt through
// gates.
class GateEnv final : public EnvWrapper {
 public:
  explicit GateEnv(Env* base) : EnvWrapper(base) {}
  Gate sync_gate;
  Gate read_gate;
  Gate write_gate;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(path, options));
    if (path.find(".kvs") == std::string::npos) return f;
    return std::unique_ptr<File>(std::make_unique<GatedFile>(this, std::move(f)));
  }

 private:
  class GatedFile final : public FileWrapper {
   public:
    GatedFile(GateEnv* env, std::unique_ptr<File> f) : FileWrapper(std::move(f)), env_(env) {}
    Status ReadAt(uint64_t offset, std::span<std::byte> dst, size_t* read_bytes) override {
      std::optional<Status> gated = env_->read_gate.Pass();
      if (gated.has_value() && !gated->ok()) return *gated;
      return FileWrapper::ReadAt(offset, dst, read_bytes);
    }
    Status WriteAt(uint64_t offset, std::span<const std::byte> src) override {
      std::optional<Status> gated = env_->write_gate.Pass();
      if (gated.has_value() && !gated->ok()) return *gated;
      return FileWrapper::WriteAt(offset, src);
    }
    Status Sync() override {
      std::optional<Status> gated = env_->sync_gate.Pass();
      if (gated.has_value() && !gated->ok()) return *gated;
      return FileWrapper::Sync();
    }

   private:
    GateEnv* const env_;
  };
};

}  // namespace kvtier
