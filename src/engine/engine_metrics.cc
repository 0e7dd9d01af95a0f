#include "engine/engine_metrics.h"

#include <cstdio>

namespace kvtier {
namespace {

class Writer {
 public:
  // One metric family: its HELP and TYPE lines, then `samples` lines added with Sample.
  void Family(const char* name, const char* type, const char* help) {
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
  void Sample(double value, const char* label_name = nullptr, std::string_view label = {}) {
    out_ += "kvtier_" + name_;
    if (label_name != nullptr) {
      out_ += '{';
      out_ += label_name;
      out_ += "=\"";
      out_ += label;
      out_ += "\"}";
    }
    char number[40];
    std::snprintf(number, sizeof(number), " %.17g\n", value);
    out_ += number;
  }
  void One(const char* name, const char* type, const char* help, double value) {
    Family(name, type, help);
    Sample(value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
  std::string name_;
};

double D(uint64_t v) { return static_cast<double>(v); }

}  // namespace

std::string MetricsText(const EngineStats& s) {
  Writer w;
  w.One("lookups_total", "counter", "Lookups.", D(s.lookups));
  w.One("lookup_tokens_total", "counter", "Tokens asked for by lookups.", D(s.lookup_tokens));
  w.One("lookup_hit_tokens_total", "counter", "Tokens lookups found cached.",
        D(s.lookup_hit_tokens));
  w.One("loads_total", "counter", "Loads.", D(s.loads));
  w.One("load_blocks_total", "counter", "Blocks loaded.", D(s.load_blocks));
  w.One("load_failures_total", "counter", "Layers of loads that failed (recomputed by the caller).",
        D(s.load_failures));
  w.One("stores_total", "counter", "Stores.", D(s.stores));
  w.One("store_blocks_total", "counter", "Blocks newly stored.", D(s.store_blocks));
  w.One("busy_rejections_total", "counter", "Stores refused because every memory slot was busy.",
        D(s.busy_rejections));
  w.One("prefetch_blocks_total", "counter", "Blocks promoted by prefetch.", D(s.prefetch_blocks));
  w.One("corrupt_blocks_total", "counter", "Blocks refused by verification (served as misses).",
        D(s.corrupt_blocks));
  w.One("background_writebacks_total", "counter", "Dirty blocks the cleaner wrote to the SSD.",
        D(s.background_writebacks));

  struct PerTier {
    const char* name;
    const char* type;
    const char* help;
    uint64_t TierStats::*field;
  };
  constexpr PerTier kPerTier[] = {
      {"tier_hits_total", "counter", "Blocks served from the tier.", &TierStats::hits},
      {"tier_blocks", "gauge", "Blocks held by the tier.", &TierStats::blocks},
      {"tier_used_bytes", "gauge", "Bytes used in the tier.", &TierStats::used_bytes},
      {"tier_capacity_bytes", "gauge", "The tier's capacity in bytes.", &TierStats::capacity_bytes},
      {"tier_evictions_total", "counter", "Blocks removed from the tier to make room.",
       &TierStats::evictions},
      {"tier_writebacks_total", "counter", "Dirty blocks written from the tier to the one below.",
       &TierStats::writebacks},
      {"tier_promotions_total", "counter", "Blocks copied up into the tier.",
       &TierStats::promotions},
      {"tier_write_failures_total", "counter",
       "Blocks that were to be written into the tier and failed (I/O error, no space).",
       &TierStats::write_failures},
  };
  for (const PerTier& m : kPerTier) {
    w.Family(m.name, m.type, m.help);
    for (const TierStats& t : s.tiers) w.Sample(D(t.*m.field), "tier", TierKindName(t.kind));
  }
  w.Family("tier_writeback_lag_seconds", "gauge",
           "How far the tier's write-back horizon trails now: a Store older than this is on the "
           "tier (write-back tiers with an age limit only).");
  for (const TierStats& t : s.tiers) {
    if (t.writeback_horizon_us == 0) continue;
    w.Sample(D(t.writeback_lag_us) / 1e6, "tier", TierKindName(t.kind));
  }

  if (s.remote.has_value()) {
    const RemoteStoreStats& r = *s.remote;
    w.One("remote_put_errors_total", "counter", "Remote puts that failed.", D(s.remote_put_errors));
    w.One("remote_lookup_errors_total", "counter", "Remote lookups that failed (misses).",
          D(s.remote_lookup_errors));
    w.One("remote_auth_failures_total", "counter",
          "Remote values refused by authentication (forged, moved, damaged).",
          D(r.auth_failures));
    w.One("remote_corrupt_total", "counter", "Remote values that failed their checks.",
          D(r.corrupt + r.mismatched));
    w.One("remote_timeouts_total", "counter", "Remote operations that timed out.", D(r.timeouts));
    w.One("remote_breaker_trips_total", "counter", "Times a node's circuit breaker opened.",
          D(r.breaker_trips));
    w.One("remote_breakers_open", "gauge", "Remote nodes whose breaker is not closed.",
          D(r.breakers_open));
    w.One("remote_redirects_refused_total", "counter",
          "MOVED/ASK redirects refused (a foreign host, or outside the cluster's slot map).",
          D(r.redirects_refused));
    w.One("remote_endpoints_refused_total", "counter",
          "Cluster endpoints refused: a host that is neither a seed's nor allowed.",
          D(r.endpoints_refused));
  }
  w.One("ratio_samples_total", "counter", "Blocks the SSD codec's ratio monitor sampled.",
        D(s.ratio_samples));
  w.One("prediction_accuracy", "gauge", "Share of scored accesses the predictor foresaw.",
        s.prediction_accuracy);
  w.One("prediction_promoted_blocks_total", "counter", "Blocks promoted for predicted sessions.",
        D(s.prediction_promoted_blocks));
  w.One("prediction_useful_blocks_total", "counter",
        "Promoted blocks that a later load served from memory.", D(s.prediction_useful_blocks));
  return w.Take();
}

std::string Engine::MetricsText() { return kvtier::MetricsText(Stats()); }

}  // namespace kvtier
