// Goal: the stats table (stats_table.h) is the one list of the engine's counters and every surface
// derived from it carries each row: the rows are well formed (unique snake_case names, a help
// text, a unit for all but ratios), the visitors reach every row with the field's own value, the
// Prometheus text has a family per exported row with the row's HELP and TYPE, the service's JSON
// has a key per row, and docs/stats.md is the table rendered. The remote store's rows
// (KVTIER_REMOTE_STORE_STATS) reach the same surfaces, and the Prometheus families that existed
// before they were rows keep their names and types.
// Method: EngineStats and one TierStats are filled with a distinct value per row (through the
// visitors' specs and the X-macro lists, so a row the visitors miss keeps 0 and fails); the
// Prometheus text and the JSON of those stats are searched for each row's name and value;
// docs/stats.md is compared with StatsMarkdown() (KVTIER_WRITE_STATS_MD=FILE writes it instead).
// The C and public C++ structs are checked at compile time where they are filled (c_api.cc,
// public_api.cc), EngineStats and TierStats in stats_table.h.
#include "engine/stats_table.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/engine_metrics.h"
#include "engine/stats_test_util.h"
#include "engine/table_test_util.h"

namespace kvtier {
namespace {

// Distinct values per row, a host tier and a remote tier, and a remote store.
EngineStats Distinct() {
  EngineStats s = DistinctStats({TierKind::kHost, TierKind::kRemote});
  s.remote = DistinctRemoteStats();
  return s;
}

TEST(StatsTable, RowsAreWellFormed) {
  std::set<std::string> engine_names, tier_names, remote_store_names;
  const std::regex snake("[a-z][a-z0-9_]*[a-z0-9]");
  for (const StatSpec& s : StatsTable()) {
    const bool per_tier = s.scope == StatScope::kTier || s.scope == StatScope::kAgeLimitedTier;
    const bool remote_store = s.scope == StatScope::kRemoteStore;
    std::set<std::string>& names =
        per_tier ? tier_names : (remote_store ? remote_store_names : engine_names);
    EXPECT_TRUE(names.insert(std::string(s.name)).second) << "two rows named " << s.name;
    EXPECT_TRUE(std::regex_match(std::string(s.name), snake)) << s.name;
    EXPECT_FALSE(s.help.empty()) << s.name;
    EXPECT_TRUE(s.help.ends_with(".")) << s.name;
    EXPECT_EQ(s.unit.empty(), s.kind == StatKind::kRatio) << s.name;
    if (remote_store) {
      EXPECT_TRUE(s.type == "uint64_t" || s.type == "uint32_t" || s.type == "BreakerState")
          << s.name;
      EXPECT_TRUE(s.kind == StatKind::kCounter || s.kind == StatKind::kGauge) << s.name;
    } else {
      EXPECT_TRUE(s.type == "uint64_t" || s.type == "double") << s.name;
    }
  }
  EXPECT_EQ(engine_names.size(), stats_internal::kEngineRows);
  EXPECT_EQ(tier_names.size(), stats_internal::kTierRows);
  EXPECT_EQ(remote_store_names.size(), stats_internal::kRemoteStoreRows);
  EXPECT_EQ(StatsTable().size(), stats_internal::kEngineRows + stats_internal::kTierRows +
                                     stats_internal::kRemoteStoreRows);
}

TEST(StatsTable, VisitorsReachEveryRowWithItsValue) {
  const EngineStats s = Distinct();
  std::vector<double> seen;
  ForEachEngineStat(s, [&](const StatSpec&, auto v) { seen.push_back(static_cast<double>(v)); });
  for (const TierStats& t : s.tiers) {
    ForEachTierStat(t, [&](const StatSpec&, auto v) { seen.push_back(static_cast<double>(v)); });
  }
  ASSERT_EQ(seen.size(), stats_internal::kEngineRows + 2 * stats_internal::kTierRows);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1000.0 + double(i)) << i;

