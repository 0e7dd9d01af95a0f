// The service client's loads, stores, pins and staging (client_impl.h). A load or store names
// its blocks by offsets in the connection's staging region: buffers already there are used in
// place; others get leased slots, copied into before a store and out of after each layer of a
// load. Slots are given back when the service is done with them (the last layer, the store's
// completion) or the connection is gone (its region is then never used again).
#include <cstring>

#include "serve/client_impl.h"

namespace kvtier::serve {
namespace {

struct Blocks {
  std::vector<uint64_t> offsets;
  bool leased = false;  // Slots allocated here (and to copy through), not the caller's staging.
};

void FreeBlocks(Connection& c, const Blocks& b, uint64_t block_bytes) {
  if (!b.leased) return;
  for (uint64_t off : b.offsets) c.Free(off, block_bytes);
}

// The offsets of `bufs` in `c`'s region when all of them are inside it, else leased slots.
template <typename Span>
Result<Blocks> Place(Connection& c, std::span<const Span> bufs, uint64_t block_bytes) {
  Blocks b;
  bool inside = true;
  for (const Span& s : bufs) {
    inside = inside && c.Contains(reinterpret_cast<const std::byte*>(s.data()), s.size());
  }
  if (inside) {
    for (const Span& s : bufs) {
      b.offsets.push_back(static_cast<uint64_t>(reinterpret_cast<const std::byte*>(s.data()) -
                                                c.base));
    }
    return b;
  }
  b.leased = true;
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::optional<uint64_t> off = c.Alloc(block_bytes);
    if (!off.has_value()) {
      FreeBlocks(c, b, block_bytes);
      return Status::Busy("the connection's staging region is full (" + std::to_string(c.size) +
                          " bytes; kvtier serve --client-staging-bytes)");
    }
    b.offsets.push_back(*off);
  }
  return b;
}

template <typename Span>
Status CheckBlocks(std::span<const Span> bufs, uint32_t layers, uint64_t block_bytes,
                   std::string_view what) {
  if (layers == 0 || bufs.size() % layers != 0) {
    return Status::InvalidArgument(std::string(what) + ": the block count is not a multiple of "
                                   "the layer count");
  }
  for (const Span& s : bufs) {
    if (s.size() != block_bytes) {
      return Status::InvalidArgument(std::string(what) + ": a buffer is not block_bytes long");
    }
  }
  return Status::Ok();
}

class RemoteLoadHandle final : public LoadHandle {
 public:
  RemoteLoadHandle(std::shared_ptr<Connection> c, std::shared_ptr<Pending> p, Blocks blocks,
                   std::vector<std::span<std::byte>> dst, size_t chunks, uint64_t block_bytes,
                   std::chrono::milliseconds timeout)
      : c_(std::move(c)), p_(std::move(p)), blocks_(std::move(blocks)), dst_(std::move(dst)),
        chunks_(chunks), block_bytes_(block_bytes), timeout_(timeout),
        copied_(p_->layers.size(), false) {}

  ~RemoteLoadHandle() override {
    (void)Wait();  // The service may still write into the slots until its last layer.
    FreeBlocks(*c_, blocks_, block_bytes_);
  }

  Status WaitLayer(uint32_t layer) override {
    if (layer >= copied_.size()) return Status::InvalidArgument("no such layer");
    Status s = c_->Wait(p_, timeout_, [layer](const Pending& q) {
      return q.layers[layer].has_value();
    });
    if (!s.ok()) return s;
    {
      MutexLock lock(&c_->mu);
      s = *p_->layers[layer];
    }
    if (s.ok() && blocks_.leased && !copied_[layer]) {
      uint32_t layers = static_cast<uint32_t>(copied_.size());
      for (size_t i = layer; i < dst_.size(); i += layers) {
        std::memcpy(dst_[i].data(), c_->base + blocks_.offsets[i], block_bytes_);
      }
    }
    copied_[layer] = true;
    return s;
  }

