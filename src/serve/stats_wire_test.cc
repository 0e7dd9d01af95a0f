// Goal: the service's wire format for EngineStats (protocol.h, PutEngineStats / GetEngineStats)
// carries every row of the stats table (engine/stats_table.h), so a connected engine's Stats()
// reports what the service's engine counts; a row added to the table without reaching the wire
// fails here. The remote store's rows travel when the request asks for them, after everything a
// client from before reads, so old replies still decode and old clients get the reply they know;
// the tiers' write bytes follow the remote block, and their names follow those.
// Method: stats with a distinct value per row (engine rows, the rows of two tiers and the remote
// store's rows, expanded from the table's X-macro lists) are written and read back, and each row
// compared; a reply without the remote block, and one cut before it, decode with remote unset;
// one cut before the names decodes without them, and a name that is not a tier's is dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/stats_test_util.h"
#include "serve/protocol.h"

namespace kvtier::serve {
namespace {

// Bytes the tiers' names take on the wire (a length, then the bytes).
size_t NameBytes(const EngineStats& s) {
  size_t n = 0;
  for (const TierStats& t : s.tiers) n += 4 + t.name.size();
  return n;
}

EngineStats Distinct() {
  EngineStats s = DistinctStats({TierKind::kHost, TierKind::kSsd});
  s.remote = DistinctRemoteStats();
  return s;
}

TEST(StatsWire, EveryRowRoundTrips) {
  const EngineStats in = Distinct();
  WireWriter w;
  PutEngineStats(in, &w, /*remote_store=*/true);
  WireReader r(w.bytes());
  const EngineStats out = GetEngineStats(&r);
  ASSERT_TRUE(r.done());
#define KVTIER_TEST_CHECK(name, type, kind, unit, scope, help) \
  EXPECT_EQ(out.name, in.name) << #name;
  KVTIER_ENGINE_STATS(KVTIER_TEST_CHECK)
  ASSERT_EQ(out.tiers.size(), in.tiers.size());
  for (size_t i = 0; i < in.tiers.size(); ++i) {
    EXPECT_EQ(out.tiers[i].kind, in.tiers[i].kind);
    EXPECT_EQ(out.tiers[i].name, in.tiers[i].name);
    const TierStats& a = in.tiers[i];
    const TierStats& b = out.tiers[i];
#define KVTIER_TEST_CHECK_TIER(name, type, kind, unit, scope, help) \
  EXPECT_EQ(b.name, a.name) << #name << " of tier " << i;
    KVTIER_TIER_STATS(KVTIER_TEST_CHECK_TIER)
#undef KVTIER_TEST_CHECK_TIER
  }
  ASSERT_TRUE(out.remote.has_value());
#define KVTIER_TEST_CHECK_REMOTE(name, type, kind, unit, scope, help) \
  EXPECT_EQ(out.remote->name, in.remote->name) << #name;
  KVTIER_REMOTE_STORE_STATS(KVTIER_TEST_CHECK_REMOTE)
#undef KVTIER_TEST_CHECK_REMOTE
#undef KVTIER_TEST_CHECK
}

TEST(StatsWire, RemoteStoreOnlyWhenAskedAndOldRepliesStillDecode) {
  const EngineStats in = Distinct();
  WireWriter old_format;  // What a client from before asks for and gets.
  PutEngineStats(in, &old_format);
  WireWriter with_remote;
  PutEngineStats(in, &with_remote, /*remote_store=*/true);
  const std::vector<std::byte>& a = old_format.bytes();
  const std::vector<std::byte>& b = with_remote.bytes();
  ASSERT_GT(b.size(), a.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));  // Appended after the horizons.

  WireReader r(a);  // A service from before, or a request without the flag.
  const EngineStats out = GetEngineStats(&r);
  ASSERT_TRUE(r.done());
  EXPECT_FALSE(out.remote.has_value());
  EXPECT_EQ(out.tiers[1].writeback_horizon_us, in.tiers[1].writeback_horizon_us);

  EngineStats none = in;  // No remote tier: one byte says so (then the tiers' write bytes).
  none.remote.reset();
  WireWriter w;
  PutEngineStats(none, &w, /*remote_store=*/true);
  EXPECT_EQ(w.bytes().size(), a.size() + 1 + in.tiers.size() * 16 + NameBytes(in));
  WireReader rn(w.bytes());
  const EngineStats out_none = GetEngineStats(&rn);
  EXPECT_FALSE(out_none.remote.has_value());
  EXPECT_EQ(out_none.tiers[1].staged_write_bytes, in.tiers[1].staged_write_bytes);
  EXPECT_TRUE(rn.done());

  // A service from before this row: the reply ends after the remote block.
  WireWriter cut;
  PutEngineStats(in, &cut, /*remote_store=*/true);
  std::vector<std::byte> before_rows = cut.bytes();
  before_rows.resize(before_rows.size() - in.tiers.size() * 16 - NameBytes(in));
  WireReader rc(before_rows);
  const EngineStats out_cut = GetEngineStats(&rc);
  EXPECT_TRUE(rc.done());
  EXPECT_TRUE(out_cut.remote.has_value());
  EXPECT_EQ(out_cut.tiers[1].write_bytes, 0u);

  // A service from before the names: the reply ends after the write bytes.
  std::vector<std::byte> before_names = cut.bytes();
  before_names.resize(before_names.size() - NameBytes(in));
  WireReader rb(before_names);
  const EngineStats out_before = GetEngineStats(&rb);
  EXPECT_TRUE(rb.done());
  EXPECT_EQ(out_before.tiers[1].write_bytes, in.tiers[1].write_bytes);
  EXPECT_TRUE(out_before.tiers[1].name.empty());
}

// A name that is not a tier's name (characters a JSON or Prometheus line would need escaped, or
// longer than one) does not reach the surfaces; the rest of the reply is kept.
TEST(StatsWire, ANameThatIsNotATiersIsDropped) {
  EngineStats in = Distinct();
  in.tiers[0].name = "a\"b{";
  in.tiers[1].name = "ssd";
  WireWriter w;
  PutEngineStats(in, &w, /*remote_store=*/true);
  WireReader r(w.bytes());
  const EngineStats out = GetEngineStats(&r);
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(out.tiers[0].name.empty());
  EXPECT_EQ(out.tiers[1].name, "ssd");
  EXPECT_EQ(out.tiers[1].staged_write_bytes, in.tiers[1].staged_write_bytes);

  in.tiers[0].name = std::string(kTierNameMax + 1, 'a');  // Too long: the reply is refused.
  WireWriter too_long;
  PutEngineStats(in, &too_long, /*remote_store=*/true);
  WireReader rl(too_long.bytes());
  GetEngineStats(&rl);
  EXPECT_FALSE(rl.ok());
}

}  // namespace
}  // namespace kvtier::serve
