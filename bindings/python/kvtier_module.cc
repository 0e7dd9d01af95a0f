// _kvtier: the Python glue over engine/engine.h. Glue only:
//   - every call that can block (Open, Lookup, Load, Store, Prefetch, Hint, Pin, waits, Flush,
//     Stats, close) runs with the GIL released: py::call_guard<py::gil_scoped_release>;
//   - arguments are converted by the type casters below while the GIL is still held: tokens
//     (a list or any integer buffer), block buffers (any C-contiguous buffer-protocol object, or a
//     host-memory DLPack object such as a torch tensor, borrowed without a copy) and the layout
//     (a string or a dict);
//   - Status becomes a Python exception in one place: ThrowIfError throws StatusError, and one
//     exception translator maps it to kvtier.Error or its subclass for the code.
//
// Buffers: Load destinations and Store sources stay borrowed (a Py_buffer view is held, which
// keeps the exporting object alive and, for numpy, unresizable) until the handle is closed or
// garbage-collected; closing waits for the copies first.
//
// Lifetime: the Python Engine holds a shared_ptr to the C++ Engine and every handle holds
// another, so the engine is torn down only after its last handle (engine.h requires handles to
// go first). Engine.close() drops the Python object's reference; later calls raise kvtier.Error.
//
// A connected Engine (kvtier.connect) holds a serve::RemoteEngine, the client of the node
// service (serve/client.h): the same Engine interface, so every method below works unchanged.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codec_params.h"
#include "core/kv_layout.h"
#include "core/logger.h"
#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/options_table.h"
#include "engine/paged_kv.h"
#include "engine/paged_transfer.h"
#include "kvtier/status.h"
#include "kvtier/version.h"
#include "kvtier_stats.h"
#include "serve/client.h"

namespace py = pybind11;

namespace kvtier::python {

// ---- Status -> exception (the one place) --------------------------------------------------------

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return status_.message().c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

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

// ---- Buffers ----------------------------------------------------------------------------------

// DLPack (v0.x, the "dltensor" capsule every framework exports): the C structs of the
// specification, declared here because Debian ships no dlpack header. Used for objects without the
// buffer protocol, such as torch tensors.
namespace dlpack {
struct Device {
  int32_t device_type;  // 1 = CPU, 3 = CUDA host (pinned) memory, 2 = CUDA, ...
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // In elements; nullptr: compact row-major.
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
constexpr int32_t kCpu = 1;
constexpr int32_t kCudaHost = 3;
constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";
}  // namespace dlpack

// A borrowed view of the bytes of a C-contiguous object: through the buffer protocol (numpy,
// memoryview, bytearray) or, failing that, DLPack (torch tensors in host memory). Created and
// destroyed with the GIL held; moving it touches no Python state, so views may be moved while the
// GIL is released.
class BufferView {
 public:
  BufferView(py::handle object, bool writable, const std::string& what) {
    if (PyObject_CheckBuffer(object.ptr()) == 0 && py::hasattr(object, "__dlpack__")) {
      FromDlpack(object, what);
      return;
    }
    const int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      const bool readable = writable && PyObject_CheckBuffer(object.ptr()) != 0;
      throw StatusError(Status::InvalidArgument(
          what + (readable ? " is read-only; a load destination must be writable"
                           : " supports neither the buffer protocol nor DLPack (" +
                                 std::string(Py_TYPE(object.ptr())->tp_name) + ")")));
    }
    held_ = true;
    data_ = static_cast<std::byte*>(view_.buf);
    size_ = static_cast<size_t>(view_.len);
    if (PyBuffer_IsContiguous(&view_, 'C') == 0) {
      Release();
      throw StatusError(Status::InvalidArgument(what + " is not C-contiguous"));
    }
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  BufferView(BufferView&& other) noexcept { Take(other); }
  BufferView& operator=(BufferView&& other) noexcept {
    if (this != &other) {
      Release();
      Take(other);
    }
    return *this;
  }
  ~BufferView() { Release(); }

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  // Takes ownership of the tensor in obj.__dlpack__()'s capsule (renaming it "used_dltensor", as
  // the protocol requires); the deleter runs in Release().
  void FromDlpack(py::handle object, const std::string& what) {
    const py::object capsule = object.attr("__dlpack__")();
    auto* managed = static_cast<dlpack::ManagedTensor*>(
        PyCapsule_GetPointer(capsule.ptr(), dlpack::kCapsuleName));
    if (managed == nullptr) {
      PyErr_Clear();
      throw StatusError(Status::InvalidArgument(what + ": __dlpack__ returned no dltensor"));
    }
    if (PyCapsule_SetName(capsule.ptr(), dlpack::kUsedCapsuleName) != 0) {
      throw py::error_already_set();
    }
    managed_ = managed;
    const dlpack::Tensor& t = managed->dl_tensor;
    if (t.device.device_type != dlpack::kCpu && t.device.device_type != dlpack::kCudaHost) {
      Release();
      throw StatusError(Status::InvalidArgument(what + " lives on DLPack device type " +
                                                std::to_string(t.device.device_type) +
                                                "; this build reads and writes host memory only"));
    }
    uint64_t elements = 1;
    int64_t expected_stride = 1;
    bool contiguous = true;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      const int64_t extent = t.shape[d];
      if (t.strides != nullptr && extent > 1 && t.strides[d] != expected_stride) {
        contiguous = false;
      }
      expected_stride *= extent;
      elements *= static_cast<uint64_t>(extent);
    }
    if (!contiguous) {
      Release();
      throw StatusError(Status::InvalidArgument(what + " is not C-contiguous"));
    }
    const uint64_t element_bits = uint64_t{t.dtype.bits} * t.dtype.lanes;
    data_ = static_cast<std::byte*>(t.data) + t.byte_offset;
    size_ = static_cast<size_t>(elements * element_bits / 8);
  }