  bool LayerReady(uint32_t layer) override {
    if (layer >= copied_.size()) return false;
    {
      MutexLock lock(&c_->mu);
      if (!p_->layers[layer].has_value() && !p_->lost) return false;
    }
    (void)WaitLayer(layer);
    return true;
  }

  Status Wait() override {
    Status first;
    for (uint32_t l = 0; l < copied_.size(); ++l) {
      Status s = WaitLayer(l);
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

  size_t chunks() const override { return chunks_; }

 private:
  std::shared_ptr<Connection> c_;
  std::shared_ptr<Pending> p_;
  Blocks blocks_;
  std::vector<std::span<std::byte>> dst_;
  size_t chunks_;
  uint64_t block_bytes_;
  std::chrono::milliseconds timeout_;
  std::vector<bool> copied_;
};

class RemoteStoreHandle final : public StoreHandle {
 public:
  RemoteStoreHandle(std::shared_ptr<Connection> c, std::shared_ptr<Pending> p, Blocks blocks,
                    size_t stored, uint64_t block_bytes, std::chrono::milliseconds timeout)
      : c_(std::move(c)), p_(std::move(p)), blocks_(std::move(blocks)), stored_(stored),
        block_bytes_(block_bytes), timeout_(timeout) {}

  ~RemoteStoreHandle() override {
    (void)Wait();
    FreeBlocks(*c_, blocks_, block_bytes_);
  }

  Status Wait() override {
    KV_RETURN_IF_ERROR(c_->Wait(p_, timeout_, [](const Pending& q) { return q.store_done; }));
    MutexLock lock(&c_->mu);
    return p_->store_status;
  }

  bool Done() override {
    MutexLock lock(&c_->mu);
    return p_->store_done || p_->lost;
  }

  size_t chunks_stored() const override { return stored_; }

 private:
  std::shared_ptr<Connection> c_;
  std::shared_ptr<Pending> p_;
  Blocks blocks_;
  size_t stored_;
  uint64_t block_bytes_;
  std::chrono::milliseconds timeout_;
};

class RemoteUnpinner final : public PinHandle::Unpinner {
 public:
  RemoteUnpinner(std::weak_ptr<Connection> c, uint64_t pin) : c_(std::move(c)), pin_(pin) {}
  void Unpin(std::span<const Hash256>) override {
    std::shared_ptr<Connection> c = c_.lock();
    if (c == nullptr || c->Dead()) return;  // The service released it with the connection.
    WireWriter w;
    w.U64(pin_);
    c->SendOnly(Op::kUnpin, w);
  }

 private:
  std::weak_ptr<Connection> c_;
  uint64_t pin_;
};

}  // namespace

Result<std::unique_ptr<LoadHandle>> RemoteEngineImpl::Load(
    const Namespace& ns, std::span<const uint32_t> tokens,
    std::span<const std::span<std::byte>> dst) {
  KV_RETURN_IF_ERROR(CheckBlocks(dst, layers(), block_bytes(), "Load"));
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(false));
  KV_ASSIGN_OR_RETURN(uint64_t handle, ServiceNamespace(c, ns));
  KV_ASSIGN_OR_RETURN(Blocks blocks, Place(*c, dst, block_bytes()));
  auto p = std::make_shared<Pending>();
  p->layers.resize(layers());
  WireWriter w;
  w.U64(handle);
  w.U32s(tokens);
  w.U64s(blocks.offsets);
  if (Status s = Request(c, Op::kLoad, w, p, Timeout()); !s.ok()) {
    // The service did not take the request (or the connection is gone): nothing writes the slots.
    FreeBlocks(*c, blocks, block_bytes());
    return s;
  }
  WireReader r(p->payload);
  size_t chunks = static_cast<size_t>(r.U64());
  if (blocks.leased) CountCopied(dst.size() * block_bytes());
  return std::unique_ptr<LoadHandle>(new RemoteLoadHandle(
      c, p, std::move(blocks), std::vector<std::span<std::byte>>(dst.begin(), dst.end()), chunks,
      block_bytes(), Timeout()));
}

Result<std::unique_ptr<StoreHandle>> RemoteEngineImpl::Store(
    const Namespace& ns, std::span<const uint32_t> tokens,
    std::span<const std::span<const std::byte>> src, const StoreOptions& options) {
  KV_RETURN_IF_ERROR(CheckBlocks(src, layers(), block_bytes(), "Store"));
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Live(false));
  KV_ASSIGN_OR_RETURN(uint64_t handle, ServiceNamespace(c, ns));
  KV_ASSIGN_OR_RETURN(Blocks blocks, Place(*c, src, block_bytes()));
  if (blocks.leased) {
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(c->base + blocks.offsets[i], src[i].data(), block_bytes());
    }
    CountCopied(src.size() * block_bytes());
  }
  auto p = std::make_shared<Pending>();
  p->wants_store = true;
  WireWriter w;
  w.U64(handle);
  w.U32s(tokens);
  w.U64s(blocks.offsets);
  w.U8(static_cast<uint8_t>(options.priority));
  w.U64(options.ttl_ms);
  w.U64(options.first_chunk);
  if (Status s = Request(c, Op::kStore, w, p, Timeout()); !s.ok()) {
    FreeBlocks(*c, blocks, block_bytes());
    return s;
  }
  WireReader r(p->payload);
  size_t stored = static_cast<size_t>(r.U64());
  return std::unique_ptr<StoreHandle>(
      new RemoteStoreHandle(c, p, std::move(blocks), stored, block_bytes(), Timeout()));
}

