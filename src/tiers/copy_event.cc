// CopyEvent: wait/poll on the completion of an asynchronous copy (see memory_tier.h).
#include <memory>

#include "core/assert.h"
#include "tiers/copy_event_state.h"

namespace kvtier {

Status CopyEvent::Wait() const {
  if (state_ == nullptr) return Status::Ok();
  MutexLock lock(&state_->mu);
  while (!state_->done) state_->cv.Wait(&state_->mu);
  return state_->status;
}

bool CopyEvent::Ready() const {
  if (state_ == nullptr) return true;
  MutexLock lock(&state_->mu);
  return state_->done;
}

CopyEventSource::CopyEventSource(uint32_t pending) : state_(std::make_shared<CopyEvent::State>()) {
  tiers_internal::ResetEvent(*state_, pending);
}

void CopyEventSource::Complete(const Status& status) const {
  tiers_internal::CompleteRegion(*state_, status);
}

namespace tiers_internal {

void ResetEvent(CopyEvent::State& state, uint32_t pending) {
  MutexLock lock(&state.mu);
  state.pending = pending;
  state.done = pending == 0;
  state.status = Status::Ok();
}

void CompleteRegion(CopyEvent::State& state, const Status& status) {
  MutexLock lock(&state.mu);
  KV_DCHECK(state.pending > 0);
  if (!status.ok() && state.status.ok()) state.status = status;
  if (--state.pending == 0) {
    state.done = true;
    state.cv.SignalAll();
  }
}

}  // namespace tiers_internal
}  // namespace kvtier
