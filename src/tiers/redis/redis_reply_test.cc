// Goal: show that the remote tier's reply constructors for hiredis build exactly the replies
// hiredis's own do (strings, status and error lines, integers, nil, nested arrays), so every
// parser of replies sees the same trees, and that a reply declaring a huge array is refused with
// an error before anything of its size is allocated (hiredis 0.14 would allocate 8 bytes per
// declared element at once: a few bytes from a hostile server, gigabytes of memory).
// Also that arrays are charged to the reply's element budget as they are declared (16 arrays of
// 65536 small integers, 4 MiB sent, would otherwise cost ~75 MiB of reply objects), that a reply
// to a command that expects no array may not be one, and that nesting is bounded.
// Method: the same bytes fed to a default reader and to one with RedisBoundedReplyFunctions(),
// the trees compared field by field; then a reply declaring 10^9 elements, and one just at the
// bound, checked against the heap's count of mmapped bytes (mallinfo2); the budget's refusals
// against the heap's bytes in use (mapped and not).
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <malloc.h>

#include <memory>
#include <string>

#include "tiers/redis/redis_connection.h"

namespace kvtier {
namespace {

struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
using Reader = std::unique_ptr<redisReader, ReaderDeleter>;

// Parses `bytes` as one reply; nullptr (and *error set) when the reader fails.
RedisReplyPtr Parse(redisReader* reader, const std::string& bytes, std::string* error) {
  EXPECT_EQ(redisReaderFeed(reader, bytes.data(), bytes.size()), REDIS_OK);
  void* reply = nullptr;
  if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
    *error = reader->errstr;
    return nullptr;
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

void ExpectSame(const redisReply* a, const redisReply* b, const std::string& where) {
  ASSERT_NE(a, nullptr) << where;
  ASSERT_NE(b, nullptr) << where;
  EXPECT_EQ(a->type, b->type) << where;
  EXPECT_EQ(a->integer, b->integer) << where;
  ASSERT_EQ(a->len, b->len) << where;
  if (a->str != nullptr || b->str != nullptr) {
    ASSERT_TRUE(a->str != nullptr && b->str != nullptr) << where;
    EXPECT_EQ(std::string(a->str, a->len), std::string(b->str, b->len)) << where;
    EXPECT_EQ(b->str[b->len], '\0') << where;
  }
  ASSERT_EQ(a->elements, b->elements) << where;
  for (size_t i = 0; i < a->elements; ++i) {
    ExpectSame(a->element[i], b->element[i], where + "/" + std::to_string(i));
  }
}

TEST(RedisReplyTest, BoundedConstructorsBuildTheSameReplies) {
  const std::string bytes =
      "*6\r\n$3\r\nfoo\r\n:-42\r\n*2\r\n$-1\r\n+OK\r\n-ERR bad\r\n$0\r\n\r\n"
      "*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
  Reader plain(redisReaderCreate());
  Reader bounded(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  std::string error;
  RedisReplyPtr a = Parse(plain.get(), bytes, &error);
  RedisReplyPtr b = Parse(bounded.get(), bytes, &error);
  ExpectSame(a.get(), b.get(), "reply");
  for (const std::string& single : {std::string("$5\r\nhello\r\n"), std::string(":7\r\n"),
                                    std::string("$-1\r\n"), std::string("*0\r\n")}) {
    Reader p(redisReaderCreate());
    Reader q(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
    ExpectSame(Parse(p.get(), single, &error).get(), Parse(q.get(), single, &error).get(),
               single);
  }
}

TEST(RedisReplyTest, HugeArrayIsRefusedWithoutAllocatingIt) {
  Reader bounded(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  const size_t mapped_before = mallinfo2().hblkhd;
  std::string error;
  EXPECT_EQ(Parse(bounded.get(), "*1000000000\r\n", &error), nullptr);
  EXPECT_FALSE(error.empty());
  EXPECT_LT(mallinfo2().hblkhd, mapped_before + (64u << 20)) << "the element table was allocated";
  // Nested too: the bound applies at every level.
  Reader nested(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  EXPECT_EQ(Parse(nested.get(), "*1\r\n*" + std::to_string(kRedisReplyElementsMax + 1) + "\r\n",
                  &error),
            nullptr);
  // At the bound the array is read as usual.
  Reader at_bound(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  std::string bytes = "*" + std::to_string(kRedisReplyElementsMax) + "\r\n";
  for (int i = 0; i < kRedisReplyElementsMax; ++i) bytes += ":1\r\n";
  RedisReplyPtr ok = Parse(at_bound.get(), bytes, &error);
  ASSERT_NE(ok, nullptr) << error;
  EXPECT_EQ(ok->elements, static_cast<size_t>(kRedisReplyElementsMax));
}

// Bytes the heap holds for the program now, mmapped chunks included.
size_t HeapBytesInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST(RedisReplyTest, NestedArraysAreChargedToTheReplysBudget) {
  std::string wide = "*16\r\n";
  for (int i = 0; i < 16; ++i) {
    wide += "*65536\r\n";
    for (int k = 0; k < 65536; ++k) wide += ":1\r\n";
  }
  Reader reader(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  RedisReplyBudget budget{.elements_max = kRedisClusterSlotsElementsMax,
                          .elements_left = kRedisClusterSlotsElementsMax};
  RedisReaderSetBudget(reader.get(), &budget);
  const size_t before = HeapBytesInUse();
  std::string error;
  RedisReplyPtr reply = Parse(reader.get(), wide, &error);  // Held while the heap is measured.
  EXPECT_EQ(reply, nullptr);
  // The reader's copy of the 4 MiB sent, not 2^20 reply objects (~75 MiB).
  EXPECT_LT(HeapBytesInUse(), before + (24u << 20)) << "reply objects past the budget";
  EXPECT_NE(budget.refused.find("elements in all"), std::string::npos) << budget.refused;

  // Within the budget, the same shape is read as usual.
  Reader fits(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  RedisReplyBudget enough{.elements_max = 2 + 2 * 3, .elements_left = 2 + 2 * 3};
  RedisReaderSetBudget(fits.get(), &enough);
  RedisReplyPtr ok =
      Parse(fits.get(), "*2\r\n*3\r\n:1\r\n:2\r\n:3\r\n*3\r\n:4\r\n:5\r\n:6\r\n", &error);
  ASSERT_NE(ok, nullptr) << error;
  EXPECT_EQ(enough.elements_left, 0u);
}

TEST(RedisReplyTest, ArraysRefusedWhereNoneIsExpectedOrNestedTooDeep) {
  Reader scalar(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  RedisReplyBudget none;  // elements_max 0: the command's reply is never an array.
  RedisReaderSetBudget(scalar.get(), &none);
  std::string error;
  EXPECT_EQ(Parse(scalar.get(), "*0\r\n", &error), nullptr);
  EXPECT_NE(none.refused.find("an array reply"), std::string::npos) << none.refused;

  Reader deep(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  EXPECT_EQ(Parse(deep.get(), "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", &error), nullptr);
  Reader at_depth(redisReaderCreateWithFunctions(RedisBoundedReplyFunctions()));
  EXPECT_NE(Parse(at_depth.get(), "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", &error), nullptr) << error;
}

}  // namespace
}  // namespace kvtier
