// The service client's engine (client.h): RemoteEngineImpl. Internal to src/serve; client.cc
// holds the connection logic, client_handles.cc loads, stores, pins and staging.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "serve/client.h"
#include "serve/client_internal.h"

namespace kvtier::serve {

inline constexpr uint32_t kFlushTimeoutMs = 10 * 60 * 1000;

class RemoteEngineImpl;

// The engine's StagingSource: buffers in the live connection's region. A lent buffer keeps its
// connection (and so the mapping) alive until released, even after the engine is gone.
class StagingLender final : public StagingSource {
 public:
  explicit StagingLender(RemoteEngineImpl* engine) : engine_(engine) {}
  Result<std::span<std::byte>> Acquire(size_t bytes) override;
  void Release(std::span<std::byte> buffer) override;
  void Detach();

 private:
  struct Lent {
    std::shared_ptr<Connection> conn;
    uint64_t offset, bytes;
  };
  Mutex mu_;
  RemoteEngineImpl* engine_;               // Under mu_; null once the engine is gone.
  std::map<const std::byte*, Lent> lent_;  // Under mu_.
};

class RemoteEngineImpl final : public RemoteEngine {
 public:
  explicit RemoteEngineImpl(const ClientOptions& options);
  ~RemoteEngineImpl() override;

  Result<Namespace> MakeNamespace(std::string_view salt,
                                  std::span<const std::string> extra_keys) override;
  Result<LookupResult> Lookup(const Namespace& ns, std::span<const uint32_t> tokens,
                              const LookupOptions& options) override;
  Result<std::unique_ptr<LoadHandle>> Load(const Namespace& ns, std::span<const uint32_t> tokens,
                                           std::span<const std::span<std::byte>> dst) override;
  Result<std::unique_ptr<StoreHandle>> Store(const Namespace& ns,
                                             std::span<const uint32_t> tokens,
                                             std::span<const std::span<const std::byte>> src,
                                             const StoreOptions& options) override;
  Status Prefetch(const Namespace& ns, std::span<const uint32_t> tokens) override {
    return Promote(Op::kPrefetch, ns, tokens, 0);
  }
  Status Hint(const Namespace& ns, std::span<const uint32_t> tokens,
              uint64_t session_id) override {
    return Promote(Op::kHint, ns, tokens, session_id);
  }
  Result<PinHandle> Pin(const Namespace& ns, std::span<const uint32_t> tokens) override;
  Status Flush() override;
  EngineStats Stats() override;
  const EngineOptions& options() const override { return options_; }
  DeviceBackend device_backend() const override { return DeviceBackend::kCpu; }

  Result<std::span<std::byte>> AcquireStaging(size_t bytes) override {
    return lender_->Acquire(bytes);
  }
  void ReleaseStaging(std::span<std::byte> buffer) override { lender_->Release(buffer); }
  std::shared_ptr<StagingSource> staging_source() override { return lender_; }
  ClientState State() override;
  Result<std::string> ServiceStatsJson() override;
  Status Drain() override;
  Result<ClearResult> ClearTenant(uint32_t uid, std::string_view tenant) override;

  // The live connection, reconnecting when the last attempt is older than the reconnect
  // interval (or `force`).
  Result<std::shared_ptr<Connection>> Live(bool force);
  // Sends a request and waits for its reply; the reply's status (its payload stays in `p`).
  // A lost connection or a timeout is counted in ClientState::failed_requests.
  Status Request(const std::shared_ptr<Connection>& c, Op op, const WireWriter& w,
                 const std::shared_ptr<Pending>& p, std::chrono::milliseconds timeout);
  Result<std::vector<std::byte>> Call(const std::shared_ptr<Connection>& c, Op op,
                                      const WireWriter& w, std::chrono::milliseconds timeout);
  Result<uint64_t> ServiceNamespace(const std::shared_ptr<Connection>& c, const Namespace& ns);
  std::chrono::milliseconds Timeout() const {
    return std::chrono::milliseconds(client_.timeout_ms);
  }
  uint64_t NextId();
  void CountFailed();
  void CountCopied(uint64_t bytes) { copied_bytes_ += bytes; }
  uint32_t layers() const { return options_.layout.layers; }
  uint64_t block_bytes() const { return options_.layout.BlockBytes(); }

  Mutex mu_;
  EngineOptions options_;    // The layout; written once, before the first use.
  bool have_layout_ = false;  // Under mu_.

 private:
  struct NsSpec {
    std::string tenant;
    std::vector<std::string> extra;
  };
  Result<std::shared_ptr<Connection>> Handshake();
  Status CheckLayout(const KvLayout& layout, uint64_t block_bytes);
  Status MapStaging(Connection* c, int memfd);
  void JoinRetired();
  Status Promote(Op op, const Namespace& ns, std::span<const uint32_t> tokens,
                 uint64_t session_id);
  void Log(LogLevel level, const std::string& message);

  const ClientOptions client_;
  uint64_t tag_ = 0;  // Marks this client's namespaces.
  std::atomic<uint64_t> next_id_{0};
  std::atomic<uint64_t> copied_bytes_{0};
  std::shared_ptr<Connection> conn_;                  // Under mu_.
  std::vector<std::shared_ptr<Connection>> retired_;  // Under mu_: readers not joined yet.
  std::vector<NsSpec> specs_;                         // Under mu_: local namespace i + 1.
  ClientState state_;                                 // Under mu_.
  bool attempted_ = false;                            // Under mu_.
  std::chrono::steady_clock::time_point last_attempt_;
  std::string last_error_;
  std::shared_ptr<StagingLender> lender_ = std::make_shared<StagingLender>(this);
};

}  // namespace kvtier::serve
