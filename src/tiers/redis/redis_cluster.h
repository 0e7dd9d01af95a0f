// Redis Cluster topology for RedisStore: the slot -> node map, the parser of CLUSTER SLOTS and
// of MOVED / ASK redirect errors. Routing follows the Redis Cluster specification: slot =
// CRC16(hash tag) mod 16384 (crc16.h); a MOVED reply means the slot now lives elsewhere for good
// (update the map and refresh it), an ASK reply means "this one key, this one time, ask the other
// node after sending ASKING" (a slot being migrated; the map is not changed).
//
// Thread safety: SlotMap is a value with no synchronization; the owner serializes access.
// Ownership: parsers only read the replies they are given.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvtier/result.h"
#include "tiers/redis/crc16.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier {

struct RedisSlotRange {
  uint16_t first = 0;  // Inclusive.
  uint16_t last = 0;   // Inclusive.
  RedisEndpoint master;
};

// Parses a CLUSTER SLOTS reply; only masters are kept. An empty or "?" host means the host of
// the node that answered (`answered_by_host`). Corruption for a reply of an unexpected shape.
Result<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply* reply,
                                                      std::string_view answered_by_host);

enum class RedisRedirectKind : uint8_t { kMoved = 0, kAsk = 1 };

struct RedisRedirect {
  RedisRedirectKind kind = RedisRedirectKind::kMoved;
  uint16_t slot = 0;
  RedisEndpoint target;
};

// Parses "MOVED <slot> <host>:<port>" and "ASK <slot> <host>:<port>"; false for any other text.
bool ParseRedisRedirect(std::string_view error, RedisRedirect* redirect);

// Which node (an index into the owner's node table) serves each slot.
class SlotMap {
 public:
  static constexpr uint16_t kNoNode = UINT16_MAX;

  SlotMap() { Clear(); }
  void Clear() {
    owner_.fill(kNoNode);
    assigned_ = 0;
  }
  // Assigns slots [first, last]; both must be < kRedisClusterSlots and first <= last.
  void Assign(uint16_t first, uint16_t last, uint16_t node);
  uint16_t Owner(uint16_t slot) const { return owner_[slot]; }
  bool empty() const { return assigned_ == 0; }

 private:
  std::array<uint16_t, kRedisClusterSlots> owner_;
  uint32_t assigned_ = 0;  // Slots with an owner.
};

}  // namespace kvtier