  void Take(BufferView& other) {
    view_ = other.view_;
    held_ = other.held_;
    managed_ = other.managed_;
    data_ = other.data_;
    size_ = other.size_;
    other.held_ = false;
    other.managed_ = nullptr;
  }

  void Release() {
    if (held_) PyBuffer_Release(&view_);
    held_ = false;
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
    managed_ = nullptr;
  }

  Py_buffer view_{};
  bool held_ = false;
  dlpack::ManagedTensor* managed_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Block buffers as one object (split into blocks of the layout) or a sequence of one object per
// block, indexed [chunk * layers + layer]. kWritable: load destinations.
template <bool kWritable>
struct BlockBuffers {
  std::vector<BufferView> views;

  // The blocks, each block_bytes long. InvalidArgument for any size mismatch. No GIL needed.
  template <typename Byte>
  std::vector<std::span<Byte>> Split(uint64_t block_bytes, uint32_t layers) const {
    const char* name = kWritable ? "dst" : "src";
    std::vector<std::span<Byte>> blocks;
    if (views.size() == 1 && views[0].size() != block_bytes) {
      const size_t size = views[0].size();
      const uint64_t chunk_bytes = block_bytes * layers;
      if (size == 0 || size % chunk_bytes != 0) {
        throw StatusError(
            Status::InvalidArgument(std::string(name) + " has " + std::to_string(size) +
                                    " bytes, not a positive multiple of layers * block_bytes = " +
                                    std::to_string(chunk_bytes)));
      }
      for (size_t offset = 0; offset < size; offset += block_bytes) {
        blocks.emplace_back(views[0].data() + offset, block_bytes);
      }
      return blocks;
    }
    if (views.empty() || views.size() % layers != 0) {
      throw StatusError(Status::InvalidArgument(
          std::string(name) + " must hold a positive multiple of " + std::to_string(layers) +
          " (layers) blocks, got " + std::to_string(views.size())));
    }
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i].size() != block_bytes) {
        throw StatusError(Status::InvalidArgument(std::string(name) + "[" + std::to_string(i) +
                                                  "] has " + std::to_string(views[i].size()) +
                                                  " bytes; a block has " +
                                                  std::to_string(block_bytes)));
      }
      blocks.emplace_back(views[i].data(), block_bytes);
    }
    return blocks;
  }
};
using SrcBlocks = BlockBuffers<false>;
using DstBlocks = BlockBuffers<true>;

