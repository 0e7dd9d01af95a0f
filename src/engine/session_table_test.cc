// Goal: the session table remembers the latest request of each session, keeps only the leading
// chunks_max chunk hashes, and forgets the least recently recorded session beyond sessions_max.
// Method: small bounds and synthetic chunk hashes (byte 0 = chunk number, byte 1 = session).
#include "engine/session_table.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::vector<Hash256> Chunks(uint8_t session, size_t n) {
  std::vector<Hash256> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i][0] = static_cast<uint8_t>(i);
    out[i][1] = session;
  }
  return out;
}

TEST(SessionTableTest, LatestRequestReplacesThePreviousOne) {
  SessionTable t(/*sessions_max=*/4, /*chunks_max=*/8);
  EXPECT_EQ(t.Find(1), nullptr);
  t.Record(1, Chunks(1, 3));
  ASSERT_NE(t.Find(1), nullptr);
  EXPECT_EQ(*t.Find(1), Chunks(1, 3));
  t.Record(1, Chunks(1, 5));  // The next turn extends the conversation.
  EXPECT_EQ(*t.Find(1), Chunks(1, 5));
  t.Record(1, Chunks(1, 2));  // A shorter request replaces it too: it is the latest.
  EXPECT_EQ(*t.Find(1), Chunks(1, 2));
  EXPECT_EQ(t.size(), 1u);
}

TEST(SessionTableTest, OnlyTheLeadingChunksAreKept) {
  SessionTable t(4, 3);
  t.Record(7, Chunks(7, 10));
  EXPECT_EQ(*t.Find(7), Chunks(7, 3));
}

TEST(SessionTableTest, LeastRecentlyRecordedSessionIsForgotten) {
  SessionTable t(3, 4);
  for (uint8_t s = 1; s <= 3; ++s) t.Record(s, Chunks(s, 1));
  t.Record(1, Chunks(1, 2));  // Session 1 is now the most recent; 2 is the oldest.
  t.Record(4, Chunks(4, 1));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Find(2), nullptr);
  EXPECT_NE(t.Find(1), nullptr);
  EXPECT_NE(t.Find(3), nullptr);
  EXPECT_NE(t.Find(4), nullptr);
  for (uint8_t s = 10; s < 100; ++s) t.Record(s, Chunks(s, 4));
  EXPECT_EQ(t.size(), 3u);
}

}  // namespace
}  // namespace kvtier
