// Assertions for programmer errors (bugs), not operating errors: a failed KV_CHECK prints the
// condition and location and aborts. KV_CHECK is always on; KV_DCHECK only in debug builds.
// Operating errors (I/O, bad input, corruption) are reported through Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvtier::internal {

[[noreturn]] inline void CheckFailed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "kvtier: check failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace kvtier::internal

#define KV_CHECK(cond)                                            \
  do {                                                            \
    if (!(cond)) [[unlikely]]                                     \
      ::kvtier::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

#define KV_CHECK_OK(expr)                                                                       \
  do {                                                                                          \
    ::kvtier::Status kv_check_status_ = (expr);                                                 \
    if (!kv_check_status_.ok()) [[unlikely]]                                                    \
      ::kvtier::internal::CheckFailed(kv_check_status_.ToString().c_str(), __FILE__, __LINE__); \
  } while (0)

#ifdef NDEBUG
#define KV_DCHECK(cond) \
  do {                  \
    (void)sizeof(cond); \
  } while (0)
#else
#define KV_DCHECK(cond) KV_CHECK(cond)
#endif
