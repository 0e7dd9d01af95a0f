// The arguments of the Python module's Engine and kvtier.connect (kvtier_module.h): the
// _EngineArgs class, which converts Engine's keyword arguments by the options table
// (engine/options_table.h); ToOptions, which turns them into EngineOptions, reading the key
// material they name; the _ConnectArgs class; and _engine_options(), the table's Python rows,
// which kvtier/__init__.py checks keywords against and writes Engine's docstring from.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/options_table.h"
#include "kvtier_module.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_options.h"
#include "tiers/tier_registry.h"

namespace kvtier::python {
namespace {

// A keyword's value as its row's type; TypeError naming the keyword for another type.
OptionValue ToOptionValue(const OptionSpec& spec, const py::handle& value) {
  try {
    switch (spec.type) {
      case OptionType::kBool:
        if (!py::isinstance<py::bool_>(value)) break;
        return value.cast<bool>();
      case OptionType::kUint:
      case OptionType::kBytes:
        if (py::isinstance<py::bool_>(value)) break;
        return value.cast<uint64_t>();
      case OptionType::kInt:
        if (py::isinstance<py::bool_>(value)) break;
        return value.cast<int64_t>();
      case OptionType::kDouble:
        return value.cast<double>();
      case OptionType::kStrings:
        if (py::isinstance<py::str>(value)) break;
        return value.cast<std::vector<std::string>>();
      default:
        return value.cast<std::string>();
    }
  } catch (const py::cast_error&) {
  }
  const char* expected = "a str";
  switch (spec.type) {
    case OptionType::kBool:
      expected = "a bool";
      break;
    case OptionType::kUint:
    case OptionType::kBytes:
    case OptionType::kInt:
      expected = "an int";
      break;
    case OptionType::kDouble:
      expected = "a float";
      break;
    case OptionType::kStrings:
      expected = "a list of str";
      break;
    default:
      break;
  }
  throw py::type_error("Engine(): " + std::string(spec.name) + " must be " + expected + ", got " +
                       std::string(py::str(py::type::of(value).attr("__name__"))));
}

EngineArgs ToEngineArgs(const py::kwargs& kwargs) {
  EngineArgs a;
  for (const OptionSpec& spec : EngineOptionTable()) {
    if ((spec.surfaces & kSurfacePython) == 0) continue;
    py::object value;
    std::string given;
    auto take = [&](std::string_view key) {
      const py::str k{std::string(key)};
      if (!kwargs.contains(k)) return;
      if (!given.empty()) {
        throw py::type_error("Engine(): give " + given + " or " + std::string(key) + ", not both");
      }
      given = key;
      value = kwargs[k];
    };
    take(spec.name);
    for (std::string_view alias : OptionList(spec.aliases)) take(alias);
    if (!value) continue;
    if (spec.name == "layout") {
      a.layout = value.cast<LayoutArg>();
    } else if (spec.name == "weights_digest") {
      a.weights_digest = value.cast<py::bytes>();
    } else if (!spec.settable()) {  // Key material.
      const std::string text = value.cast<std::string>();
      if (spec.name == "ssd_key_file") a.ssd_key_file = text;
      if (spec.name == "ssd_key_env") a.ssd_key_env = text;
      if (spec.name == "remote_key_file") a.remote_key_file = text;
      if (spec.name == "remote_key_env") a.remote_key_env = text;
    } else {
      OptionValue v = ToOptionValue(spec, value);
      if (!IsUnsetValue(spec, v)) a.settings.emplace_back(&spec, std::move(v));  // 0, "": default.
    }
  }
  return a;
}

// Keys from a file or an environment variable (a binding may read the environment; the library
// never does); `what` names the keyword pair in errors.
Status LoadKeys(const std::string& file, const std::string& env, const std::string& what,
                std::optional<RemoteKeyring>* out) {
  if (!file.empty() && !env.empty()) {
    return Status::InvalidArgument(what + "_key_file and " + what + "_key_env: give one of them");
  }
  if (!file.empty()) {
    KV_ASSIGN_OR_RETURN(*out, RemoteKeyring::LoadFile(file, what + "_key_file"));
  } else if (!env.empty()) {
    const char* text = std::getenv(env.c_str());
    if (text == nullptr) {
      return Status::InvalidArgument(what + "_key_env: the environment variable " + env +
                                     " is not set");
    }
    Result<RemoteKeyring> ring = RemoteKeyring::Parse(text);
    if (!ring.ok()) return ring.status().WithContext("$" + env);
    *out = std::move(ring).value();
  }
  return Status::Ok();
}

// The options table's Python rows, for the keyword checks and the docstring in kvtier/__init__.
py::list EngineOptionRows() {
  py::list rows;
  for (const OptionSpec& spec : EngineOptionTable()) {
    if ((spec.surfaces & kSurfacePython) == 0) continue;
    py::dict row;
    row["name"] = std::string(spec.name);
    row["type"] = std::string(OptionTypeName(spec.type));
    row["default"] = std::string(spec.default_text);
    row["valid"] = OptionRangeText(spec);
    row["unit"] = std::string(spec.unit);
    row["doc"] = std::string(spec.doc);
    row["note"] = std::string(spec.note);
    py::list aliases;
    for (std::string_view alias : OptionList(spec.aliases)) aliases.append(std::string(alias));
    row["aliases"] = aliases;
    rows.append(row);
  }
  return rows;
}

}  // namespace

Result<EngineOptions> ToOptions(const EngineArgs& a) {
  EngineOptions o;
  KV_ASSIGN_OR_RETURN(o.layout, ParseLayout(a.layout.text));
  if (!a.weights_digest.empty()) {
    if (a.weights_digest.size() != o.model.weights_digest.size()) {
      return Status::InvalidArgument("weights_digest must be 32 bytes, got " +
                                     std::to_string(a.weights_digest.size()));
    }
    std::memcpy(o.model.weights_digest.data(), a.weights_digest.data(),
                o.model.weights_digest.size());
  }
  for (const auto& [spec, value] : a.settings) {
    KV_RETURN_IF_ERROR(SetEngineOption(&o, *spec, value));
  }
  if (SsdTierOptions* ssd = o.tiers.Find<SsdTierOptions>(kSsdTierName)) {
    KV_RETURN_IF_ERROR(LoadKeys(a.ssd_key_file, a.ssd_key_env, "ssd", &ssd->keyring));
  }
  if (o.remote.has_value()) {
    if (std::optional<RemoteKeyring>* keyring = RemoteStoreKeyring(o.remote->stores)) {
      KV_RETURN_IF_ERROR(LoadKeys(a.remote_key_file, a.remote_key_env, "remote", keyring));
    }
  }
  return o;
}

void BindOptions(py::module_& m) {
  py::class_<ConnectArgs>(m, "_ConnectArgs")
      .def(py::init([](std::string socket, std::string token, std::string name,
                       std::optional<LayoutArg> layout, uint32_t timeout_ms,
                       uint32_t reconnect_interval_ms) {
             return ConnectArgs{.socket = std::move(socket),
                                .token = std::move(token),
                                .name = std::move(name),
                                .layout = std::move(layout),
                                .timeout_ms = timeout_ms,
                                .reconnect_interval_ms = reconnect_interval_ms};
           }),
           py::arg("socket"), py::arg("token"), py::arg("name"), py::arg("layout"),
           py::arg("timeout_ms"), py::arg("reconnect_interval_ms"));

  py::class_<EngineArgs>(m, "_EngineArgs").def(py::init([](const py::kwargs& kwargs) {
    return ToEngineArgs(kwargs);
  }));

  m.def("_engine_options", &EngineOptionRows);
}

}  // namespace kvtier::python
