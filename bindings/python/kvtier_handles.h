// The handles of the Python module's Engine (kvtier_module.h): PyLoad and PyStore, a Load or a
// Store in flight with the buffers it borrows, and PyPin, a Pin. Each holds a reference to the
// engine, so the engine outlives it. Engine's load, store and pin make them (kvtier_engine.cc);
// kvtier_handles.cc defines them and registers LoadHandle, StoreHandle and PinHandle.
//
// Thread safety: each handle's methods serialize on its mutex (one may block in a wait); the
// views are touched only with the GIL held (DropViews, after ResetHandle).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "engine/engine.h"
#include "kvtier_module.h"

namespace kvtier::python {

// A Load in flight. close() waits, then drops the destination views.
class PyLoad {
 public:
  PyLoad(std::shared_ptr<Engine> engine, std::unique_ptr<LoadHandle> handle,
         std::vector<BufferView> views, uint32_t layers);
  ~PyLoad();

  void WaitLayer(uint32_t layer) KV_EXCLUDES(mu_);
  bool LayerReady(uint32_t layer) KV_EXCLUDES(mu_);
  void Wait() KV_EXCLUDES(mu_);
  size_t chunks() KV_EXCLUDES(mu_);
  // Called with the GIL released: waits for copies and releases the engine reference.
  void ResetHandle() KV_EXCLUDES(mu_);
  // Called with the GIL held, after ResetHandle.
  void DropViews() { views_.clear(); }

 private:
  LoadHandle* Handle() KV_REQUIRES(mu_);

  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);  // Before handle_: destroyed after it.
  std::unique_ptr<LoadHandle> handle_ KV_GUARDED_BY(mu_);
  std::vector<BufferView> views_;  // Touched only with the GIL held.
  const uint32_t layers_;
};

// A Store in flight. close() waits, then drops the source views.
class PyStore {
 public:
  PyStore(std::shared_ptr<Engine> engine, std::unique_ptr<StoreHandle> handle,
          std::vector<BufferView> views);
  ~PyStore();

  void Wait() KV_EXCLUDES(mu_);
  size_t chunks_stored() KV_EXCLUDES(mu_);
  void ResetHandle() KV_EXCLUDES(mu_);
  void DropViews() { views_.clear(); }

 private:
  StoreHandle* Handle() KV_REQUIRES(mu_);

  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  std::unique_ptr<StoreHandle> handle_ KV_GUARDED_BY(mu_);
  std::vector<BufferView> views_;
};

// Pinned chunks, held in memory until Release.
class PyPin {
 public:
  PyPin(std::shared_ptr<Engine> engine, PinHandle pin);
  ~PyPin();
  void Release() KV_EXCLUDES(mu_);
  size_t chunks() const { return chunks_; }

 private:
  Mutex mu_;
  std::shared_ptr<Engine> engine_ KV_GUARDED_BY(mu_);
  PinHandle pin_ KV_GUARDED_BY(mu_);
  const size_t chunks_;
};

}  // namespace kvtier::python
