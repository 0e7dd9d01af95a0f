// The Engine of the Python module (kvtier_module.h): opening one in this process or connecting
// to a node service, its layout, namespaces, lookup, load, store, prefetch, hint, pin, flush,
// stats and close; and the value types of its calls, Namespace and LookupResult. Engine's paged
// methods are in kvtier_paged.cc, its handles in kvtier_handles.cc, the conversion of its
// arguments in kvtier_options.cc.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "core/logger.h"
#include "engine/engine.h"
#include "kvtier_handles.h"
#include "kvtier_module.h"
#include "serve/client.h"

namespace kvtier::python {
namespace {

// Forwards the engine's log lines to Python's logging module (the logger named "kvtier"), taking
// the GIL: a dead Redis, a direct-I/O fallback or an mlock refusal reaches the application's
// logging configuration. Lines logged while the interpreter is finalizing are dropped.
class PythonLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message) override {
    if (Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0) return;
    py::gil_scoped_acquire gil;
    try {
      constexpr int kPythonLevels[] = {10, 20, 30, 40};  // DEBUG, INFO, WARNING, ERROR.
      py::module_::import("logging")
          .attr("getLogger")("kvtier")
          .attr("log")(kPythonLevels[static_cast<int>(level)], std::string(message));
    } catch (const py::error_already_set&) {  // A broken handler must not break the engine.
      PyErr_Clear();
    }
  }
};

// The client of the node service the arguments name; the logger is borrowed by the client.
Result<std::unique_ptr<serve::RemoteEngine>> ConnectEngine(const ConnectArgs& a, Logger* logger) {
  serve::ClientOptions o;
  o.socket_path = a.socket;
  o.token = a.token;
  o.name = a.name;
  if (a.layout.has_value()) {
    KV_ASSIGN_OR_RETURN(o.layout, ParseLayout(a.layout->text));
  }
  o.timeout_ms = a.timeout_ms;
  o.reconnect_interval_ms = a.reconnect_interval_ms;
  o.logger = logger;
  return serve::Connect(o);
}

// The engine's service client; NotSupported for an engine of this process.
serve::RemoteEngine* AsRemote(const std::shared_ptr<Engine>& engine) {
  auto* remote = dynamic_cast<serve::RemoteEngine*>(engine.get());
  if (remote == nullptr) {
    throw StatusError(Status::NotSupported("this engine is not connected to a kvtier service "
                                           "(kvtier.connect)"));
  }
  return remote;
}

Namespace ToNamespace(const py::bytes& digest) {
  const std::string bytes = digest;
  Namespace ns;
  if (bytes.size() != ns.digest.size()) {
    throw StatusError(Status::InvalidArgument("a namespace digest has 32 bytes, got " +
                                              std::to_string(bytes.size())));
  }
  std::memcpy(ns.digest.data(), bytes.data(), ns.digest.size());
  return ns;
}

std::string DigestBytes(const Namespace& ns) {
  return std::string(reinterpret_cast<const char*>(ns.digest.data()), ns.digest.size());
}

std::string NumpyDtype(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "uint16";  // numpy has no bfloat16: the bits travel as uint16.
    case DType::kF32:
      return "float32";
  }
  return "uint8";
}

using EngineClass = py::class_<PyEngine>;

// The constructors (open in this process, or connect to a service) and a connected engine's
// view of its service.
void DefOpen(EngineClass& cls) {
  cls
      .def(py::init([](const EngineArgs& args) {
             EngineOptions options = ValueOrThrow(ToOptions(args));
             // The logger outlives the engine: the engine's deleter owns it.
             auto logger = std::make_shared<PythonLogger>();
             options.logger = logger.get();
             std::unique_ptr<Engine> engine = ValueOrThrow(Engine::Open(options));
             std::shared_ptr<Engine> shared(engine.release(), [logger](Engine* e) { delete e; });
             return std::make_unique<PyEngine>(std::move(shared));
           }),
           py::arg("args"), NoGil())
      .def(py::init([](const ConnectArgs& args) {
             auto logger = std::make_shared<PythonLogger>();
             std::unique_ptr<serve::RemoteEngine> remote =
                 ValueOrThrow(ConnectEngine(args, logger.get()));
             std::shared_ptr<Engine> shared(remote.release(), [logger](Engine* e) { delete e; });
             return std::make_unique<PyEngine>(std::move(shared));
           }),
           py::arg("args"), NoGil())
      .def_property_readonly(
          "connected",
          [](PyEngine& self) { return AsRemote(self.Get())->State().connected; }, NoGil(),
          "A connected engine (kvtier.connect): whether the service answers now.")
      .def(
          "connection_state",
          [](PyEngine& self) {
            serve::ClientState st;
            {
              py::gil_scoped_release release;
              st = AsRemote(self.Get())->State();
            }
            py::dict out;
            out["connected"] = st.connected;
            out["connects"] = st.connects;
            out["disconnects"] = st.disconnects;
            out["failed_requests"] = st.failed_requests;
            out["copied_bytes"] = st.copied_bytes;
            return out;
          },
          "A connected engine's view of its service: connected, connects, disconnects, "
          "failed_requests, copied_bytes.")
      .def(
          "service_stats_json",
          [](PyEngine& self) { return ValueOrThrow(AsRemote(self.Get())->ServiceStatsJson()); },
          NoGil(), "A connected engine: the service's state and its engine's stats, as JSON.");
}

