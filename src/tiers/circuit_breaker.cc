// See circuit_breaker.h.
#include "tiers/circuit_breaker.h"

#include <string>
#include <utility>

#include "core/assert.h"

namespace kvtier {

std::string_view BreakerStateName(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half-open";
  }
  return "unknown";
}

CircuitBreaker::CircuitBreaker(std::string name, const CircuitBreakerOptions& options, Clock* clock,
                               Logger* logger)
    : name_(std::move(name)), options_(options), clock_(clock), logger_(logger) {
  KV_CHECK(clock_ != nullptr);
  KV_CHECK(options_.failures_to_open >= 1);
}

bool CircuitBreaker::Allow() {
  switch (state_) {
    case BreakerState::kClosed:
      return true;
    case BreakerState::kOpen:
      if (clock_->NowMicros() - opened_at_us_ < options_.open_cooldown_us) return false;
      MoveTo(BreakerState::kHalfOpen, "cool-down over, probing");
      probe_in_flight_ = true;
      return true;
    case BreakerState::kHalfOpen:
      if (probe_in_flight_) return false;
      probe_in_flight_ = true;
      return true;
  }
  return false;
}

void CircuitBreaker::RecordSuccess() {
  consecutive_failures_ = 0;
  probe_in_flight_ = false;
  if (state_ != BreakerState::kClosed) MoveTo(BreakerState::kClosed, "probe succeeded");
}

void CircuitBreaker::RecordFailure() {
  probe_in_flight_ = false;
  if (state_ == BreakerState::kHalfOpen) {
    opened_at_us_ = clock_->NowMicros();
    ++trips_;
    MoveTo(BreakerState::kOpen, "probe failed");
    return;
  }
  if (state_ == BreakerState::kOpen) return;
  ++consecutive_failures_;
  if (consecutive_failures_ >= options_.failures_to_open) {
    opened_at_us_ = clock_->NowMicros();
    ++trips_;
    MoveTo(BreakerState::kOpen,
           "after " + std::to_string(consecutive_failures_) + " consecutive failures");
  }
}

void CircuitBreaker::MoveTo(BreakerState next, std::string_view why) {
  state_ = next;
  if (next == BreakerState::kClosed) consecutive_failures_ = 0;
  std::string line = name_ + ": circuit breaker ";
  line += next == BreakerState::kOpen ? "opened" : BreakerStateName(next);
  line += " (";
  line += why;
  line += ")";
  LogTo(logger_, next == BreakerState::kOpen ? LogLevel::kWarn : LogLevel::kInfo, line);
}

}  // namespace kvtier
