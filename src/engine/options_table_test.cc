// Goal: the options table (options_table.h) is the one list of the engine's options: every
// surface that cannot be derived from it (the C struct, the public C++ options) holds exactly the
// rows the table names for it, docs/options.md is the table rendered, every row is well formed,
// and SetEngineOption checks types and ranges and writes the right field. The rows of the tiers
// below memory come from their providers (TierProvider::OptionRows()), each once, every tier's
// switch before its settings, and they write into the tier's options held by its name.
// Method: the C header and include/kvtier/options.h are read as text and their option fields
// listed (the C struct's fields; the C++ EngineOptions' leaves, nested structs expanded as
// "ssd.capacity_bytes"), then compared with the table both ways; docs/options.md is compared with
// OptionsMarkdown() (KVTIER_WRITE_OPTIONS_MD=FILE writes it instead); the setter is called with
// values in and out of range on options that have every tier.
#include "engine/options_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/table_test_util.h"
#include "tiers/fs/fs_options.h"
#include "tiers/redis/redis_options.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/tier_registry.h"

namespace kvtier {
namespace {

// `text` without // and /* */ comments.
std::string StripComments(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
      out += '\n';
    } else if (text.compare(i, 2, "/*") == 0) {
      i = text.find("*/", i);
      if (i == std::string::npos) break;
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The member declared by one statement: the identifier before its initializer or its end.
std::string MemberName(std::string statement) {
  const size_t eq = statement.find('=');
  if (eq != std::string::npos) statement.resize(eq);
  while (!statement.empty() && (std::isspace(static_cast<unsigned char>(statement.back())) ||
                                statement.back() == '}' || statement.back() == '{')) {
    statement.pop_back();
  }
  size_t start = statement.size();
  while (start > 0 && (std::isalnum(static_cast<unsigned char>(statement[start - 1])) ||
                       statement[start - 1] == '_')) {
    --start;
  }
  return statement.substr(start);
}

// struct name -> (member type, member name) of each data member, from a header's text.
using Members = std::vector<std::pair<std::string, std::string>>;
std::map<std::string, Members> ParseStructs(const std::string& header) {
  const std::string text = StripComments(header);
  std::map<std::string, Members> structs;
  size_t pos = 0;
  while ((pos = text.find("struct ", pos)) != std::string::npos) {
    pos += 7;
    const size_t open = text.find('{', pos);
    const size_t semi = text.find(';', pos);
    if (open == std::string::npos || semi < open) continue;  // A declaration.
    std::string name = text.substr(pos, open - pos);
    name = MemberName(name);
    size_t close = open + 1;  // The brace that closes `open` (members may hold "{}").
    for (int depth = 1; close < text.size(); ++close) {
      if (text[close] == '{') ++depth;
      if (text[close] == '}' && --depth == 0) break;
    }
    std::stringstream body(text.substr(open + 1, close - open - 1));
    std::string statement;
    while (std::getline(body, statement, ';')) {
      if (statement.find("friend") != std::string::npos) continue;
      const std::string member = MemberName(statement);
      if (member.empty()) continue;
      std::string type = statement.substr(0, statement.rfind(member));
      const size_t first = type.find_first_not_of(" \n\t");
      type = first == std::string::npos ? "" : type.substr(first);
      structs[name].emplace_back(type, member);
    }
    pos = close;
  }
  return structs;
}

// The leaves of `root`: nested structs of the same header expanded as "outer.inner".
void Leaves(const std::map<std::string, Members>& structs, const std::string& root,
            const std::string& prefix, std::set<std::string>* out) {
  for (const auto& [type, member] : structs.at(root)) {
    std::string inner = type;
    if (inner.starts_with("std::optional<")) inner = inner.substr(14, inner.find('>') - 14);
    while (!inner.empty() && std::isspace(static_cast<unsigned char>(inner.back()))) {
      inner.pop_back();
    }
    if (structs.contains(inner)) {
      Leaves(structs, inner, prefix + member + ".", out);
    } else {
      out->insert(prefix + member);
    }
  }
}

std::string Difference(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  for (const std::string& x : a) {
    if (!b.contains(x)) out += (out.empty() ? "" : ", ") + x;
  }
  return out;
}

std::set<std::string> RowNames(uint32_t surface) {
  std::set<std::string> names;
  for (const OptionSpec& spec : EngineOptionTable()) {
    if ((spec.surfaces & surface) != 0) names.insert(std::string(spec.name));
  }
  return names;
}

TEST(OptionsTable, RowsAreWellFormed) {
  std::set<std::string> seen;
  for (const OptionSpec& spec : EngineOptionTable()) {
    const std::string name(spec.name);
    SCOPED_TRACE(name);
    EXPECT_TRUE(seen.insert(name).second) << "duplicate";
    for (char c : name) {
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == '_' ||
                  std::isdigit(static_cast<unsigned char>(c)));
    }
    EXPECT_FALSE(spec.doc.empty());
    EXPECT_FALSE(spec.default_text.empty());
    EXPECT_EQ(spec.doc.find('|'), std::string_view::npos) << "breaks the Markdown table";
    EXPECT_EQ(spec.note.find('|'), std::string_view::npos);
    if (spec.surfaces != kSurfacesAll) {
      EXPECT_FALSE(spec.note.empty()) << "say why not everywhere";
    }
    EXPECT_EQ(spec.cpp_field.empty(), (spec.surfaces & kSurfaceCpp) == 0);
    EXPECT_EQ(spec.type == OptionType::kChoice, !spec.choices.empty());
    EXPECT_LE(spec.min, spec.max);
    EXPECT_EQ(FindEngineOption(name), &spec);
  }
  for (const OptionSpec& spec : EngineOptionTable()) {
    for (std::string_view alias : OptionList(spec.aliases)) {
      EXPECT_FALSE(seen.contains(std::string(alias))) << alias << " is also an option";
      EXPECT_EQ(FindEngineOption(alias), &spec) << alias;
    }
  }
  EXPECT_EQ(OptionList(""), std::vector<std::string_view>{});
  EXPECT_EQ(OptionList("a|bc"), (std::vector<std::string_view>{"a", "bc"}));
  EXPECT_EQ(FindEngineOption("no_such_option"), nullptr);
}

// Every provider's rows are in the table, each name once; the table's tier rows are a provider's.
// Rows two providers share agree on everything a surface reads.
TEST(OptionsTable, TierRowsComeFromTheirProviders) {
  const std::span<const OptionSpec> table = EngineOptionTable();
  size_t tier_rows = 0;
  for (const OptionSpec& spec : table) {
    if (spec.tier.empty()) continue;
    ++tier_rows;
    const TierProvider* p = FindTierProvider(spec.tier);
    ASSERT_NE(p, nullptr) << spec.name;
    EXPECT_TRUE(std::ranges::any_of(p->OptionRows(), [&](const OptionSpec& r) {
      return r.name == spec.name;
    })) << spec.name;
  }
  EXPECT_GT(tier_rows, 30u);
  for (const TierProvider* p : TierProviders()) {
    EXPECT_FALSE(p->OptionRows().empty()) << p->name();
    for (const OptionSpec& row : p->OptionRows()) {
      SCOPED_TRACE(std::string(p->name()) + " " + std::string(row.name));
      EXPECT_EQ(row.tier, p->name());
      EXPECT_EQ(row.set, nullptr);  // A tier row writes into the tier's options only.
      const OptionSpec* shown = FindEngineOption(row.name);
      ASSERT_NE(shown, nullptr);
      EXPECT_EQ(shown->type, row.type);
      EXPECT_EQ(shown->default_text, row.default_text);
      EXPECT_EQ(shown->min, row.min);
      EXPECT_EQ(shown->max, row.max);
      EXPECT_EQ(shown->choices, row.choices);
      EXPECT_EQ(shown->surfaces, row.surfaces);
      EXPECT_EQ(shown->cpp_field, row.cpp_field);
      EXPECT_EQ(shown->tier_switch, row.tier_switch);
      EXPECT_EQ(shown->settable(), row.settable());  // SetEngineOption sets it on each.
    }
  }
}

// A surface that applies every row in table order (C, Python) sets a tier up before any of its
// settings: a tier's switch comes before every row of that tier's provider, shared ones included.
TEST(OptionsTable, EveryTierSwitchComesBeforeTheTiersSettings) {
  const std::span<const OptionSpec> table = EngineOptionTable();
  auto at = [&](std::string_view name) {
    return std::ranges::find_if(table, [&](const OptionSpec& r) { return r.name == name; }) -
           table.begin();
  };
  size_t switches = 0;
  for (const TierProvider* p : TierProviders()) {
    for (const OptionSpec& sw : p->OptionRows()) {
      if (!sw.tier_switch) continue;
      ++switches;
      for (const OptionSpec& row : p->OptionRows()) {
        if (&row == &sw) continue;
        EXPECT_LT(at(sw.name), at(row.name)) << sw.name << " before " << row.name;
      }
    }
  }
  EXPECT_EQ(switches, TierProviders().size());
  EXPECT_EQ(FindEngineOption("ssd_dirs")->tier, kSsdTierName);
  EXPECT_EQ(FindEngineOption("remote_endpoints")->tier, kRedisStoreName);
  EXPECT_EQ(FindEngineOption("fs_dir")->tier, kFsStoreName);
}

// A setting both stores have applies to the one configured; two store switches give the remote
// tier two stores (refused when it opens); an empty switch removes its own tier only.
TEST(OptionsTable, StoreSwitchesAndSharedRowsReachTheirStore) {
  EngineOptions o;
  auto set = [&](std::string_view name, OptionValue v) {
    const Status s = SetEngineOption(&o, *FindEngineOption(name), v);
    EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  };
  set("remote_key_prefix", std::string("early"));  // No remote tier yet: ignored.
  EXPECT_FALSE(o.remote.has_value());
  set("remote_endpoints", std::vector<std::string>{"h:1"});
  set("remote_io_threads", uint64_t{3});
  set("fs_dir", std::string("/shared"));
  ASSERT_TRUE(o.remote.has_value());
  EXPECT_EQ(o.remote->io_threads, 3u) << "the remote tier's own settings stay";
  EXPECT_EQ(o.remote->stores.size(), 2u);
  const Status two = o.remote->Validate();
  EXPECT_TRUE(two.IsInvalidArgument());
  EXPECT_NE(two.message().find("fs_dir"), std::string::npos) << two.ToString();
  set("remote_endpoints", std::vector<std::string>{});  // Removes the Redis store only.
  ASSERT_TRUE(o.remote.has_value());
  ASSERT_EQ(o.remote->stores.size(), 1u);
  ASSERT_NE(FindFsOptions(o.remote->stores), nullptr);
  set("remote_key_prefix", std::string("p"));
  set("remote_insecure_plaintext", true);
  set("fs_bytes_max", uint64_t{1} << 20);
  set("remote_command_timeout_ms", uint64_t{900});  // A Redis setting: no Redis store now.
  const FsStoreOptions& fs = o.remote->stores.Get<FsStoreOptions>(kFsStoreName);
  EXPECT_EQ(fs.dir, "/shared");
  EXPECT_EQ(fs.key_prefix, "p");
  EXPECT_TRUE(fs.insecure_plaintext);
  EXPECT_EQ(fs.bytes_max, uint64_t{1} << 20);
  set("remote_endpoints", std::vector<std::string>{});  // Not the store in use: no change.
  ASSERT_TRUE(o.remote.has_value());
  EXPECT_NE(FindFsOptions(o.remote->stores), nullptr);
  set("fs_dir", std::string());  // The last store: the remote tier goes with it.
  EXPECT_FALSE(o.remote.has_value());
  set("ssd_dirs", std::vector<std::string>{"a"});
  ASSERT_TRUE(o.tiers.Has(kSsdTierName));
  set("ssd_dirs", std::vector<std::string>{});
  EXPECT_TRUE(o.tiers.empty());
}

// Options that hold every tier, so that every setter has its target.
EngineOptions WithEveryTier() {
  EngineOptions o;
  o.tiers.Emplace(kSsdTierName, SsdTierOptions{.dirs = {"d"}});
  o.cxl = HostTierOptions{.name = "cxl", .capacity_bytes = 1 << 20};
  o.remote = RemoteTierOptions{
      .stores = TierOptionsSet::Of(kRedisStoreName, RedisStoreOptions{.endpoints = {"h:1"}})};
  return o;
}

// A valid value of the row's type: its default when that parses, else its minimum.
OptionValue SomeValue(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kBool:
      return spec.default_text == "true";
    case OptionType::kUint:
    case OptionType::kBytes:
      return static_cast<uint64_t>(spec.max);
    case OptionType::kInt:
      return static_cast<int64_t>(spec.max);
    case OptionType::kDouble:
      return spec.max;
    case OptionType::kStrings:
      return std::vector<std::string>{"x:1"};
    case OptionType::kChoice:
      return std::string(spec.choices.substr(spec.choices.rfind('|') + 1));
    default:
      return std::string("x");
  }
}

TEST(OptionsTable, SetterChecksTypeAndRange) {
  for (const OptionSpec& spec : EngineOptionTable()) {
    SCOPED_TRACE(std::string(spec.name));
    EngineOptions o = WithEveryTier();
    if (!spec.settable()) {
      EXPECT_EQ(SetEngineOption(&o, spec, SomeValue(spec)).code(), StatusCode::kNotSupported);
      continue;
    }
    if (spec.name.starts_with("ssd_codec_")) {
      ASSERT_TRUE(SetEngineOption(&o, *FindEngineOption("ssd_codec"), std::string("int8")).ok());
    }
    const Status ok = SetEngineOption(&o, spec, SomeValue(spec));
    EXPECT_TRUE(ok.ok()) << ok.ToString();
    EXPECT_EQ(SetEngineOption(&o, spec, OptionValue(std::vector<std::string>{})).ok(),
              spec.type == OptionType::kStrings);
    if (spec.type == OptionType::kUint || spec.type == OptionType::kBytes) {
      const Status over = SetEngineOption(&o, spec, static_cast<uint64_t>(spec.max) + 1);
      EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(over.message().find(std::string(spec.name) + "="), std::string::npos);
      EXPECT_NE(over.message().find("to"), std::string::npos) << over.ToString();
    }
    if (spec.type == OptionType::kChoice) {
      EXPECT_EQ(SetEngineOption(&o, spec, std::string("bogus")).code(),
                StatusCode::kInvalidArgument);
    }
  }
}

TEST(OptionsTable, SetterWritesTheField) {
  EngineOptions o;
  auto set = [&](std::string_view name, OptionValue v) {
    const Status s = SetEngineOption(&o, *FindEngineOption(name), v);
    EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  };
  set("ssd_io_depth", uint64_t{7});  // No SSD tier yet: ignored.
  EXPECT_FALSE(o.tiers.Has(kSsdTierName));
  set("ssd_dirs", std::vector<std::string>{"a", "b"});
  set("ssd_io_depth", uint64_t{7});
  set("ssd_sync", std::string("periodic"));
  set("ssd_file_mode", uint64_t{0640});
  ASSERT_TRUE(o.tiers.Has(kSsdTierName));
  EXPECT_EQ(o.tiers.Get<SsdTierOptions>(kSsdTierName).dirs.size(), 2u);
  EXPECT_EQ(o.tiers.Get<SsdTierOptions>(kSsdTierName).io_depth, 7u);
  EXPECT_EQ(o.tiers.Get<SsdTierOptions>(kSsdTierName).sync, SsdSyncMode::kPeriodic);
  EXPECT_EQ(o.tiers.Get<SsdTierOptions>(kSsdTierName).file_mode, 0640u);
  set("cxl_bytes", uint64_t{1} << 30);
  set("cxl_numa_node", int64_t{2});
  ASSERT_TRUE(o.cxl.has_value());
  EXPECT_EQ(o.cxl->name, "cxl");
  EXPECT_EQ(o.cxl->numa_node, 2);
  set("device_backend", std::string("cpu"));
  EXPECT_EQ(o.device_backend, DeviceBackend::kCpu);
  set("writeback_dirty_fraction", 0.25);
  EXPECT_EQ(o.writeback_dirty_fraction, 0.25);
  set("writeback_age_ms_max", uint64_t{0});
  EXPECT_EQ(o.writeback_age_ms_max, 0u);
  set("staging_buffers", uint64_t{64});
  EXPECT_EQ(o.staging_buffers, 64u);
  set("remote_endpoints", std::vector<std::string>{"h:1"});
  set("remote_key_prefix", std::string("p"));
  set("remote_command_timeout_ms", uint64_t{900});
  set("remote_write_policy", std::string("back"));
  ASSERT_TRUE(o.remote.has_value());
  EXPECT_EQ(o.remote->stores.Get<RedisStoreOptions>(kRedisStoreName).key_prefix, "p");
  EXPECT_EQ(o.remote->stores.Get<RedisStoreOptions>(kRedisStoreName).command_timeout_ms, 900u);
  EXPECT_EQ(o.remote->write_policy, WritePolicy::kWriteBack);
  set("ssd_codec", std::string("int4"));
  set("ssd_codec_group_size", uint64_t{64});
  set("ssd_codec_zstd_level", int64_t{3});
  EXPECT_EQ(o.ssd_codec.codec, codecs::CodecId::kInt4);
  EXPECT_EQ(o.ssd_codec.group_size, 64u);
  EXPECT_EQ(o.ssd_codec.zstd_level, 3);
  // The rotated and mixed-width codecs by name; setting the group or level afterwards keeps them.
  set("ssd_codec", std::string("k8v4-rot"));
  set("ssd_codec_group_size", uint64_t{16});
  set("ssd_codec_zstd_level", int64_t{2});
  EXPECT_EQ(o.ssd_codec, codecs::CodecParams::Quantized(codecs::CodecId::kK8V4Rot, 16, 2));
  set("ssd_codec", std::string("int4-rot"));
  EXPECT_EQ(o.ssd_codec.codec, codecs::CodecId::kInt4Rot);
  const Status bad = SetEngineOption(&o, *FindEngineOption("prediction_window"), uint64_t{17});
  EXPECT_EQ(bad.message(), "prediction_window=17: must be from 1 to 16");
}

// The C struct kvtier_engine_options_t holds a field for each row that names C, and no other
// option (the fields that are not options are listed here).
TEST(OptionsTable, CStructMatchesTable) {
  const std::string header = ReadSource("include/kvtier/c_api.h");
  const size_t begin = header.find("typedef struct kvtier_engine_options_s {");
  const size_t end = header.find("} kvtier_engine_options_t;");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const std::string body =
      StripComments(header.substr(header.find('{', begin) + 1, end - header.find('{', begin) - 1));
  std::set<std::string> fields;
  std::stringstream statements(body);
  std::string statement;
  while (std::getline(statements, statement, ';')) {
    const std::string name = MemberName(statement);
    if (!name.empty()) fields.insert(name);
  }
  // Not options: the version field, a length, and the log callback (a function, not a setting).
  for (const char* not_option :
       {"struct_size", "ssd_dir_count", "log_fn", "log_context", "log_min_level"}) {
    EXPECT_EQ(fields.erase(not_option), 1u) << not_option;
  }
  // Part of the `layout` row: its kind, appended because kvtier_layout_t's size is fixed.
  EXPECT_EQ(fields.erase("layout_kind"), 1u);
  const std::set<std::string> rows = RowNames(kSurfaceC);
  EXPECT_EQ(Difference(rows, fields), "") << "rows naming C missing from kvtier_engine_options_t";
  EXPECT_EQ(Difference(fields, rows), "") << "C fields that are not rows naming C";
}

// kvtier::api::EngineOptions' leaves are exactly the rows' cpp_field values.
TEST(OptionsTable, PublicCppOptionsMatchTable) {
  const auto structs = ParseStructs(ReadSource("include/kvtier/options.h"));
  ASSERT_TRUE(structs.contains("EngineOptions"));
  std::set<std::string> leaves;
  Leaves(structs, "EngineOptions", "", &leaves);
  EXPECT_EQ(leaves.erase("log"), 1u);  // A callback, not a setting.
  std::set<std::string> rows;
  for (const OptionSpec& spec : EngineOptionTable()) {
    if (!spec.cpp_field.empty()) rows.insert(std::string(spec.cpp_field));
  }
  EXPECT_EQ(Difference(rows, leaves), "") << "rows' C++ fields missing from options.h";
  EXPECT_EQ(Difference(leaves, rows), "") << "options.h fields that no row names";
}

TEST(OptionsTable, DocsAreTheTable) {
  ExpectGeneratedDoc("docs/options.md", OptionsMarkdown(), "KVTIER_WRITE_OPTIONS_MD");
}

}  // namespace
}  // namespace kvtier