// Token ids: a list/tuple of ints or an integer buffer (numpy uint32 is copied with one memcpy).
struct Tokens {
  std::vector<uint32_t> values;
};

// The layout: "layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=256" or the same as a
// dict {"layers": 32, ..., "dtype": "f16"}.
struct LayoutArg {
  std::string text;
};

}  // namespace kvtier::python

namespace pybind11::detail {

template <bool kWritable>
struct type_caster<kvtier::python::BlockBuffers<kWritable>> {
  PYBIND11_TYPE_CASTER(kvtier::python::BlockBuffers<kWritable>,
                       const_name("Buffer | Sequence[Buffer]"));
  bool load(handle src, bool /*convert*/) {
    const std::string what = kWritable ? "dst" : "src";
    if (PyObject_CheckBuffer(src.ptr()) != 0 || hasattr(src, "__dlpack__")) {
      value.views.emplace_back(src, kWritable, what);
      return true;
    }
    if (PySequence_Check(src.ptr()) == 0 || PyUnicode_Check(src.ptr()) != 0) return false;
    const sequence seq = reinterpret_borrow<sequence>(src);
    value.views.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      value.views.emplace_back(seq[i], kWritable, what + "[" + std::to_string(i) + "]");
    }
    return true;
  }
};

template <>
struct type_caster<kvtier::python::Tokens> {
  PYBIND11_TYPE_CASTER(kvtier::python::Tokens, const_name("Sequence[int] | Buffer"));

  bool load(handle src, bool /*convert*/) {
    using kvtier::Status;
    using kvtier::python::StatusError;
    if (PyObject_CheckBuffer(src.ptr()) != 0) {
      Py_buffer view;
      if (PyObject_GetBuffer(src.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        throw StatusError(Status::InvalidArgument("tokens must be a C-contiguous buffer"));
      }
      const bool ok = LoadBuffer(view);
      PyBuffer_Release(&view);
      if (!ok) {
        throw StatusError(Status::InvalidArgument(
            "tokens must be integers in [0, 2^32) (an integer array or a sequence of int)"));
      }
      return true;
    }
    if (PySequence_Check(src.ptr()) == 0 || PyUnicode_Check(src.ptr()) != 0) return false;
    const sequence seq = reinterpret_borrow<sequence>(src);
    value.values.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      const object item = seq[i];
      // Any integer-like item (int, numpy integer scalars): operator.index semantics.
      const object index = reinterpret_steal<object>(PyNumber_Index(item.ptr()));
      int overflow = 0;
      const long long v = index ? PyLong_AsLongLongAndOverflow(index.ptr(), &overflow) : -1;
      if (PyErr_Occurred() != nullptr) PyErr_Clear();
      if (!index || overflow != 0 || v < 0 || v > 0xffffffffLL) {
        throw StatusError(Status::InvalidArgument("tokens[" + std::to_string(i) +
                                                  "] is not an integer in [0, 2^32)"));
      }
      value.values.push_back(static_cast<uint32_t>(v));
    }
    return true;
  }

 private:
  template <typename T>
  bool Convert(const Py_buffer& view) {
    const size_t n = static_cast<size_t>(view.len) / sizeof(T);
    const auto* items = static_cast<const T*>(view.buf);
    value.values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      T item;
      std::memcpy(&item, items + i, sizeof(T));  // Buffers need not be aligned.
      if constexpr (std::is_signed_v<T>) {
        if (item < 0) return false;
      }
      if (static_cast<unsigned long long>(item) > 0xffffffffULL) return false;
      value.values[i] = static_cast<uint32_t>(static_cast<unsigned long long>(item));
    }
    return true;
  }

  // Native-order integer formats only ("I", "=I", "<I" on little-endian, "q", ...).
  bool LoadBuffer(const Py_buffer& view) {
    std::string format = view.format != nullptr ? view.format : "B";
    if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
      format.erase(0, 1);
    }
    if (format.size() != 1) return false;
    const auto size = static_cast<size_t>(view.itemsize);
    switch (format[0]) {
      case 'B':
        return size == 1 && Convert<uint8_t>(view);
      case 'H':
        return size == 2 && Convert<uint16_t>(view);
      case 'I':
      case 'L':
        if (size == 4 && view.len % 4 == 0) {
          value.values.resize(static_cast<size_t>(view.len) / 4);
          std::memcpy(value.values.data(), view.buf, static_cast<size_t>(view.len));
          return true;
        }
        return size == 8 && Convert<uint64_t>(view);
      case 'Q':
        return size == 8 && Convert<uint64_t>(view);
      case 'b':
        return size == 1 && Convert<int8_t>(view);
      case 'h':
        return size == 2 && Convert<int16_t>(view);
      case 'i':
      case 'l':
      case 'q':
        return size == 4 ? Convert<int32_t>(view) : size == 8 && Convert<int64_t>(view);
      default:
        return false;
    }
  }
};

