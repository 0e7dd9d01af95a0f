// The Python module _kvtier (kvtier_module.h): its exception classes, its functions and enums,
// and the order in which the topic files register their classes, each before the signatures
// that name it.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>

#include "engine/engine.h"
#include "kvtier/status.h"
#include "kvtier/version.h"
#include "kvtier_module.h"
#include "kvtier_stats.h"
#include "tiers/remote_crypto.h"

namespace kvtier::python {
namespace {

// ---- Status -> exception (the one place) --------------------------------------------------------

constexpr size_t kStatusCodes = static_cast<size_t>(StatusCode::kUnavailable) + 1;
// Exception classes by StatusCode (index 0, OK, holds the base class kvtier.Error). Created at
// import and never freed (module globals live as long as the interpreter).
std::array<PyObject*, kStatusCodes> g_errors{};

void TranslateStatusError(const StatusError& e) {
  const auto code = static_cast<size_t>(e.status().code());
  PyObject* type = code < kStatusCodes ? g_errors[code] : g_errors[0];
  py::object instance = py::reinterpret_borrow<py::object>(type)(e.status().message());
  instance.attr("code") = StatusCodeName(e.status().code());
  PyErr_SetObject(type, instance.ptr());
}

void RegisterErrors(py::module_& m) {
  struct Spec {
    StatusCode code;
    const char* name;
    PyObject* builtin;  // A second base where Python has a natural one, else nullptr.
  };
  const Spec specs[] = {
      {StatusCode::kNotFound, "NotFoundError", PyExc_LookupError},
      {StatusCode::kCorruption, "CorruptionError", nullptr},
      {StatusCode::kIoError, "IoError", PyExc_OSError},
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {StatusCode::kNotSupported, "NotSupportedError", nullptr},
      {StatusCode::kNoSpace, "NoSpaceError", nullptr},
      {StatusCode::kBusy, "BusyError", nullptr},
      {StatusCode::kAborted, "AbortedError", nullptr},
      {StatusCode::kTimedOut, "TimedOutError", PyExc_TimeoutError},
      {StatusCode::kUnavailable, "UnavailableError", nullptr},
  };
  PyObject* base = PyErr_NewExceptionWithDoc(
      "kvtier.Error", "Base class of kvtier errors; .code is the status code name.", nullptr,
      nullptr);
  if (base == nullptr) throw py::error_already_set();
  g_errors[0] = base;
  m.add_object("Error", py::reinterpret_borrow<py::object>(base));
  for (const Spec& spec : specs) {
    py::tuple bases = spec.builtin != nullptr
                          ? py::make_tuple(py::handle(base), py::handle(spec.builtin))
                          : py::make_tuple(py::handle(base));
    const std::string qualified = std::string("kvtier.") + spec.name;
    PyObject* type = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    g_errors[static_cast<size_t>(spec.code)] = type;
    m.add_object(spec.name, py::reinterpret_borrow<py::object>(type));
  }
  // pybind11 takes a plain function pointer with a by-value exception_ptr.
  py::register_exception_translator([](std::exception_ptr p) {  // NOLINT(performance-*)
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      TranslateStatusError(e);
    }
  });
}

// The module's functions and enums.
void BindModule(py::module_& m) {
  m.doc() = "kvtier: tiered KV-cache engine (low-level bindings; import kvtier instead)";
  m.attr("__version__") = kVersionString;
  RegisterErrors(m);
  m.def(
      "derive_tenant_salt",
      [](const std::string& tenant_id, const py::bytes& secret) {
        const std::string s = secret;
        return ValueOrThrow(DeriveTenantSalt(tenant_id, std::as_bytes(std::span(s))));
      },
      py::arg("tenant_id"), py::arg("secret"),
      "A tenant salt (64 hex digits) from a tenant id and a secret of at least 16 bytes: "
      "HMAC-SHA256(secret, tenant id). It separates tenants only while the secret stays secret.");
  m.def(
      "generate_remote_key",
      [](uint32_t key_id) { return ValueOrThrow(RemoteKeyring::GenerateText(key_id)); },
      py::arg("key_id") = 1,
      "A new random deployment key line '<id> <64 hex digits>' for a remote key file.");

  py::enum_<TierKind>(m, "Tier", "Where a chunk is cached, fastest first.")
      .value("NONE", TierKind::kNone)
      .value("DEVICE", TierKind::kDevice)
      .value("HOST", TierKind::kHost)
      .value("CXL", TierKind::kCxl)
      .value("SSD", TierKind::kSsd)
      .value("REMOTE", TierKind::kRemote);

  py::enum_<BlockPriority>(m, "Priority")
      .value("NORMAL", BlockPriority::kNormal)
      .value("HIGH", BlockPriority::kHigh)
      .value("PINNED_PROMPT", BlockPriority::kPinnedPrompt);
}

// A class is registered before the first signature that names it: pybind11 writes a signature
// when the function is defined, naming an unregistered class by its C++ name. Engine comes
// before _EngineArgs and _ConnectArgs, so its constructors' signatures keep naming those two by
// their C++ names, as they always have (kvtier.Engine and kvtier.connect wrap them).
void Bind(py::module_& m) {
  BindModule(m);          // Errors, functions, Tier, Priority.
  BindEngineTypes(m);     // Namespace, LookupResult (kvtier_engine.cc).
  BindStats(m);           // TierStats, EngineStats, _stats_fields (kvtier_stats.cc).
  BindHandles(m);         // LoadHandle, StoreHandle, PinHandle (kvtier_handles.cc).
  BindPagedTransfers(m);  // PagedCache, PagedLoad, PagedSave (kvtier_paged.cc).
  BindEngine(m);          // Engine (kvtier_engine.cc, with kvtier_paged.cc's methods).
  BindOptions(m);         // _ConnectArgs, _EngineArgs, _engine_options (kvtier_options.cc).
}

}  // namespace
}  // namespace kvtier::python

PYBIND11_MODULE(_kvtier, m) { kvtier::python::Bind(m); }