Result<PinHandle> RemoteEngineImpl::Pin(const Namespace& ns, std::span<const uint32_t> tokens) {
  Result<std::shared_ptr<Connection>> c = Live(false);
  if (!c.ok()) return PinHandle();  // Nothing to pin while the service is down.
  KV_ASSIGN_OR_RETURN(uint64_t handle, ServiceNamespace(*c, ns));
  WireWriter w;
  w.U64(handle);
  w.U32s(tokens);
  Result<std::vector<std::byte>> reply = Call(*c, Op::kPin, w, Timeout());
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kUnavailable ||
        reply.status().code() == StatusCode::kTimedOut) {
      return PinHandle();
    }
    return reply.status();
  }
  WireReader r(*reply);
  uint64_t pin = r.U64();
  uint64_t chunks = r.U64();
  if (!r.done() || chunks > tokens.size()) {
    return Status::Corruption("a malformed pin reply from the service");
  }
  return PinHandle(std::make_shared<RemoteUnpinner>(*c, pin),
                   std::vector<Hash256>(static_cast<size_t>(chunks)));
}

Result<std::span<std::byte>> StagingLender::Acquire(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("staging of 0 bytes");
  MutexLock lock(&mu_);
  if (engine_ == nullptr) return Status::Unavailable("the kvtier client is closed");
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, engine_->Live(false));
  std::optional<uint64_t> off = c->Alloc(bytes);
  if (!off.has_value()) {
    return Status::Busy("the connection's staging region has no free run of " +
                        std::to_string(bytes) + " bytes");
  }
  std::span<std::byte> buffer(c->base + *off, bytes);
  lent_[buffer.data()] = {std::move(c), *off, bytes};
  return buffer;
}

void StagingLender::Release(std::span<std::byte> buffer) {
  MutexLock lock(&mu_);
  auto it = lent_.find(buffer.data());
  if (it == lent_.end()) return;
  it->second.conn->Free(it->second.offset, it->second.bytes);
  lent_.erase(it);
}

void StagingLender::Detach() {
  MutexLock lock(&mu_);
  engine_ = nullptr;
}

}  // namespace kvtier::serve