template <>
struct type_caster<kvtier::python::LayoutArg> {
  PYBIND11_TYPE_CASTER(kvtier::python::LayoutArg, const_name("str | dict[str, int | str]"));

  bool load(handle src, bool /*convert*/) {
    if (PyUnicode_Check(src.ptr()) != 0) {
      value.text = src.cast<std::string>();
      return true;
    }
    if (PyDict_Check(src.ptr()) == 0) return false;
    std::string text;
    for (const auto& [key, item] : reinterpret_borrow<dict>(src)) {
      if (!text.empty()) text += ',';
      text += str(key).cast<std::string>() + "=" + str(item).cast<std::string>();
    }
    value.text = std::move(text);
    return true;
  }
};

}  // namespace pybind11::detail

namespace kvtier::python {

// Runs `fn` with the GIL released when it is held (destructors run from Python's deallocation,
// with the GIL; waiting for copies there must not stall other Python threads).
template <typename Fn>
void WithoutGil(Fn&& fn) {
  if (PyGILState_Check() != 0) {
    py::gil_scoped_release release;
    fn();
  } else {
    fn();
  }
}

// WithoutGil for destructors, which must not throw. Should dropping the GIL or taking a lock fail
// (only in a process that is already broken), the members' own destructors still release
// everything, holding the GIL while they wait.
template <typename Fn>
void DestroyWithoutGil(Fn&& fn) {
  try {
    WithoutGil(std::forward<Fn>(fn));
  } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to report to from a destructor.
  }
}

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

class PyEngine {
 public:
  explicit PyEngine(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {
    const EngineOptions& options = engine_->options();
    layout_ = options.layout;
  }
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;
  ~PyEngine() {
    DestroyWithoutGil([this] { Close(); });
  }

  // A reference to the open engine; Aborted after close().
  std::shared_ptr<Engine> Get() const KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (!engine_) throw StatusError(Status::Aborted("the engine is closed"));
    return engine_;
  }
  void Close() KV_EXCLUDES(mu_) {
    std::shared_ptr<Engine> engine;
    {
      MutexLock lock(&mu_);
      engine.swap(engine_);
    }
    // Destroyed here, outside the lock (or later, with the last handle).
  }
  bool closed() const KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return engine_ == nullptr;
  }
  const KvLayout& layout() const { return layout_; }

 private:
  mutable Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  KvLayout layout_;  // Immutable copy: readable after close.
};

// A Load in flight. Methods serialize on mu_ (one may block in a wait); close() waits, then drops
// the destination views.
class PyLoad {
 public:
  PyLoad(std::shared_ptr<Engine> engine, std::unique_ptr<LoadHandle> handle,
         std::vector<BufferView> views, uint32_t layers)
      : engine_(std::move(engine)),
        handle_(std::move(handle)),
        views_(std::move(views)),
        layers_(layers) {}
  ~PyLoad() {
    DestroyWithoutGil([this] { ResetHandle(); });
  }