// The layout's properties, readable after close.
void DefLayout(EngineClass& cls) {
  cls
      .def_property_readonly(
          "layout", [](const PyEngine& e) { return e.layout().ToString(); },
          "The KV layout, as text (layers=..,kv_heads=..,head_dim=..,dtype=..,block_tokens=..).")
      .def_property_readonly(
          "layers", [](const PyEngine& e) { return e.layout().layers; }, "Layers per chunk.")
      .def_property_readonly("block_tokens",
                             [](const PyEngine& e) { return e.layout().block_tokens; },
                             "Tokens per chunk.")
      .def_property_readonly("block_bytes",
                             [](const PyEngine& e) { return e.layout().BlockBytes(); },
                             "Bytes of one block (one layer of one chunk: K and V, or the "
                             "latent plane of a kind=latent layout).")
      .def_property_readonly("block_shape",
                             [](const PyEngine& e) {
                               const KvLayout& l = e.layout();
                               return py::make_tuple(l.Planes(), l.block_tokens, l.kv_heads,
                                                     l.head_dim);
                             },
                             "A block's array shape: (2, block_tokens, kv_heads, head_dim), or "
                             "(1, block_tokens, 1, head_dim) for a kind=latent layout.")
      .def_property_readonly("numpy_dtype",
                             [](const PyEngine& e) { return NumpyDtype(e.layout().dtype); },
                             "The numpy dtype of a block's elements.")
      .def_property_readonly("closed", &PyEngine::closed, "True after close().");
}

// Namespaces, lookup, and loads and stores of block buffers.
void DefCache(EngineClass& cls) {
  cls
      .def(
          "make_namespace",
          [](PyEngine& self, const std::string& salt, const std::vector<std::string>& extra_keys) {
            return ValueOrThrow(self.Get()->MakeNamespace(salt, extra_keys));
          },
          py::arg("salt") = std::string(), py::arg("extra_keys") = std::vector<std::string>(),
          NoGil(),
          "A tenant's key namespace: model, layout, salt and extra keys (LoRA id, ...) hashed.")
      .def(
          "lookup",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens, uint64_t session_id) {
            return ValueOrThrow(
                self.Get()->Lookup(ns, tokens.values, LookupOptions{.session_id = session_id}));
          },
          py::arg("ns"), py::arg("tokens"), py::arg("session_id") = 0, NoGil(),
          "How many leading chunks of `tokens` the cache holds, and in which tiers.")
      .def(
          "load",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens, DstBlocks& dst) {
            std::shared_ptr<Engine> engine = self.Get();
            const KvLayout& layout = self.layout();
            const std::vector<std::span<std::byte>> blocks =
                dst.Split<std::byte>(layout.BlockBytes(), layout.layers);
            std::unique_ptr<LoadHandle> handle =
                ValueOrThrow(engine->Load(ns, tokens.values, blocks));
            return std::make_unique<PyLoad>(std::move(engine), std::move(handle),
                                            std::move(dst.views), layout.layers);
          },
          py::arg("ns"), py::arg("tokens"), py::arg("dst"), NoGil(),
          "Starts loading the chunks of `tokens` into dst (chunks x layers blocks); returns a "
          "LoadHandle whose wait_layer(i) returns once layer i is in place.")
      .def(
          "store",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens, SrcBlocks& src,
             BlockPriority priority, uint64_t ttl_ms) {
            std::shared_ptr<Engine> engine = self.Get();
            const KvLayout& layout = self.layout();
            const std::vector<std::span<const std::byte>> blocks =
                src.Split<const std::byte>(layout.BlockBytes(), layout.layers);
            std::unique_ptr<StoreHandle> handle = ValueOrThrow(engine->Store(
                ns, tokens.values, blocks, StoreOptions{.priority = priority, .ttl_ms = ttl_ms}));
            return std::make_unique<PyStore>(std::move(engine), std::move(handle),
                                             std::move(src.views));
          },
          py::arg("ns"), py::arg("tokens"), py::arg("src"),
          py::arg("priority") = BlockPriority::kNormal, py::arg("ttl_ms") = 0, NoGil(),
          "Starts storing src (chunks x layers blocks) under the chunks of `tokens`; returns a "
          "StoreHandle. Raises Busy when memory is pinned or being written back.");
}

