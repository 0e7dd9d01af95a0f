// The internal header of _kvtier, the Python glue over engine/engine.h: the types and helpers its
// files share, and the Bind functions each file registers its part of the module with. Glue only:
//   - every call that can block (Open, Lookup, Load, Store, Prefetch, Hint, Pin, waits, Flush,
//     Stats, close) runs with the GIL released: py::call_guard<py::gil_scoped_release>;
//   - arguments are converted by the type casters below while the GIL is still held: tokens
//     (a list or any integer buffer), block buffers (any C-contiguous buffer-protocol object, or a
//     host-memory DLPack object such as a torch tensor, borrowed without a copy) and the layout
//     (a string or a dict);
//   - Status becomes a Python exception in one place: ThrowIfError throws StatusError, and one
//     exception translator (kvtier_module.cc) maps it to kvtier.Error or its subclass for the code.
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
// service (serve/client.h): the same Engine interface, so every method works unchanged.
//
// The files, by topic:
//   kvtier_module.cc   the module: its exception classes, functions and enums, and the order in
//                      which the others register their classes (a class before its uses);
//   kvtier_buffers.cc  BufferView and the Tokens and LayoutArg casters declared here;
//   kvtier_engine.cc   Engine (open, connect, namespaces, lookup, load, store, prefetch, hint,
//                      pin, flush), Namespace and LookupResult;
//   kvtier_handles.cc  LoadHandle, StoreHandle and PinHandle (kvtier_handles.h);
//   kvtier_paged.cc    the paged transfers of the vLLM connector: PagedCache, PagedLoad,
//                      PagedSave and Engine's paged_cache, load_pages and save_pages;
//   kvtier_options.cc  Engine's and connect's arguments, and the options table's Python rows;
//   kvtier_stats.cc    EngineStats, TierStats and _stats_fields (kvtier_stats.h).
//
// Thread safety: Bind* run once, while the module is imported. The classes say what they need.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/options_table.h"
#include "kvtier/status.h"

namespace kvtier::python {

namespace py = pybind11;

// ---- Status -> exception ------------------------------------------------------------------------

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return status_.message().c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

// ---- Buffers (kvtier_buffers.cc) --------------------------------------------------------------

namespace dlpack {
struct ManagedTensor;
}  // namespace dlpack

// A borrowed view of the bytes of a C-contiguous object: through the buffer protocol (numpy,
// memoryview, bytearray) or, failing that, DLPack (torch tensors in host memory). Created and
// destroyed with the GIL held; moving it touches no Python state, so views may be moved while the
// GIL is released.
class BufferView {
 public:
  BufferView(py::handle object, bool writable, const std::string& what);
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
  void FromDlpack(py::handle object, const std::string& what);
  void Take(BufferView& other);
  void Release();

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
  bool load(handle src, bool convert);

 private:
  template <typename T>
  bool Convert(const Py_buffer& view);
  // Native-order integer formats only ("I", "=I", "<I" on little-endian, "q", ...).
  bool LoadBuffer(const Py_buffer& view);
};

template <>
struct type_caster<kvtier::python::LayoutArg> {
  PYBIND11_TYPE_CASTER(kvtier::python::LayoutArg, const_name("str | dict[str, int | str]"));
  bool load(handle src, bool convert);
};

}  // namespace pybind11::detail

namespace kvtier::python {

// ---- The GIL ------------------------------------------------------------------------------------

using NoGil = py::call_guard<py::gil_scoped_release>;

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

// ---- The engine ---------------------------------------------------------------------------------

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

// ---- Arguments (kvtier_options.cc) --------------------------------------------------------------

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

// The engine's options from Engine's arguments, reading the key material they name.
Result<EngineOptions> ToOptions(const EngineArgs& a);

// ---- Registration, in the order kvtier_module.cc calls them -------------------------------------

// Namespace and LookupResult (kvtier_engine.cc).
void BindEngineTypes(py::module_& m);
// LoadHandle, StoreHandle and PinHandle (kvtier_handles.cc).
void BindHandles(py::module_& m);
// PagedCache, PagedLoad and PagedSave (kvtier_paged.cc).
void BindPagedTransfers(py::module_& m);
// Engine (kvtier_engine.cc), after every class its methods return.
void BindEngine(py::module_& m);
// Engine's paged_cache, load_pages and save_pages (kvtier_paged.cc), called by BindEngine.
void DefPagedMethods(py::class_<PyEngine>& engine);
// _ConnectArgs, _EngineArgs and _engine_options (kvtier_options.cc).
void BindOptions(py::module_& m);

}  // namespace kvtier::python