  void WaitLayer(uint32_t layer) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (layer >= layers_) {
      throw StatusError(Status::InvalidArgument("layer " + std::to_string(layer) +
                                                " is out of range (layers " +
                                                std::to_string(layers_) + ")"));
    }
    ThrowIfError(Handle()->WaitLayer(layer));
  }
  bool LayerReady(uint32_t layer) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return layer < layers_ && Handle()->LayerReady(layer);
  }
  void Wait() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Handle()->Wait());
  }
  size_t chunks() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Handle()->chunks();
  }
  // Called with the GIL released: waits for copies and releases the engine reference.
  void ResetHandle() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    handle_.reset();
    engine_.reset();
  }
  // Called with the GIL held, after ResetHandle.
  void DropViews() { views_.clear(); }

 private:
  LoadHandle* Handle() KV_REQUIRES(mu_) {
    if (!handle_) throw StatusError(Status::Aborted("the load handle is closed"));
    return handle_.get();
  }

  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);  // Before handle_: destroyed after it.
  std::unique_ptr<LoadHandle> handle_ KV_GUARDED_BY(mu_);
  std::vector<BufferView> views_;  // Touched only with the GIL held.
  const uint32_t layers_;
};

class PyStore {
 public:
  PyStore(std::shared_ptr<Engine> engine, std::unique_ptr<StoreHandle> handle,
          std::vector<BufferView> views)
      : engine_(std::move(engine)), handle_(std::move(handle)), views_(std::move(views)) {}
  ~PyStore() {
    DestroyWithoutGil([this] { ResetHandle(); });
  }

  void Wait() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Handle()->Wait());
  }
  size_t chunks_stored() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Handle()->chunks_stored();
  }
  void ResetHandle() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    handle_.reset();
    engine_.reset();
  }
  void DropViews() { views_.clear(); }

 private:
  StoreHandle* Handle() KV_REQUIRES(mu_) {
    if (!handle_) throw StatusError(Status::Aborted("the store handle is closed"));
    return handle_.get();
  }

  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  std::unique_ptr<StoreHandle> handle_ KV_GUARDED_BY(mu_);
  std::vector<BufferView> views_;
};

// An inference engine's paged KV cache (engine/paged_transfer.h): its layers' addresses and
// geometry, checked against the engine's layout when made. Holds the layer tensors (the Python
// objects) so their memory lives as long as this object and every load or save made from it.
class PyPagedCache {
 public:
  PyPagedCache(std::shared_ptr<const PagedKvCache> cache, py::list owners)
      : cache_(std::move(cache)), owners_(std::move(owners)) {}
  const std::shared_ptr<const PagedKvCache>& cache() const { return cache_; }
  std::string layout_name() const {
    return PagedLayoutName(cache_->layer(0).geometry.kind);
  }
  uint32_t page_tokens() const { return cache_->page_tokens(); }
  uint64_t pages() const { return cache_->layer(0).pages; }
  const py::list& owners() const { return owners_; }

 private:
  std::shared_ptr<const PagedKvCache> cache_;
  py::list owners_;  // Touched only with the GIL held.
};

// A PagedLoad in flight. Methods serialize on mu_ and run without the GIL.
class PyPagedLoad {
 public:
  PyPagedLoad(std::shared_ptr<Engine> engine, std::unique_ptr<PagedLoad> load, py::list owners)
      : engine_(std::move(engine)), load_(std::move(load)), owners_(std::move(owners)) {}
  ~PyPagedLoad() {
    DestroyWithoutGil([this] { Reset(); });
  }
  void WaitLayer(uint32_t layer) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Get()->WaitLayer(layer));
  }
  void Wait() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Get()->Wait());
  }
  uint64_t bytes_scattered() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Get()->bytes_scattered();
  }
  void Reset() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    load_.reset();
    engine_.reset();
  }

 private:
  PagedLoad* Get() KV_REQUIRES(mu_) {
    if (!load_) throw StatusError(Status::Aborted("the paged load is closed"));
    return load_.get();
  }
  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);  // Before load_: destroyed after it.
  std::unique_ptr<PagedLoad> load_ KV_GUARDED_BY(mu_);
  py::list owners_;  // The page tensors; touched only with the GIL held.
};

