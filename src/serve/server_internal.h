// The service's per-connection state (server.cc: lifecycle, accept, stats; server_conn.cc: one
// client's requests). Internal to src/serve.
//
// Threads of a connection: its reader (hello, then every request in order) and two waiters, one
// for loads (sends the layers' completions, in order) and one for stores (each store's).
// A lease is a Load or Store handle the waiters still hold. When the reader sees the client go
// (end of stream, a bad frame, Stop), it closes the queues; the waiters finish every handle they
// hold (so the engine is done with the staging region), then the region is unmapped.
//
// Thread safety: counters are atomics; queues and tables under their mutexes.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/unique_fd.h"
#include "engine/engine.h"
#include "serve/namespace_state.h"
#include "serve/protocol.h"
#include "serve/server.h"

namespace kvtier::serve {

struct ClientCounters {
  std::atomic<uint64_t> requests{0}, lookups{0}, lookup_tokens{0}, lookup_hit_tokens{0};
  std::atomic<uint64_t> loads{0}, load_blocks{0}, stores{0}, store_blocks{0}, errors{0};
  std::atomic<uint64_t> leases_active{0};
};

struct TenantCounters {
  uint64_t lookups = 0, lookup_tokens = 0, lookup_hit_tokens = 0, loads = 0, stores = 0;
};

class Conn {
 public:
  Conn(Server::Impl* server, UniqueFd fd, uint64_t id) : server_(server), fd_(std::move(fd)), id_(id) {}
  ~Conn();
  void Start();
  // Ends the connection from outside (Stop): the reader sees end of stream.
  void Shutdown();
  bool finished() const { return finished_.load(); }
  bool admitted() const { return admitted_.load(); }
  void Join();
  ClientStats Snapshot() const;
  uint64_t id() const { return id_; }

 private:
  struct NsEntry {
    Namespace ns;
    std::string tenant;  // The TenantStats label.
    std::string scoped;  // "uid:<uid>/<tenant id>".
    std::vector<std::string> extra;
    uint64_t epoch = 0;  // Server::Impl::clear_epoch when `ns` was derived.
  };
  struct LoadJob {
    uint64_t id;
    std::unique_ptr<LoadHandle> handle;
    uint32_t layers;
  };
  struct StoreJob {
    uint64_t id;
    std::unique_ptr<StoreHandle> handle;
  };

  void Run();
  Status Handshake();
  Status SetUpStaging();
  bool Admitted(std::string* why);
  std::string DescribeUidText() const;
  void Serve(const FrameHeader& header, std::vector<std::byte>& payload);
  // Serve's requests that answer and then queue a job for a waiter: on success the OK reply
  // (status and `out`) has gone; on failure nothing has, and the caller replies the status.
  Status ServeLoad(uint64_t id, WireReader& r, WireWriter* out);
  Status ServeStore(uint64_t id, WireReader& r, WireWriter* out);
  Status PrefetchOrHint(Op op, WireReader& r);
  void ReplyOk(uint64_t id, const WireWriter& out);  // An OK status, then `out`.
  void Reply(uint64_t id, const WireWriter& w);
  void ReplyStatus(uint64_t id, const Status& s);
  void Send(Op op, uint64_t id, const WireWriter& w);
  const NsEntry* FindNs(uint64_t handle);
  Status MakeNamespace(WireReader& r, WireWriter* out);
  Status ClearTenant(WireReader& r, WireWriter* out);
  bool Operator() const;
  Status Lookup(WireReader& r, WireWriter* out);
  Status Load(uint64_t id, WireReader& r, WireWriter* out, std::unique_ptr<LoadHandle>* handle,
              uint32_t* layers);
  Status Store(uint64_t id, WireReader& r, WireWriter* out, std::unique_ptr<StoreHandle>* handle);
  Status Pin(WireReader& r, WireWriter* out);
  Status BlockSpans(std::span<const uint64_t> offsets, std::vector<std::span<std::byte>>* out);
  void LoadWaiter();
  void StoreWaiter();
  void EndLease();
  void Teardown();

  Server::Impl* const server_;
  UniqueFd fd_;
  const uint64_t id_;
  ucred cred_{};
  std::string name_;
  std::byte* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  std::thread reader_;
  std::atomic<bool> finished_{false};
  // The hello was accepted: cred_ and name_ are written before, never after.
  std::atomic<bool> admitted_{false};
  ClientCounters counters_;

  Mutex send_mu_;

  Mutex q_mu_;
  CondVar q_cv_;
  std::deque<LoadJob> loads_;    // Under q_mu_.
  std::deque<StoreJob> stores_;  // Under q_mu_.
  bool closing_ = false;         // Under q_mu_.
  std::thread load_waiter_, store_waiter_;

  // Touched by the reader thread only.
  std::map<uint64_t, NsEntry> namespaces_;
  std::map<std::string, uint64_t> ns_by_key_;
  uint64_t next_ns_ = 1;
  std::map<uint64_t, PinHandle> pins_;
  uint64_t next_pin_ = 1;
};

struct Server::Impl {
  Server* owner = nullptr;
  ServerOptions options;
  std::shared_ptr<Engine> engine;
  uint64_t block_bytes = 0;
  uint64_t slot_bytes = 0;  // block_bytes rounded up to kStagingAlign.
  uint32_t layers = 0;
  std::string layout_text;
  uid_t own_uid = 0;
  UniqueFd listen_fd, lock_fd;
  int wake[2] = {-1, -1};
  std::thread acceptor;
  std::atomic<bool> stopping{false}, draining{false}, stopped{false};

  std::atomic<uint64_t> clients_total{0}, clients_refused{0}, requests{0}, bad_requests{0};
  std::atomic<uint64_t> leases_active{0}, leases_total{0}, leases_orphaned{0};
  std::atomic<uint64_t> disconnects_mid_request{0};
  NamespaceGenerations generations;
  // Bumped by every ClearTenant: a connection re-derives the namespaces it holds when it changed.
  std::atomic<uint64_t> clear_epoch{0};

  Mutex mu;
  std::vector<std::shared_ptr<Conn>> conns;       // Under mu.
  std::map<std::string, TenantCounters> tenants;  // Under mu.
  std::map<std::string, bool> refusals_logged;    // Under mu: "<pid>:<reason>".

  void Accept();
  void Reap(bool all);
  void Refused(const ucred& cred, const std::string& why);
  void CountTenant(const std::string& tenant, const TenantCounters& delta);
  // The engine namespace of `scoped` ("uid:<uid>/<tenant id>") at its current generation.
  Result<Namespace> DeriveNamespace(const std::string& scoped,
                                    const std::vector<std::string>& extra);
  void Log(LogLevel level, const std::string& message) const;
};

}  // namespace kvtier::serve