// Prefetch, hint, pin, flush, the counters and close.
void DefMaintenance(EngineClass& cls) {
  cls
      .def(
          "prefetch",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens) {
            ThrowIfError(self.Get()->Prefetch(ns, tokens.values));
          },
          py::arg("ns"), py::arg("tokens"), NoGil(),
          "Brings the cached chunks of `tokens` up to memory ahead of a load (no wait).")
      .def(
          "hint",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens, uint64_t session_id) {
            ThrowIfError(self.Get()->Hint(ns, tokens.values, session_id));
          },
          py::arg("ns"), py::arg("tokens"), py::arg("session_id") = 0, NoGil(),
          "Says session `session_id` will ask for `tokens` soon: their cached prefix is promoted "
          "to memory in the background (no wait).")
      .def(
          "pin",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens) {
            std::shared_ptr<Engine> engine = self.Get();
            PinHandle pin = ValueOrThrow(engine->Pin(ns, tokens.values));
            return std::make_unique<PyPin>(std::move(engine), std::move(pin));
          },
          py::arg("ns"), py::arg("tokens"), NoGil(),
          "Keeps the cached chunks of `tokens` in memory until the PinHandle is released.")
      .def(
          "flush", [](PyEngine& self) { ThrowIfError(self.Get()->Flush()); }, NoGil(),
          "Writes every dirty block down to the SSD (and remote) tier and syncs it.")
      .def(
          "stats", [](PyEngine& self) { return self.Get()->Stats(); }, NoGil(),
          "A snapshot of the engine's counters (EngineStats).")
      .def(
          "metrics_text", [](PyEngine& self) { return self.Get()->MetricsText(); }, NoGil(),
          "The engine's counters in the Prometheus text exposition format.")
      .def("close", &PyEngine::Close, NoGil(),
           "Closes the engine (flushing dirty blocks); later calls raise. Also on leaving a with "
           "block.");
}

}  // namespace

void BindEngineTypes(py::module_& m) {
  py::class_<Namespace>(m, "Namespace", "A tenant's key namespace (a 32-byte digest).")
      .def(py::init([](const py::bytes& digest) { return ToNamespace(digest); }), py::arg("digest"))
      .def_property_readonly("digest",
                             [](const Namespace& ns) { return py::bytes(DigestBytes(ns)); })
      .def("__eq__", [](const Namespace& a, const Namespace& b) { return a.digest == b.digest; })
      .def("__hash__", [](const Namespace& ns) { return py::hash(py::bytes(DigestBytes(ns))); })
      .def("__repr__", [](const Namespace& ns) {
        static constexpr char kHex[] = "0123456789abcdef";
        std::string hex;
        for (size_t i = 0; i < 8; ++i) {
          hex += kHex[ns.digest[i] >> 4];
          hex += kHex[ns.digest[i] & 15];
        }
        return "<kvtier.Namespace " + hex + "...>";
      });

  py::class_<LookupResult>(m, "LookupResult")
      .def_readonly("matched_tokens", &LookupResult::matched_tokens,
                    "Leading tokens whose chunks are cached in every layer (whole chunks).")
      .def_readonly("chunk_tiers", &LookupResult::chunk_tiers,
                    "The fastest tier of each matched chunk.")
      .def("__repr__", [](const LookupResult& r) {
        return "<kvtier.LookupResult matched_tokens=" + std::to_string(r.matched_tokens) + ">";
      });
}

void BindEngine(py::module_& m) {
  EngineClass engine(m, "Engine");
  DefOpen(engine);
  DefLayout(engine);
  DefCache(engine);
  DefPagedMethods(engine);
  DefMaintenance(engine);
}

}  // namespace kvtier::python
