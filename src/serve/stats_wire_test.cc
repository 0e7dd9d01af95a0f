// Goal: the service's wire format for EngineStats (protocol.h, PutEngineStats / GetEngineStats)
// carries every row of the stats table (engine/stats_table.h), so a connected engine's Stats()
// reports what the service's engine counts; a row added to the table without reaching the wire
// fails here.
// Method: stats with a distinct value per row (engine rows and the rows of two tiers, expanded
// from the table's X-macro lists) are written and read back, and each row compared.
#include <gtest/gtest.h>

#include "engine/stats_test_util.h"
#include "serve/protocol.h"

namespace kvtier::serve {
namespace {

TEST(StatsWire, EveryRowRoundTrips) {
  const EngineStats in = DistinctStats({TierKind::kHost, TierKind::kSsd});
  WireWriter w;
  PutEngineStats(in, &w);
  WireReader r(w.bytes());
  const EngineStats out = GetEngineStats(&r);
  ASSERT_TRUE(r.done());
#define KVTIER_TEST_CHECK(name, type, kind, unit, scope, help) \
  EXPECT_EQ(out.name, in.name) << #name;
  KVTIER_ENGINE_STATS(KVTIER_TEST_CHECK)
  ASSERT_EQ(out.tiers.size(), in.tiers.size());
  for (size_t i = 0; i < in.tiers.size(); ++i) {
    EXPECT_EQ(out.tiers[i].kind, in.tiers[i].kind);
    const TierStats& a = in.tiers[i];
    const TierStats& b = out.tiers[i];
#define KVTIER_TEST_CHECK_TIER(name, type, kind, unit, scope, help) \
  EXPECT_EQ(b.name, a.name) << #name << " of tier " << i;
    KVTIER_TIER_STATS(KVTIER_TEST_CHECK_TIER)
#undef KVTIER_TEST_CHECK_TIER
  }
#undef KVTIER_TEST_CHECK
}

}  // namespace
}  // namespace kvtier::serve
