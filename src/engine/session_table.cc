#include "engine/session_table.h"

#include <algorithm>

#include "core/assert.h"

namespace kvtier {

SessionTable::SessionTable(uint32_t sessions_max, uint32_t chunks_max)
    : sessions_max_(sessions_max), chunks_max_(chunks_max) {
  KV_CHECK(sessions_max > 0);
  KV_CHECK(chunks_max > 0);
}

void SessionTable::Record(uint64_t session, std::span<const Hash256> chunks) {
  auto it = map_.find(session);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    if (map_.size() >= sessions_max_) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(session);
    it = map_.emplace(session, Session{.chunks = {}, .lru = lru_.begin()}).first;
  }
  const size_t n = std::min<size_t>(chunks.size(), chunks_max_);
  it->second.chunks.assign(chunks.begin(), chunks.begin() + static_cast<std::ptrdiff_t>(n));
}

const std::vector<Hash256>* SessionTable::Find(uint64_t session) const {
  auto it = map_.find(session);
  return it == map_.end() ? nullptr : &it->second.chunks;
}

}  // namespace kvtier
