// See crc16.h. The table is built at compile time so there is no mutable state.
#include "tiers/redis/crc16.h"

#include <array>

namespace kvtier {
namespace {

constexpr std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000u) != 0 ? (crc << 1) ^ 0x1021u : crc << 1;
    }
    table[i] = static_cast<uint16_t>(crc & 0xFFFFu);
  }
  return table;
}

constexpr std::array<uint16_t, 256> kTable = MakeTable();

}  // namespace

uint16_t Crc16Xmodem(std::string_view data) {
  uint32_t crc = 0;
  for (char c : data) {
    const uint32_t index = ((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xFFu;
    crc = ((crc << 8) ^ kTable[index]) & 0xFFFFu;
  }
  return static_cast<uint16_t>(crc);
}

std::string_view RedisHashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

uint16_t RedisKeySlot(std::string_view key) {
  return static_cast<uint16_t>(Crc16Xmodem(RedisHashTag(key)) % kRedisClusterSlots);
}

}  // namespace kvtier
