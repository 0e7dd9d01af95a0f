// Goal: MetricsText is valid Prometheus text exposition (0.0.4) and carries the engine's
// counters: every sample belongs to a family declared by one HELP and one TYPE line, names and
// labels are well formed, counters end in _total, and the values are the stats' own (per tier
// with a tier label; the remote tier's only when there is one).
// Method: a real Engine with a host tier does a store, a lookup and a load; its text is parsed
// line by line with the format's grammar and compared with Stats().
#include "engine/engine_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace kvtier {
namespace {

struct Parsed {
  std::map<std::string, std::string> types;    // family -> counter|gauge
  std::map<std::string, double> samples;       // "name{labels}" -> value
};

Parsed Parse(const std::string& text) {
  Parsed p;
  std::set<std::string> helped;
  const std::regex help(R"(# HELP (kvtier_[a-z_]+) \S.*)");
  const std::regex type(R"(# TYPE (kvtier_[a-z_]+) (counter|gauge))");
  const std::regex sample(
      R"((kvtier_[a-z_]+)(\{tier="[a-z]+",name="[a-z0-9_-]+"\})? (-?[0-9.e+-]+))");
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "two HELP lines for " << m[1];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(helped.count(m[1])) << "TYPE before HELP: " << line;
      EXPECT_TRUE(p.types.emplace(m[1], m[2]).second) << "two TYPE lines: " << line;
      if (m[2] == "counter") {
        EXPECT_TRUE(std::string(m[1]).ends_with("_total")) << line;
      }
    } else if (std::regex_match(line, m, sample)) {
      EXPECT_TRUE(p.types.count(m[1])) << "sample of an undeclared family: " << line;
      EXPECT_TRUE(p.samples.emplace(std::string(m[1]) + std::string(m[2]), std::stod(m[3])).second)
          << "duplicate sample: " << line;
    } else {
      ADD_FAILURE() << "not exposition format: '" << line << "'";
    }
  }
  return p;
}

TEST(EngineMetricsTest, TextIsPrometheusExpositionAndCarriesTheStats) {
  EngineOptions o;
  o.layout = {.layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF16,
              .block_tokens = 16};
  o.model.name = "metrics-test";
  o.host.capacity_bytes = 16 * o.layout.BlockBytes();
  o.host.huge_pages = HugePages::kOff;
  o.host.lock = MemoryLock::kOff;
  o.host.prefault = false;
  Result<std::unique_ptr<Engine>> engine = Engine::Open(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const Namespace ns = *(*engine)->MakeNamespace("t", {});
  const std::vector<uint32_t> tokens = TestTokens(1, 32);
  std::vector<std::vector<std::byte>> blocks(4, std::vector<std::byte>(o.layout.BlockBytes()));
  std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
  ASSERT_TRUE((*(*engine)->Store(ns, tokens, src))->Wait().ok());
  ASSERT_EQ((*engine)->Lookup(ns, tokens)->matched_tokens, 32u);
  std::vector<std::span<std::byte>> dst(blocks.begin(), blocks.end());
  ASSERT_TRUE((*(*engine)->Load(ns, tokens, dst))->Wait().ok());

  const EngineStats stats = (*engine)->Stats();
  const Parsed p = Parse(MetricsText(stats));
  EXPECT_EQ(p.samples.at("kvtier_lookups_total"), double(stats.lookups));
  EXPECT_EQ(p.samples.at("kvtier_lookup_hit_tokens_total"), 32.0);
  EXPECT_EQ(p.samples.at("kvtier_store_blocks_total"), 4.0);
  EXPECT_EQ(p.samples.at("kvtier_load_blocks_total"), 4.0);
  EXPECT_EQ(p.samples.at("kvtier_tier_blocks{tier=\"host\",name=\"host\"}"), 4.0);
  EXPECT_EQ(p.samples.at("kvtier_tier_hits_total{tier=\"host\",name=\"host\"}"),
            double(stats.tiers[0].hits));
  EXPECT_EQ(p.samples.at("kvtier_tier_capacity_bytes{tier=\"host\",name=\"host\"}"),
            double(o.host.capacity_bytes));
  EXPECT_EQ(p.types.at("kvtier_tier_used_bytes"), "gauge");
  EXPECT_EQ(p.types.count("kvtier_remote_auth_failures_total"), 0u);  // No remote tier.
}

}  // namespace
}  // namespace kvtier
