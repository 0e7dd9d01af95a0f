// The thread that opens sealed remote values while the reading thread reads the next replies of
// a pipeline (RedisStore::Get with SealedOpen::kOverlapped). It knows nothing of the values: a
// call (RedisOpenCall) says how to open entry `index` from its reply, with the cipher it is given.
//
// Thread safety: Submit and Wait may be called from any thread. A call's Open runs on the worker
// thread for the entries it was given and must touch only those entries. `pending` belongs to the
// worker (guarded by its mutex). Ownership: a call and the replies it queued must stay alive until
// Wait(call) returned; the worker is joined by its destructor.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <cstddef>
#include <thread>

#include "core/mutex.h"
#include "tiers/remote_crypto.h"

namespace kvtier {

// Values one store queues for opening at most; a full queue makes the reading thread open the
// value itself.
inline constexpr size_t kRedisOpenQueueMax = 256;

class RedisOpenCall {
 public:
  virtual ~RedisOpenCall() = default;
  // Opens entry `index` from `reply` with `cipher` (the worker's own).
  virtual void Open(size_t index, const redisReply& reply, RemoteCipher* cipher) = 0;

 private:
  friend class RedisOpenWorker;
  size_t pending_ = 0;  // Queued and not opened yet; guarded by the worker's mutex.
};

class RedisOpenWorker {
 public:
  explicit RedisOpenWorker(GcmImpl impl);
  ~RedisOpenWorker();
  RedisOpenWorker(const RedisOpenWorker&) = delete;
  RedisOpenWorker& operator=(const RedisOpenWorker&) = delete;

  // Queues entry `index` of `call` (its `reply` stays alive until Wait returns). False when the
  // queue is full: the caller then opens the value itself.
  bool Submit(RedisOpenCall* call, size_t index, const redisReply* reply) KV_EXCLUDES(mu_);
  // Returns once every value of `call` that was queued has been opened.
  void Wait(RedisOpenCall* call) KV_EXCLUDES(mu_);

 private:
  struct Job {
    RedisOpenCall* call = nullptr;
    size_t index = 0;
    const redisReply* reply = nullptr;
  };
  void Run() KV_EXCLUDES(mu_);

  Mutex mu_;
  CondVar work_;  // A job was queued, or stop_ was set.
  CondVar done_;  // Some call's last job is done.
  std::array<Job, kRedisOpenQueueMax> queue_ KV_GUARDED_BY(mu_);
  size_t head_ KV_GUARDED_BY(mu_) = 0;
  size_t count_ KV_GUARDED_BY(mu_) = 0;
  bool stop_ KV_GUARDED_BY(mu_) = false;
  RemoteCipher cipher_;  // The worker thread's only.
  std::thread thread_;   // Last: started once everything above exists.
};

}  // namespace kvtier
