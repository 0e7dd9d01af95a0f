// The paged transfers of the Python module (kvtier_module.h), what the vLLM connector
// (kvtier/vllm.py) moves KV with: PagedCache, an inference engine's paged KV cache as
// engine/paged_transfer.h describes it (its staging buffers included); PagedLoad, chunks
// scattered into pages layer by layer; PagedSave, pages gathered layer by layer and committed as
// a store; and Engine's paged_cache, load_pages and save_pages, which make them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/paged_kv.h"
#include "engine/paged_transfer.h"
#include "kvtier_module.h"

namespace kvtier::python {
namespace {

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

// Engine.paged_cache, with the GIL held. Each layer: (owner, data_ptr, bytes, shape, strides,
// elem_bytes). The owner (the tensor) is kept alive with the cache; data_ptr and bytes must
// describe its memory.
std::unique_ptr<PyPagedCache> MakePagedCache(PyEngine& self, const std::string& backend,
                                             const py::list& layers) {
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
}

// Engine.load_pages: the load starts with the GIL released.
std::unique_ptr<PyPagedLoad> LoadPages(PyEngine& self, const Namespace& ns, const Tokens& tokens,
                                       const PyPagedCache& cache, std::vector<int32_t> pages,
                                       size_t first_chunk, size_t chunks) {
  std::shared_ptr<Engine> engine = self.Get();
  std::unique_ptr<PagedLoad> load;
  {
    py::gil_scoped_release release;
    load = ValueOrThrow(PagedLoad::Start(*engine, cache.cache(), ns, tokens.values,
                                         std::move(pages), first_chunk, chunks));
  }
  return std::make_unique<PyPagedLoad>(std::move(engine), std::move(load), cache.owners());
}

// Engine.save_pages: the save is prepared with the GIL released.
std::unique_ptr<PyPagedSave> SavePages(PyEngine& self, const PyPagedCache& cache,
                                       std::vector<int32_t> pages, size_t chunks,
                                       size_t first_chunk) {
  std::shared_ptr<Engine> engine = self.Get();
  std::unique_ptr<PagedSave> save;
  {
    py::gil_scoped_release release;
    save = ValueOrThrow(PagedSave::Create(cache.cache(), std::move(pages), chunks, first_chunk));
  }
  return std::make_unique<PyPagedSave>(std::move(engine), std::move(save), cache.owners());
}

}  // namespace

void BindPagedTransfers(py::module_& m) {
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
}

void DefPagedMethods(py::class_<PyEngine>& engine) {
  engine
      .def("paged_cache", &MakePagedCache, py::arg("backend"), py::arg("layers"),
           "Describes an inference engine's paged KV tensors, one per layer (backend: the "
           "attention backend's layout name), for load_pages and save_pages.")
      .def("load_pages", &LoadPages, py::arg("ns"), py::arg("tokens"), py::arg("cache"),
           py::arg("pages"), py::arg("first_chunk"), py::arg("chunks"),
           "Starts loading chunks [first_chunk, first_chunk + chunks) of `tokens` into `pages` "
           "of the paged cache; returns a PagedLoad.")
      .def("save_pages", &SavePages, py::arg("cache"), py::arg("pages"), py::arg("chunks"),
           py::arg("first_chunk") = 0,
           "Prepares a save of `chunks` chunks out of `pages`, skipping the first first_chunk "
           "(already cached); returns a PagedSave.");
}

}  // namespace kvtier::python
