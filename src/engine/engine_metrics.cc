#include "engine/engine_metrics.h"

#include <cstdio>
#include <string>

#include "engine/stats_table.h"

namespace kvtier {
namespace {

class Writer {
 public:
  // One metric family: its HELP and TYPE lines, then `samples` lines added with Sample.
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP kvtier_";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE kvtier_";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
    name_ = name;
  }
  // `labels`: `a="x",b="y"` (values that need no escaping), or none.
  void Sample(double value, std::string_view labels = {}) {
    out_ += "kvtier_" + name_;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    char number[40];
    std::snprintf(number, sizeof(number), " %.17g\n", value);
    out_ += number;
  }
  void One(std::string_view name, std::string_view type, std::string_view help, double value) {
    Family(name, type, help);
    Sample(value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
  std::string name_;
};

double D(uint64_t v) { return static_cast<double>(v); }
double D(double v) { return v; }

// The family of a row: kvtier_<prefix><name>, counters with _total, microseconds as seconds.
struct PromFamily {
  std::string name;
  std::string_view type;
  double divisor;  // Of the row's value.
};
PromFamily FamilyOf(const StatSpec& spec, std::string_view prefix) {
  std::string name = std::string(prefix) + std::string(spec.name);
  double divisor = 1;
  if (spec.unit == "us" && name.ends_with("_us")) {
    name.resize(name.size() - 3);
    name += "_seconds";
    divisor = 1e6;
  }
  if (spec.kind == StatKind::kCounter) name += "_total";
  return {name, spec.kind == StatKind::kCounter ? "counter" : "gauge", divisor};
}

double D(uint32_t v) { return static_cast<double>(v); }
double D(BreakerState v) { return static_cast<double>(v); }

// The remote store's rows as kvtier_remote_<name>. kvtier_remote_corrupt_total counts mismatched
// values too, as it did before they had a family of their own (dashboards read it).
void RemoteStoreMetrics(const RemoteStoreStats& r, Writer* w) {
  ForEachRemoteStoreStat(r, [&](const StatSpec& spec, auto value) {
    const PromFamily f = FamilyOf(spec, "remote_");
    if (spec.name == "corrupt") {
      w->One(f.name, f.type, std::string(spec.help) + std::string(kRemoteCorruptAlsoMismatched),
             D(value) + D(r.mismatched));
      return;
    }
    w->One(f.name, f.type, spec.help, D(value) / f.divisor);
  });
}

}  // namespace

// Every row of the stats table (stats_table.h) but timestamps; remote rows with a remote tier
// only, age-limited tier rows for the tiers that have an age limit only.
std::string MetricsText(const EngineStats& s) {
  Writer w;
  ForEachEngineStat(s, [&](const StatSpec& spec, auto value) {
    if (spec.kind == StatKind::kTimestamp) return;
    if (spec.scope == StatScope::kRemote && !s.remote.has_value()) return;
    const PromFamily f = FamilyOf(spec, "");
    w.One(f.name, f.type, spec.help, D(value) / f.divisor);
  });
  for (const StatSpec& spec : StatsTable()) {
    if (spec.scope != StatScope::kTier && spec.scope != StatScope::kAgeLimitedTier) continue;
    if (spec.kind == StatKind::kTimestamp) continue;
    const PromFamily f = FamilyOf(spec, "tier_");
    w.Family(f.name, f.type, spec.help);
    for (const TierStats& t : s.tiers) {
      if (spec.scope == StatScope::kAgeLimitedTier && t.writeback_horizon_us == 0) continue;
      // The tier's place in the stack and its name (the registered name below memory).
      const std::string labels =
          "tier=\"" + std::string(TierKindName(t.kind)) + "\",name=\"" +
          (IsTierName(t.name) ? t.name : std::string(TierKindName(t.kind))) + "\"";
      ForEachTierStat(t, [&](const StatSpec& row, auto value) {
        if (row.name == spec.name) w.Sample(D(value) / f.divisor, labels);
      });
    }
  }
  if (s.remote.has_value()) RemoteStoreMetrics(*s.remote, &w);
  return w.Take();
}

std::string Engine::MetricsText() { return kvtier::MetricsText(Stats()); }

}  // namespace kvtier