// A PagedSave: gather layer by layer, commit, then poll or wait for the store.
class PyPagedSave {
 public:
  PyPagedSave(std::shared_ptr<Engine> engine, std::unique_ptr<PagedSave> save, py::list owners)
      : engine_(std::move(engine)), save_(std::move(save)), owners_(std::move(owners)) {}
  ~PyPagedSave() {
    DestroyWithoutGil([this] { Reset(); });
  }
  void GatherLayer(uint32_t layer) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Get()->GatherLayer(layer));
  }
  void Commit(const Namespace& ns, const Tokens& tokens, BlockPriority priority,
              uint64_t ttl_ms) KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Get()->Commit(*engine_, ns, tokens.values,
                               StoreOptions{.priority = priority, .ttl_ms = ttl_ms}));
  }
  bool Done() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Get()->Done();
  }
  void Wait() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ThrowIfError(Get()->Wait());
  }
  size_t chunks_stored() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Get()->chunks_stored();
  }
  uint64_t bytes_gathered() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return Get()->bytes_gathered();
  }
  void Reset() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    save_.reset();
    engine_.reset();
  }

 private:
  PagedSave* Get() KV_REQUIRES(mu_) {
    if (!save_) throw StatusError(Status::Aborted("the paged save is closed"));
    return save_.get();
  }
  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  std::unique_ptr<PagedSave> save_ KV_GUARDED_BY(mu_);
  py::list owners_;
};

class PyPin {
 public:
  PyPin(std::shared_ptr<Engine> engine, PinHandle pin)
      : engine_(std::move(engine)), pin_(std::move(pin)), chunks_(pin_.chunks()) {}
  ~PyPin() {
    DestroyWithoutGil([this] { Release(); });
  }
  void Release() KV_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    pin_ = PinHandle();
    engine_.reset();
  }
  size_t chunks() const { return chunks_; }

 private:
  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  PinHandle pin_ KV_GUARDED_BY(mu_);
  const size_t chunks_;
};

// Engine's keyword arguments: the layout, the digest and the key material (each converted here),
// and every other option of the table (engine/options_table.h), converted by SetEngineOption.
struct EngineArgs {
  LayoutArg layout;
  std::string weights_digest;
  std::string ssd_key_file, ssd_key_env;  // Keys sealing SSD records: a file or a variable.
  std::string remote_key_file, remote_key_env;  // Deployment keys of the remote tier.
  std::vector<std::pair<const OptionSpec*, OptionValue>> settings;  // In the table's order.
};

