// The handles of the Python module (kvtier_handles.h): PyLoad, PyStore and PyPin, and their
// Python classes LoadHandle, StoreHandle and PinHandle, each usable in a with block.
#include "kvtier_handles.h"

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

namespace kvtier::python {

// ---- PyLoad ----

PyLoad::PyLoad(std::shared_ptr<Engine> engine, std::unique_ptr<LoadHandle> handle,
               std::vector<BufferView> views, uint32_t layers)
    : engine_(std::move(engine)),
      handle_(std::move(handle)),
      views_(std::move(views)),
      layers_(layers) {}

PyLoad::~PyLoad() {
  DestroyWithoutGil([this] { ResetHandle(); });
}

void PyLoad::WaitLayer(uint32_t layer) {
  MutexLock lock(&mu_);
  if (layer >= layers_) {
    throw StatusError(Status::InvalidArgument("layer " + std::to_string(layer) +
                                              " is out of range (layers " +
                                              std::to_string(layers_) + ")"));
  }
  ThrowIfError(Handle()->WaitLayer(layer));
}

bool PyLoad::LayerReady(uint32_t layer) {
  MutexLock lock(&mu_);
  return layer < layers_ && Handle()->LayerReady(layer);
}

void PyLoad::Wait() {
  MutexLock lock(&mu_);
  ThrowIfError(Handle()->Wait());
}

size_t PyLoad::chunks() {
  MutexLock lock(&mu_);
  return Handle()->chunks();
}

void PyLoad::ResetHandle() {
  MutexLock lock(&mu_);
  handle_.reset();
  engine_.reset();
}

LoadHandle* PyLoad::Handle() {
  if (!handle_) throw StatusError(Status::Aborted("the load handle is closed"));
  return handle_.get();
}

// ---- PyStore ----

PyStore::PyStore(std::shared_ptr<Engine> engine, std::unique_ptr<StoreHandle> handle,
                 std::vector<BufferView> views)
    : engine_(std::move(engine)), handle_(std::move(handle)), views_(std::move(views)) {}

PyStore::~PyStore() {
  DestroyWithoutGil([this] { ResetHandle(); });
}

void PyStore::Wait() {
  MutexLock lock(&mu_);
  ThrowIfError(Handle()->Wait());
}

size_t PyStore::chunks_stored() {
  MutexLock lock(&mu_);
  return Handle()->chunks_stored();
}

void PyStore::ResetHandle() {
  MutexLock lock(&mu_);
  handle_.reset();
  engine_.reset();
}

StoreHandle* PyStore::Handle() {
  if (!handle_) throw StatusError(Status::Aborted("the store handle is closed"));
  return handle_.get();
}

// ---- PyPin ----

PyPin::PyPin(std::shared_ptr<Engine> engine, PinHandle pin)
    : engine_(std::move(engine)), pin_(std::move(pin)), chunks_(pin_.chunks()) {}

PyPin::~PyPin() {
  DestroyWithoutGil([this] { Release(); });
}

void PyPin::Release() {
  MutexLock lock(&mu_);
  pin_ = PinHandle();
  engine_.reset();
}

// ---- The Python classes ----

void BindHandles(py::module_& m) {
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

  py::class_<PyPin>(m, "PinHandle", "Keeps chunks resident in memory until released.")
      .def_property_readonly("chunks", &PyPin::chunks, "Chunks held in memory.")
      .def("release", &PyPin::Release, NoGil(),
           "Lets the chunks be evicted again (also on leaving a with block).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyPin& self, const py::args&) { WithoutGil([&] { self.Release(); }); });
}

}  // namespace kvtier::python
