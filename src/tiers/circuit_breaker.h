// A circuit breaker for one remote endpoint: after `failures_to_open` consecutive failures it
// opens and rejects calls without touching the network; after `open_cooldown_us` on the injected
// Clock it lets exactly one probe through (half-open); the probe's success closes it, its failure
// opens it again for another cool-down.
//
// Why: a dead or partitioned Redis must cost the engine nothing but a miss. Without a breaker
// every batch would pay a connect timeout and the server would be hammered with reconnects the
// moment it comes back.
//
// Logging: exactly one line per state change ("opened", "half-open", "closed"), through the
// injected Logger, prefixed with the breaker's name.
//
// Thread safety: not synchronized; the owner (RedisStore) calls it under its own mutex.
// Ownership: borrows the Clock and Logger, which must outlive the breaker.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/logger.h"
#include "env/env.h"

namespace kvtier {

enum class BreakerState : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

std::string_view BreakerStateName(BreakerState state);

struct CircuitBreakerOptions {
  uint32_t failures_to_open = 3;          // Consecutive failures that open the breaker; >= 1.
  uint64_t open_cooldown_us = 1'000'000;  // Time open before one probe is let through.
};

class CircuitBreaker {
 public:
  CircuitBreaker(std::string name, const CircuitBreakerOptions& options, Clock* clock,
                 Logger* logger);

  // True when a call may go to the network now. In the open state, once the cool-down has
  // passed, the first Allow() moves to half-open and returns true (the probe); further calls
  // return false until the probe's outcome is recorded.
  bool Allow();
  void RecordSuccess();
  void RecordFailure();

  BreakerState state() const { return state_; }
  uint64_t trips() const { return trips_; }  // Times the breaker went to open.

 private:
  void MoveTo(BreakerState next, std::string_view why);

  const std::string name_;
  const CircuitBreakerOptions options_;
  Clock* const clock_;
  Logger* const logger_;
  BreakerState state_ = BreakerState::kClosed;
  uint32_t consecutive_failures_ = 0;
  uint64_t opened_at_us_ = 0;
  bool probe_in_flight_ = false;
  uint64_t trips_ = 0;
};

}  // namespace kvtier
