// See redis_cluster.h.
#include "tiers/redis/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <string>

#include "core/assert.h"

namespace kvtier {
namespace {

bool ParseSlotNumber(const redisReply* r, uint16_t* slot) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) return false;
  if (r->integer < 0 || r->integer >= kRedisClusterSlots) return false;
  *slot = static_cast<uint16_t>(r->integer);
  return true;
}

bool ParseNode(const redisReply* r, std::string_view answered_by_host, RedisEndpoint* out) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 2) return false;
  const redisReply* host = r->element[0];
  const redisReply* port = r->element[1];
  if (host == nullptr || host->type != REDIS_REPLY_STRING) return false;
  if (port == nullptr || port->type != REDIS_REPLY_INTEGER) return false;
  if (port->integer <= 0 || port->integer > 65535) return false;
  std::string_view host_text(host->str, host->len);
  if (host_text.empty() || host_text == "?") host_text = answered_by_host;
  out->host = std::string(host_text);
  out->port = static_cast<uint16_t>(port->integer);
  return true;
}

}  // namespace

Result<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply* reply,
                                                      std::string_view answered_by_host) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) {
    return Status::Corruption("CLUSTER SLOTS: not an array");
  }
  std::vector<RedisSlotRange> ranges;
  ranges.reserve(reply->elements);
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* entry = reply->element[i];
    if (entry == nullptr || entry->type != REDIS_REPLY_ARRAY || entry->elements < 3) {
      return Status::Corruption("CLUSTER SLOTS: bad entry");
    }
    RedisSlotRange range;
    if (!ParseSlotNumber(entry->element[0], &range.first) ||
        !ParseSlotNumber(entry->element[1], &range.last) || range.first > range.last ||
        !ParseNode(entry->element[2], answered_by_host, &range.master)) {
      return Status::Corruption("CLUSTER SLOTS: bad slot range or node");
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

bool ParseRedisRedirect(std::string_view error, RedisRedirect* redirect) {
  RedisRedirectKind kind;
  if (error.rfind("MOVED ", 0) == 0) {
    kind = RedisRedirectKind::kMoved;
    error.remove_prefix(6);
  } else if (error.rfind("ASK ", 0) == 0) {
    kind = RedisRedirectKind::kAsk;
    error.remove_prefix(4);
  } else {
    return false;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return false;
  uint32_t slot = 0;
  const auto [end, ec] = std::from_chars(error.data(), error.data() + space, slot);
  if (ec != std::errc() || end != error.data() + space || slot >= kRedisClusterSlots) return false;
  Result<RedisEndpoint> target = ParseRedisEndpoint(error.substr(space + 1));
  if (!target.ok()) return false;
  redirect->kind = kind;
  redirect->slot = static_cast<uint16_t>(slot);
  redirect->target = std::move(*target);
  return true;
}

void SlotMap::Assign(uint16_t first, uint16_t last, uint16_t node) {
  KV_CHECK(first <= last);
  KV_CHECK(last < kRedisClusterSlots);
  for (uint32_t slot = first; slot <= last; ++slot) {
    if (owner_[slot] == kNoNode && node != kNoNode) ++assigned_;
    if (owner_[slot] != kNoNode && node == kNoNode) --assigned_;
    owner_[slot] = node;
  }
}

}  // namespace kvtier
