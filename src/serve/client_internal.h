// The service client's connection (client.cc, client_handles.cc): one socket, its reader thread,
// the requests waiting for replies, and the connection's staging region with its allocator.
// Internal to src/serve.
//
// Thread safety: `mu` guards pending, dead and ns_handles; alloc_mu the allocator; send_mu the
// socket's writes. Ownership: handles share the Connection, so its mapping outlives every
// request that references it; the RemoteEngine joins the reader threads.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/unique_fd.h"
#include "serve/protocol.h"

namespace kvtier::serve {

struct Pending {
  bool replied = false;
  Status status;  // The reply's.
  std::vector<std::byte> payload;  // The reply after its status.
  std::vector<std::optional<Status>> layers;  // Loads: each layer's completion.
  uint32_t layers_done = 0;
  bool store_done = false;  // Stores: the completion.
  Status store_status;
  bool lost = false;  // The connection ended first.
  bool wants_store = false;
};

class Connection {
 public:
  ~Connection();
  UniqueFd fd;
  std::byte* base = nullptr;
  uint64_t size = 0;
  uint64_t id = 0;
  uint64_t slot_bytes = 0;
  std::thread reader;

  Mutex mu;
  CondVar cv;
  std::map<uint64_t, std::shared_ptr<Pending>> pending;  // Under mu.
  bool dead = false;                                     // Under mu.
  std::map<uint64_t, uint64_t> ns_handles;               // Local namespace -> service's.

  Mutex send_mu;
  Mutex alloc_mu;
  std::map<uint64_t, uint64_t> free_ranges;  // offset -> bytes, under alloc_mu.

  void Read(uint32_t layers);
  // Registers `pending` under `id`, then sends the frame. Unavailable when the connection is dead.
  Status Send(Op op, uint64_t id, const WireWriter& w, std::shared_ptr<Pending> pending);
  void SendOnly(Op op, const WireWriter& w);
  // Waits until `done(pending)` or the connection ended; TimedOut (and the connection dropped)
  // after `timeout`.
  template <typename Done>
  Status Wait(const std::shared_ptr<Pending>& p, std::chrono::milliseconds timeout, Done done);
  // Shuts the socket and marks the connection dead now (not when the reader notices): the next
  // call reconnects, and every pending request fails.
  void Drop();
  void MarkDead();  // Under mu.
  bool Dead();

  // First fit over the region; nullopt when no run of `bytes` is free.
  std::optional<uint64_t> Alloc(uint64_t bytes);
  void Free(uint64_t offset, uint64_t bytes);
  bool Contains(const std::byte* p, size_t bytes) const {
    return base != nullptr && p >= base && p + bytes <= base + size &&
           static_cast<uint64_t>(p - base) % kStagingAlign == 0;
  }
};

template <typename Done>
Status Connection::Wait(const std::shared_ptr<Pending>& p, std::chrono::milliseconds timeout,
                        Done done) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu);
  while (!done(*p) && !p->lost) {
    if (std::chrono::steady_clock::now() >= deadline) {
      (void)::shutdown(fd.get(), SHUT_RDWR);
      MarkDead();
      return Status::TimedOut("the kvtier service did not answer within " +
                              std::to_string(timeout.count()) + " ms; reconnecting");
    }
    cv.WaitFor(&mu, deadline - std::chrono::steady_clock::now());
  }
  if (!done(*p)) return Status::Unavailable("the connection to the kvtier service was lost");
  return Status::Ok();
}

}  // namespace kvtier::serve
