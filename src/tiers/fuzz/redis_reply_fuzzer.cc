// libFuzzer harness for the parsers of Redis replies (src/tiers/redis/redis_cluster.h): CLUSTER SLOTS
// replies (ParseClusterSlots), MOVED / ASK redirections (ParseRedisRedirect) and the
// "host:port" endpoints inside them (ParseRedisEndpoint). The input is a RESP byte stream, as a
// server (or anything posing as one) sends it; hiredis's own reader turns it into reply trees
// exactly as a connection does (with the same bounded reply constructors), and every complete
// reply is handed to the parsers. Nothing may crash or read out of bounds (run under
// ASan/UBSan), and what a parser accepts must be in range.
// Built only with -DKVTIER_BUILD_FUZZERS=ON (tests/fuzz/CMakeLists.txt).
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/assert.h"
#include "tiers/redis/crc16.h"
#include "tiers/redis/redis_cluster.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier {
namespace {

// Replies taken from one input; a few suffice to reach every parser path.
constexpr int kRepliesMax = 16;

struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};

void ParseText(std::string_view text) {
  RedisRedirect redirect;
  if (ParseRedisRedirect(text, &redirect)) {
    KV_CHECK(redirect.slot < kRedisClusterSlots);
    KV_CHECK(redirect.target.port != 0);
  }
  (void)ParseRedisEndpoint(text);
}

void ParseReply(const redisReply* reply) {
  Result<std::vector<RedisSlotRange>> ranges = ParseClusterSlots(reply, "answering-host");
  if (ranges.ok()) {
    for (const RedisSlotRange& r : *ranges) {
      KV_CHECK(r.first <= r.last);
      KV_CHECK(r.last < kRedisClusterSlots);
      KV_CHECK(r.master.port != 0);
    }
  }
  if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS ||
      reply->type == REDIS_REPLY_STRING) {
    ParseText(std::string_view(reply->str, reply->len));
  }
}

}  // namespace
}  // namespace kvtier

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The reply constructors every connection of the remote tier uses: they refuse an array that
  // declares more than kRedisReplyElementsMax elements (hiredis's own would allocate its table at
  // once), so a hostile reply is an error here as there, never an out-of-memory.
  std::unique_ptr<redisReader, kvtier::ReaderDeleter> reader(
      redisReaderCreateWithFunctions(kvtier::RedisBoundedReplyFunctions()));
  if (reader == nullptr) return 0;
  if (redisReaderFeed(reader.get(), input.data(), input.size()) != REDIS_OK) {
    return 0;
  }
  for (int i = 0; i < kvtier::kRepliesMax; ++i) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK || raw == nullptr) break;
    kvtier::RedisReplyPtr reply(static_cast<redisReply*>(raw));
    kvtier::ParseReply(reply.get());
  }
  // The text parsers on the raw bytes too, so they are fuzzed without RESP framing.
  kvtier::ParseText(input);
  return 0;
}
