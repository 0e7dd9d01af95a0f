// The stats classes of the Python module (kvtier_stats.h): one read-only attribute per row of the
// stats table, with the row's help as its docstring, as_dict() for reports, and _stats_fields()
// listing the rows, so a row added to the table reaches Python with nothing written here.
#include "kvtier_stats.h"

#include <pybind11/stl.h>

#include <string>

#include "engine/stats_table.h"

namespace py = pybind11;

namespace kvtier::python {
namespace {

// The row names as Python strings: the rows' own names.
std::string Name(std::string_view name) { return std::string(name); }

// The tier's name (TierStats::name; the kind's when it has none).
std::string TierNameOf(const TierStats& t) {
  return t.name.empty() ? Name(TierKindName(t.kind)) : t.name;
}

py::dict TierDict(const TierStats& t) {
  py::dict d;
  d["kind"] = Name(TierKindName(t.kind));
  d["name"] = TierNameOf(t);
  ForEachTierStat(t, [&](const StatSpec& spec, auto value) { d[py::str(Name(spec.name))] = value; });
  return d;
}

// A remote store row's value as Python sees it: the number (breaker_state as its value).
uint64_t PyValue(uint64_t v) { return v; }
uint32_t PyValue(uint32_t v) { return v; }
unsigned PyValue(BreakerState v) { return static_cast<unsigned>(v); }

py::dict RemoteDict(const RemoteStoreStats& r) {
  py::dict d;
  ForEachRemoteStoreStat(r, [&](const StatSpec& spec, auto value) {
    d[py::str(Name(spec.name))] = PyValue(value);
  });
  return d;
}

py::dict EngineDict(const EngineStats& s) {
  py::dict d;
  ForEachEngineStat(s, [&](const StatSpec& spec, auto value) {
    d[py::str(Name(spec.name))] = value;
  });
  py::list tiers;
  for (const TierStats& t : s.tiers) tiers.append(TierDict(t));
  d["tiers"] = tiers;
  d["remote"] = s.remote.has_value() ? py::object(RemoteDict(*s.remote)) : py::object(py::none());
  return d;
}

py::list StatsFields() {
  py::list rows;
  for (const StatSpec& spec : StatsTable()) {
    py::dict row;
    row["name"] = Name(spec.name);
    row["type"] = spec.type == "double" ? "float" : "int";
    row["kind"] = Name(StatKindName(spec.kind));
    row["unit"] = Name(spec.unit);
    row["scope"] = Name(StatScopeName(spec.scope));
    row["help"] = Name(spec.help);
    rows.append(row);
  }
  return rows;
}

}  // namespace

void BindStats(py::module_& m) {
  py::class_<TierStats> tier(m, "TierStats", "One tier's counters (docs/stats.md).");
  tier.def_readonly("kind", &TierStats::kind, "The tier's place in the stack (kvtier.Tier).");
  tier.def_property_readonly("name", &TierNameOf,
                             "The tier's name: a memory tier's kind; below memory, the name its "
                             "tier registered (\"ssd\", and the remote tier's store: \"redis\" "
                             "or \"fs\").");
#define KVTIER_PY_TIER_ROW(name, type, kind, unit, scope, help) \
  tier.def_readonly(#name, &TierStats::name, help);
  KVTIER_TIER_STATS(KVTIER_PY_TIER_ROW)
#undef KVTIER_PY_TIER_ROW
  tier.def("as_dict", &TierDict, "The counters as a dict (kind as its name, and name).");

  py::class_<RemoteStoreStats> remote(m, "RemoteStats",
                                      "The remote store's own counters (docs/stats.md).");
#define KVTIER_PY_REMOTE_ROW(name, type, kind, unit, scope, help)                               \
  remote.def_property_readonly(                                                                 \
      #name, [](const RemoteStoreStats& r) { return PyValue(r.name); }, help);
  KVTIER_REMOTE_STORE_STATS(KVTIER_PY_REMOTE_ROW)
#undef KVTIER_PY_REMOTE_ROW
  remote.def("as_dict", &RemoteDict, "The counters as a dict.");

  py::class_<EngineStats> engine(m, "EngineStats",
                                 "A snapshot of the engine's counters (docs/stats.md).");
#define KVTIER_PY_ENGINE_ROW(name, type, kind, unit, scope, help) \
  engine.def_readonly(#name, &EngineStats::name, help);
  KVTIER_ENGINE_STATS(KVTIER_PY_ENGINE_ROW)
#undef KVTIER_PY_ENGINE_ROW
  engine.def_readonly("tiers", &EngineStats::tiers, "Per tier, fastest first (TierStats).");
  engine.def_readonly("remote", &EngineStats::remote,
                      "The remote store's counters (RemoteStats), None without a remote tier.");
  engine.def("as_dict", &EngineDict,
             "The counters as a dict: every row by name, 'tiers' as a list of dicts and 'remote' "
             "as a dict (None without a remote tier).");

  m.def("_stats_fields", &StatsFields,
        "The rows of the engine's stats table: dicts of name, type, kind (counter, gauge, "
        "ratio, timestamp), unit, scope (engine, remote, tier, age-limited tier, remote store) "
        "and help.");
}

}  // namespace kvtier::python