  // The remote store's rows, in order: 5000, 5001, ... and breaker_state half-open (2).
  std::vector<std::string> names;
  size_t i = 0;
  ForEachRemoteStoreStat(*s.remote, [&](const StatSpec& spec, auto v) {
    names.emplace_back(spec.name);
    EXPECT_EQ(static_cast<double>(v), spec.name == "breaker_state" ? 2.0 : 5000.0 + double(i))
        << spec.name;
    ++i;
  });
  ASSERT_EQ(names.size(), stats_internal::kRemoteStoreRows);
  EXPECT_EQ(names.front(), "gets");
  EXPECT_EQ(names.back(), "topology_refreshes");
}

// The sample line of `family` (with `labels`) in `text`, or "" when none.
std::string SampleLine(const std::string& text, const std::string& family,
                       const std::string& labels = "") {
  const std::string head = "kvtier_" + family + labels + " ";
  const size_t at = text.find("\n" + head);
  if (at == std::string::npos) return "";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(StatsTable, PrometheusHasEveryExportedRow) {
  const EngineStats s = Distinct();
  const std::string text = MetricsText(s);
  size_t exported = 0;
  const auto check = [&](const StatSpec& spec, double value, const std::string& prefix,
                         const std::string& labels) {
    if (spec.kind == StatKind::kTimestamp) return;
    std::string family = prefix + std::string(spec.name);
    if (spec.unit == "us") {
      family = family.substr(0, family.size() - 3) + "_seconds";
      value /= 1e6;
    }
    if (spec.kind == StatKind::kCounter) family += "_total";
    EXPECT_NE(text.find("# HELP kvtier_" + family + " " + std::string(spec.help) + "\n"),
              std::string::npos)
        << family;
    const char* type = spec.kind == StatKind::kCounter ? "counter" : "gauge";
    EXPECT_NE(text.find("# TYPE kvtier_" + family + " " + type + "\n"), std::string::npos)
        << family;
    const std::string line = SampleLine(text, family, labels);
    ASSERT_FALSE(line.empty()) << family << labels;
    EXPECT_EQ(std::stod(line.substr(line.rfind(' ') + 1)), value) << line;
    ++exported;
  };
  ForEachEngineStat(s, [&](const StatSpec& spec, auto v) {
    check(spec, static_cast<double>(v), "", "");
  });
  for (const TierStats& t : s.tiers) {
    const std::string kind(TierKindName(t.kind));
    const std::string labels =
        "{tier=\"" + kind + "\",name=\"" + (t.name.empty() ? kind : t.name) + "\"}";
    ForEachTierStat(t, [&](const StatSpec& spec, auto v) {
      check(spec, static_cast<double>(v), "tier_", labels);
    });
  }
  const RemoteStoreStats& r = *s.remote;
  ForEachRemoteStoreStat(r, [&](const StatSpec& spec, auto v) {
    if (spec.name == "corrupt") return;  // Below: it counts mismatched values too.
    check(spec, static_cast<double>(v), "remote_", "");
  });
  EXPECT_GT(exported, stats_internal::kEngineRows + stats_internal::kRemoteStoreRows - 1);
  EXPECT_NE(text.find("# HELP kvtier_remote_corrupt_total Remote values that failed their CRC, "
                      "size or format checks (misses)." +
                      std::string(kRemoteCorruptAlsoMismatched) + "\n"),
            std::string::npos);
  EXPECT_EQ(SampleLine(text, "remote_corrupt_total"),
            "kvtier_remote_corrupt_total " + std::to_string(r.corrupt + r.mismatched));

  // Without a remote tier, its rows are left out; without an age limit, the lag is.
  EngineStats plain = Distinct();
  plain.remote.reset();
  plain.tiers[0].writeback_horizon_us = 0;
  const std::string plain_text = MetricsText(plain);
  EXPECT_EQ(plain_text.find("kvtier_remote_put_errors_total"), std::string::npos);
  EXPECT_EQ(plain_text.find("kvtier_remote_gets_total"), std::string::npos);
  EXPECT_EQ(SampleLine(plain_text, "tier_writeback_lag_seconds", "{tier=\"host\",name=\"host\"}"),
            "");
  EXPECT_NE(
      SampleLine(plain_text, "tier_writeback_lag_seconds", "{tier=\"remote\",name=\"redis\"}"), "");
}

// The remote store's families that dashboards read from before its counters were rows of the
// table: the same names, the same types, a sample each.
TEST(StatsTable, PrometheusKeepsTheRemoteStoreFamiliesItHad) {
  const std::string text = MetricsText(Distinct());
  const std::pair<const char*, const char*> kBefore[] = {
      {"remote_auth_failures_total", "counter"},     {"remote_corrupt_total", "counter"},
      {"remote_timeouts_total", "counter"},          {"remote_breaker_trips_total", "counter"},
      {"remote_breakers_open", "gauge"},             {"remote_redirects_refused_total", "counter"},
      {"remote_endpoints_refused_total", "counter"},
  };
  for (const auto& [family, type] : kBefore) {
    EXPECT_NE(text.find("\n# TYPE kvtier_" + std::string(family) + " " + type + "\n"),
              std::string::npos)
        << family;
    EXPECT_NE(SampleLine(text, family), "") << family;
  }
  EXPECT_NE(SampleLine(text, "remote_breaker_state"), "");
  EXPECT_NE(SampleLine(text, "remote_mismatched_total"), "");
}

TEST(StatsTable, JsonHasEveryRow) {
  const EngineStats s = Distinct();
  const std::string json = StatsJson(s);
  ForEachEngineStat(s, [&](const StatSpec& spec, auto v) {
    const std::string pair = "\"" + std::string(spec.name) + "\": " +
                             std::to_string(static_cast<uint64_t>(v));
    EXPECT_NE(json.find(pair), std::string::npos) << pair;
  });
  for (const TierStats& t : s.tiers) {
    ForEachTierStat(t, [&](const StatSpec& spec, uint64_t v) {
      const std::string pair = "\"" + std::string(spec.name) + "\": " + std::to_string(v);
      EXPECT_NE(json.find(pair), std::string::npos) << pair;
    });
  }
  EXPECT_NE(json.find("\"tiers\": [{\"kind\": \"host\", \"name\": \"host\", "), std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"kind\": \"remote\", \"name\": \"redis\", "), std::string::npos) << json;
  // A name that is not a tier's (from a hostile service) is not written: the kind's instead.
  EngineStats odd = Distinct();
  odd.tiers[1].name = "a\"b";
  EXPECT_NE(StatsJson(odd).find("{\"kind\": \"remote\", \"name\": \"remote\", "),
            std::string::npos);
  const size_t remote_at = json.find("\"remote\": {\"gets\": ");
  ASSERT_NE(remote_at, std::string::npos) << json;
  ForEachRemoteStoreStat(*s.remote, [&](const StatSpec& spec, auto v) {
    const std::string pair = "\"" + std::string(spec.name) + "\": " +
                             std::to_string(static_cast<uint64_t>(v));
    EXPECT_NE(json.find(pair, remote_at), std::string::npos) << pair;
  });
  EXPECT_NE(StatsJson(EngineStats{}).find("\"tiers\": [], \"remote\": null}"), std::string::npos);
}

TEST(StatsTable, DocsAreTheTable) {
  ExpectGeneratedDoc("docs/stats.md", StatsMarkdown(), "KVTIER_WRITE_STATS_MD");
}

}  // namespace
}  // namespace kvtier
