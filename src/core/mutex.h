// Mutex with clang thread-safety annotations: members are declared GUARDED_BY(mu_) and functions
// REQUIRES(mu_) / EXCLUDES(mu_), and the clang build (-Wthread-safety -Werror) checks the locking.
// Under GCC the annotations compile to nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KV_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KV_THREAD_ANNOTATION_(x)
#endif

#define KV_CAPABILITY(x) KV_THREAD_ANNOTATION_(capability(x))
#define KV_SCOPED_CAPABILITY KV_THREAD_ANNOTATION_(scoped_lockable)
#define KV_GUARDED_BY(x) KV_THREAD_ANNOTATION_(guarded_by(x))
#define KV_PT_GUARDED_BY(x) KV_THREAD_ANNOTATION_(pt_guarded_by(x))
#define KV_REQUIRES(...) KV_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define KV_EXCLUDES(...) KV_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define KV_ACQUIRE(...) KV_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define KV_RELEASE(...) KV_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define KV_TRY_ACQUIRE(...) KV_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define KV_NO_THREAD_SAFETY_ANALYSIS KV_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace kvtier {

class KV_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() KV_ACQUIRE() { mu_.lock(); }
  void Unlock() KV_RELEASE() { mu_.unlock(); }
  bool TryLock() KV_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For documentation and the analysis; no run-time check.
  void AssertHeld() const {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class KV_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) KV_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() KV_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with a Mutex. Prefer Wait(&mu): it names the mutex, so the analysis
// checks that it is held. The bound form (CondVar(&mu) then Wait()) is kept for brevity; the
// analysis cannot check it.
class CondVar {
 public:
  CondVar() = default;
  explicit CondVar(Mutex* mu) : bound_(mu) {}
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) KV_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false on timeout.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> d) KV_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_for(lock, d) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Wait() KV_NO_THREAD_SAFETY_ANALYSIS { Wait(bound_); }
  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> d) KV_NO_THREAD_SAFETY_ANALYSIS {
    return WaitFor(bound_, d);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  Mutex* const bound_ = nullptr;
  std::condition_variable cv_;
};

}  // namespace kvtier