// kvtier.connect's arguments (kvtier/__init__.py checks and documents them).
struct ConnectArgs {
  std::string socket, token, name;
  std::optional<LayoutArg> layout;
  uint32_t timeout_ms = 10000;
  uint32_t reconnect_interval_ms = 1000;
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
    } else if (spec.set == nullptr) {  // Key material.
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
    KV_ASSIGN_OR_RETURN(*out, RemoteKeyring::LoadFile(file));
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
  if (o.ssd.has_value()) {
    KV_RETURN_IF_ERROR(LoadKeys(a.ssd_key_file, a.ssd_key_env, "ssd", &o.ssd->keyring));
  }
  if (o.remote.has_value()) {
    KV_RETURN_IF_ERROR(
        LoadKeys(a.remote_key_file, a.remote_key_env, "remote", &o.remote->redis->keyring));
  }
  return o;
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

using NoGil = py::call_guard<py::gil_scoped_release>;

void Bind(py::module_& m) {
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

  BindStats(m);  // TierStats, EngineStats, _stats_fields (kvtier_stats.cc).

  py::class_<PyLoad>(m, "LoadHandle",
                     "A load in flight; wait_layer(i) returns once layer i is in place.")
      .def("wait_layer", &PyLoad::WaitLayer, py::arg("layer"), NoGil(),
           "Blocks until layer `layer` of every loaded chunk is in dst; raises on a failed load.")
      .def("layer_ready", &PyLoad::LayerReady, py::arg("layer"), NoGil(),
           "True once layer `layer` is in dst (does not block).")
      .def("wait", &PyLoad::Wait, NoGil(), "Blocks until every layer is in dst.")
      .def_property_readonly("chunks", &PyLoad::chunks, NoGil(), "Chunks this load brings.")
      .def("close",
           [](PyLoad& self) {
             WithoutGil([&] { self.ResetHandle(); });
             self.DropViews();
           },
           "Waits for the load and releases dst (also on leaving a with block).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyLoad& self, const py::args&) {
        WithoutGil([&] { self.ResetHandle(); });
        self.DropViews();
      });

  py::class_<PyStore>(m, "StoreHandle", "A store in flight; wait() returns once it is visible.")
      .def("wait", &PyStore::Wait, NoGil(),
           "Blocks until the chunks are visible to lookups; src may be reused afterwards.")
      .def_property_readonly("chunks_stored", &PyStore::chunks_stored, NoGil(),
                             "Chunks the engine newly took (those it had are skipped).")
      .def("close",
           [](PyStore& self) {
             WithoutGil([&] { self.ResetHandle(); });
             self.DropViews();
           },
           "Waits for the store and releases src (also on leaving a with block).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStore& self, const py::args&) {
        WithoutGil([&] { self.ResetHandle(); });
        self.DropViews();
      });

  py::class_<PyPagedCache>(m, "PagedCache",
                           "An inference engine's paged KV cache, as kvtier reads and writes it "
                           "(Engine.paged_cache).")
      .def_property_readonly("layout", &PyPagedCache::layout_name, "The page layout's name.")
      .def_property_readonly("page_tokens", &PyPagedCache::page_tokens, "Tokens per page.")
      .def_property_readonly("pages", &PyPagedCache::pages, "Pages per layer.")
      .def(
          "warm_staging",
          [](const PyPagedCache& self, size_t bytes) {
            ThrowIfError(self.cache()->WarmStaging(bytes));
          },
          py::arg("bytes"), NoGil(),
          "Allocates and touches a staging buffer now, so the first load does not fault it in.");

  py::class_<PyPagedLoad>(m, "PagedLoad",
                          "A load into pages in flight; wait_layer(i) returns once layer i is in "
                          "the pages.")
      .def("wait_layer", &PyPagedLoad::WaitLayer, py::arg("layer"), NoGil(),
           "Blocks until layer `layer` is scattered into the pages; raises on a failed load.")
      .def("wait", &PyPagedLoad::Wait, NoGil(), "Blocks until every layer is in the pages.")
      .def_property_readonly("bytes_scattered", &PyPagedLoad::bytes_scattered, NoGil(),
                             "Bytes written into the pages so far.")
      .def("close", &PyPagedLoad::Reset, NoGil(), "Waits for the load and releases it.");

  py::class_<PyPagedSave>(m, "PagedSave",
                          "A save out of pages: gather_layer(i) per layer, commit(ns, tokens), "
                          "then done() or wait().")
      .def("gather_layer", &PyPagedSave::GatherLayer, py::arg("layer"), NoGil(),
           "Copies layer `layer` of the chosen pages into staging (call once per layer).")
      .def("commit", &PyPagedSave::Commit, py::arg("ns"), py::arg("tokens"),
           py::arg("priority") = BlockPriority::kNormal, py::arg("ttl_ms") = 0, NoGil(),
           "Stores the gathered chunks under (ns, tokens); raises Busy when memory is full.")
      .def("done", &PyPagedSave::Done, NoGil(), "True once the committed store is visible.")
      .def("wait", &PyPagedSave::Wait, NoGil(), "Blocks until the committed store is visible.")
      .def_property_readonly("chunks_stored", &PyPagedSave::chunks_stored, NoGil(),
                             "Chunks the engine newly took.")
      .def_property_readonly("bytes_gathered", &PyPagedSave::bytes_gathered, NoGil(),
                             "Bytes copied out of the pages.")
      .def("close", &PyPagedSave::Reset, NoGil(), "Waits for the save and releases it.");

  py::class_<PyPin>(m, "PinHandle", "Keeps chunks resident in memory until released.")
      .def_property_readonly("chunks", &PyPin::chunks, "Chunks held in memory.")
      .def("release", &PyPin::Release, NoGil(),
           "Lets the chunks be evicted again (also on leaving a with block).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyPin& self, const py::args&) { WithoutGil([&] { self.Release(); }); });

  py::class_<PyEngine>(m, "Engine")
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
          NoGil(), "A connected engine: the service's state and its engine's stats, as JSON.")
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
      .def_property_readonly("closed", &PyEngine::closed, "True after close().")
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
          "StoreHandle. Raises Busy when memory is pinned or being written back.")
      .def(
          "paged_cache",
          [](PyEngine& self, const std::string& backend, const py::list& layers) {
            // Each layer: (owner, data_ptr, bytes, shape, strides, elem_bytes). The owner (the
            // tensor) is kept alive with the cache; data_ptr and bytes must describe its memory.
            std::vector<PagedLayer> described;
            py::list owners;
            for (const py::handle item : layers) {
              const py::tuple t = py::reinterpret_borrow<py::tuple>(item);
              if (t.size() != 6) {
                throw StatusError(Status::InvalidArgument(
                    "paged_cache layers are (tensor, data_ptr, bytes, shape, strides, elem_bytes)"));
              }
              PagedTensor tensor;
              tensor.data = reinterpret_cast<std::byte*>(t[1].cast<uintptr_t>());
              tensor.bytes = t[2].cast<uint64_t>();
              tensor.shape = t[3].cast<std::vector<int64_t>>();
              tensor.strides = t[4].cast<std::vector<int64_t>>();
              tensor.elem_bytes = t[5].cast<uint32_t>();
              const KvLayout& layout = self.layout();
              Result<PagedLayer> layer =
                  DescribePagedLayer(backend, tensor, layout.kv_heads, layout.head_dim);
              if (!layer.ok()) {
                throw StatusError(Status::InvalidArgument(
                    "layer " + std::to_string(described.size()) + ": " + layer.status().message()));
              }
              described.push_back(*layer);
              owners.append(t[0]);
            }
            // A service client's staging region makes loads and saves zero-copy.
            std::shared_ptr<const PagedKvCache> cache = ValueOrThrow(PagedKvCache::Create(
                std::move(described), self.layout(), self.Get()->staging_source()));
            return std::make_unique<PyPagedCache>(std::move(cache), std::move(owners));
          },
          py::arg("backend"), py::arg("layers"),
          "Describes an inference engine's paged KV tensors, one per layer (backend: the "
          "attention backend's layout name), for load_pages and save_pages.")
      .def(
          "load_pages",
          [](PyEngine& self, const Namespace& ns, const Tokens& tokens, const PyPagedCache& cache,
             std::vector<int32_t> pages, size_t first_chunk, size_t chunks) {
            std::shared_ptr<Engine> engine = self.Get();
            std::unique_ptr<PagedLoad> load;
            {
              py::gil_scoped_release release;
              load = ValueOrThrow(PagedLoad::Start(*engine, cache.cache(), ns, tokens.values,
                                                   std::move(pages), first_chunk, chunks));
            }
            return std::make_unique<PyPagedLoad>(std::move(engine), std::move(load),
                                                 cache.owners());
          },
          py::arg("ns"), py::arg("tokens"), py::arg("cache"), py::arg("pages"),
          py::arg("first_chunk"), py::arg("chunks"),
          "Starts loading chunks [first_chunk, first_chunk + chunks) of `tokens` into `pages` "
          "of the paged cache; returns a PagedLoad.")
      .def(
          "save_pages",
          [](PyEngine& self, const PyPagedCache& cache, std::vector<int32_t> pages, size_t chunks,
             size_t first_chunk) {
            std::shared_ptr<Engine> engine = self.Get();
            std::unique_ptr<PagedSave> save;
            {
              py::gil_scoped_release release;
              save = ValueOrThrow(
                  PagedSave::Create(cache.cache(), std::move(pages), chunks, first_chunk));
            }
            return std::make_unique<PyPagedSave>(std::move(engine), std::move(save),
                                                 cache.owners());
          },
          py::arg("cache"), py::arg("pages"), py::arg("chunks"), py::arg("first_chunk") = 0,
          "Prepares a save of `chunks` chunks out of `pages`, skipping the first first_chunk "
          "(already cached); returns a PagedSave.")
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

  py::class_<EngineArgs>(m, "_EngineArgs")
      .def(py::init([](const py::kwargs& kwargs) { return ToEngineArgs(kwargs); }));

  // The options table's Python rows, for the keyword checks and the docstring in kvtier/__init__.
  m.def("_engine_options", [] {
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
  });
}

}  // namespace kvtier::python

PYBIND11_MODULE(_kvtier, m) { kvtier::python::Bind(m); }
