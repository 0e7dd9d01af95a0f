// CRC16-XMODEM and the Redis Cluster hash slot of a key, as the Redis Cluster specification
// defines them: slot = CRC16(key) mod 16384, where only the part between the first '{' and the
// next '}' is hashed when that part is non-empty (a "hash tag").
//
// Why here: Debian ships no cluster-aware C/C++ Redis client, so RedisStore routes by slot itself.
//
// Thread safety: pure functions. Ownership: spans and views are only read during the call.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvtier {

inline constexpr uint32_t kRedisClusterSlots = 16384;

// CRC16 with polynomial 0x1021, initial value 0, no reflection, no final xor (XMODEM).
// CRC16("123456789") == 0x31C3.
uint16_t Crc16Xmodem(std::string_view data);

// The part of `key` that Redis Cluster hashes: the hash tag when there is a non-empty one,
// otherwise the whole key.
std::string_view RedisHashTag(std::string_view key);

// The cluster slot of `key`, in [0, kRedisClusterSlots).
uint16_t RedisKeySlot(std::string_view key);

}  // namespace kvtier
