// The node service's requests (server_internal.h): each decoded, checked, run on the engine and
// answered; loads and stores then wait on the connection's waiters, which send their completions.
#include <algorithm>

#include "core/limits.h"
#include "core/sha256.h"
#include "serve/server_internal.h"

namespace kvtier::serve {
namespace {

constexpr size_t kNamespacesPerConnMax = 4096;
constexpr size_t kPinsPerConnMax = 65536;
constexpr size_t kTokensMax = kFramePayloadMax / 8;

Status Malformed(Op op) {
  return Status::InvalidArgument("a malformed kvtier service request (op " +
                                 std::to_string(static_cast<int>(op)) + ")");
}


}  // namespace

void Conn::Serve(const FrameHeader& h, std::vector<std::byte>& payload) {
  ++counters_.requests;
  ++server_->requests;
  WireReader r(payload);
  WireWriter out;
  Status s;
  switch (h.op) {
    case Op::kMakeNamespace:
      s = MakeNamespace(r, &out);
      break;
    case Op::kLookup:
      s = Lookup(r, &out);
      break;
    case Op::kLoad:
      s = ServeLoad(h.id, r, &out);
      if (s.ok()) return;  // Answered, and queued for its waiter.
      break;
    case Op::kStore:
      s = ServeStore(h.id, r, &out);
      if (s.ok()) return;  // Answered, and queued for its waiter.
      break;
    case Op::kPrefetch:
    case Op::kHint:
      s = PrefetchOrHint(h.op, r);
      break;
    case Op::kPin:
      s = Pin(r, &out);
      break;
    case Op::kUnpin:
      pins_.erase(r.U64());
      return;  // No reply.
    case Op::kFlush:
      s = server_->engine->Flush();
      break;
    case Op::kStats:  // The remote store's counters when the request asks (protocol.h).
      PutEngineStats(server_->engine->Stats(), &out,
                     r.remaining() > 0 && r.U8() == kStatsWithRemoteStore);
      break;
    case Op::kServiceStats:
      out.Str(server_->owner->StatsJson());
      break;
    case Op::kDrain:
      if (Operator()) {
        server_->owner->Drain();
      } else {
        s = Status::InvalidArgument("drain: only the service's own uid or root may drain it");
      }
      break;
    case Op::kClearTenant:
      s = ClearTenant(r, &out);
      break;
    default:
      s = Status::InvalidArgument("a kvtier service frame that is not a request");
      break;
  }
  if (s.code() == StatusCode::kInvalidArgument) ++server_->bad_requests;
  if (!s.ok()) {
    ReplyStatus(h.id, s);
    return;
  }
  ReplyOk(h.id, out);
}

void Conn::ReplyOk(uint64_t id, const WireWriter& out) {
  WireWriter w;
  w.PutStatus(Status::Ok());
  w.Append(out);
  Reply(id, w);
}

Status Conn::ServeLoad(uint64_t id, WireReader& r, WireWriter* out) {
  std::unique_ptr<LoadHandle> handle;
  uint32_t layers = 0;
  Status s = Load(id, r, out, &handle, &layers);
  if (!s.ok()) return s;
  ReplyOk(id, *out);  // The reply goes before any layer's completion.
  MutexLock lock(&q_mu_);
  loads_.push_back({id, std::move(handle), layers});
  q_cv_.SignalAll();
  return s;
}

Status Conn::ServeStore(uint64_t id, WireReader& r, WireWriter* out) {
  std::unique_ptr<StoreHandle> handle;
  Status s = Store(id, r, out, &handle);
  if (!s.ok()) return s;
  ReplyOk(id, *out);
  MutexLock lock(&q_mu_);
  stores_.push_back({id, std::move(handle)});
  q_cv_.SignalAll();
  return s;
}

Status Conn::PrefetchOrHint(Op op, WireReader& r) {
  const NsEntry* ns = FindNs(r.U64());
  uint64_t session = op == Op::kHint ? r.U64() : 0;
  std::vector<uint32_t> tokens = r.U32s(kTokensMax);
  if (!r.done()) return Malformed(op);
  if (ns == nullptr) return Status::InvalidArgument("an unknown namespace handle");
  return op == Op::kHint ? server_->engine->Hint(ns->ns, tokens, session)
                         : server_->engine->Prefetch(ns->ns, tokens);
}

const Conn::NsEntry* Conn::FindNs(uint64_t handle) {
  auto it = namespaces_.find(handle);
  if (it == namespaces_.end()) return nullptr;
  NsEntry& e = it->second;
  const uint64_t epoch = server_->clear_epoch.load();
  if (e.epoch != epoch) {
    // A tenant was cleared since this namespace was derived: derive it again at its tenant's
    // current generation, so that a cleared tenant's old blocks are misses on this connection
    // too. A failure fails closed: the handle is unknown.
    Result<Namespace> ns = server_->DeriveNamespace(e.scoped, e.extra);
    if (!ns.ok()) return nullptr;
    e.ns = *ns;
    e.epoch = epoch;
  }
  return &e;
}

bool Conn::Operator() const { return cred_.uid == server_->own_uid || cred_.uid == 0; }

Status Conn::ClearTenant(WireReader& r, WireWriter* out) {
  const uint32_t uid = r.U32();
  std::string tenant = r.Str(kTenantBytesMax);
  if (!r.done()) return Malformed(Op::kClearTenant);
  if (uid != cred_.uid && !Operator()) {
    return Status::InvalidArgument(
        "clearing another uid's tenant: only the service's own uid or root may (this client "
        "runs as uid " + std::to_string(cred_.uid) + ")");
  }
  KV_ASSIGN_OR_RETURN(const uint64_t generation, server_->owner->ClearTenant(uid, tenant));
  out->U64(generation);
  out->U8(server_->generations.persistent() ? 1 : 0);
  return Status::Ok();
}

Status Conn::MakeNamespace(WireReader& r, WireWriter* out) {
  std::string tenant = r.Str(kTenantBytesMax);
  uint32_t n = r.U32();
  if (n > kExtraKeysMax) return Status::InvalidArgument("more than 64 extra keys");
  std::vector<std::string> extra;
  for (uint32_t i = 0; i < n && r.ok(); ++i) extra.push_back(r.Str(kTenantBytesMax));
  if (!r.done()) return Malformed(Op::kMakeNamespace);
  // The key the client's uid and the tenant id make: a uid never names another uid's tenant.
  std::string scoped = "uid:" + std::to_string(cred_.uid) + "/" + tenant;
  std::string key = scoped;
  for (const std::string& e : extra) key += '\0' + std::to_string(e.size()) + ':' + e;
  if (auto it = ns_by_key_.find(key); it != ns_by_key_.end()) {
    out->U64(it->second);
    return Status::Ok();
  }
  if (namespaces_.size() >= kNamespacesPerConnMax) {
    return Status::Busy("a connection may hold at most 4096 namespaces");
  }
  const uint64_t epoch = server_->clear_epoch.load();  // Before: a clear now re-derives.
  KV_ASSIGN_OR_RETURN(Namespace ns, server_->DeriveNamespace(scoped, extra));
  uint64_t handle = next_ns_++;
  std::string label = "uid:" + std::to_string(cred_.uid) + "/" + ToHex(ns.digest).substr(0, 12);
  namespaces_[handle] = {ns, label, scoped, std::move(extra), epoch};
  ns_by_key_[key] = handle;
  out->U64(handle);
  return Status::Ok();
}

Status Conn::Lookup(WireReader& r, WireWriter* out) {
  const NsEntry* ns = FindNs(r.U64());
  LookupOptions options;
  options.session_id = r.U64();
  std::vector<uint32_t> tokens = r.U32s(kTokensMax);
  if (!r.done()) return Malformed(Op::kLookup);
  if (ns == nullptr) return Status::InvalidArgument("an unknown namespace handle");
  KV_ASSIGN_OR_RETURN(LookupResult result, server_->engine->Lookup(ns->ns, tokens, options));
  ++counters_.lookups;
  counters_.lookup_tokens += tokens.size();
  counters_.lookup_hit_tokens += result.matched_tokens;
  server_->CountTenant(ns->tenant, {1, tokens.size(), result.matched_tokens, 0, 0});
  out->U64(result.matched_tokens);
  out->U32(static_cast<uint32_t>(result.chunk_tiers.size()));
  for (TierKind t : result.chunk_tiers) out->U8(static_cast<uint8_t>(t));
  return Status::Ok();
}

Status Conn::BlockSpans(std::span<const uint64_t> offsets,
                        std::vector<std::span<std::byte>>* out) {
  uint64_t bytes = server_->block_bytes;
  for (uint64_t off : offsets) {
    if (off % kStagingAlign != 0 || off > staging_bytes_ || staging_bytes_ - off < bytes) {
      return Status::InvalidArgument("a block offset " + std::to_string(off) +
                                     " outside the connection's staging region");
    }
    out->push_back({staging_ + off, bytes});
  }
  return Status::Ok();
}

Status Conn::Load(uint64_t, WireReader& r, WireWriter* out, std::unique_ptr<LoadHandle>* handle,
                  uint32_t* layers) {
  const NsEntry* ns = FindNs(r.U64());
  std::vector<uint32_t> tokens = r.U32s(kTokensMax);
  std::vector<uint64_t> offsets = r.U64s(kTokensMax);
  if (!r.done()) return Malformed(Op::kLoad);
  if (ns == nullptr) return Status::InvalidArgument("an unknown namespace handle");
  if (server_->draining) return Status::Unavailable("the kvtier service is draining");
  std::vector<std::span<std::byte>> dst;
  KV_RETURN_IF_ERROR(BlockSpans(offsets, &dst));
  KV_ASSIGN_OR_RETURN(*handle, server_->engine->Load(ns->ns, tokens, dst));
  ++counters_.leases_active;
  ++server_->leases_active;
  ++server_->leases_total;
  ++counters_.loads;
  counters_.load_blocks += dst.size();
  server_->CountTenant(ns->tenant, {0, 0, 0, 1, 0});
  *layers = server_->layers;
  out->U64((*handle)->chunks());
  return Status::Ok();
}

Status Conn::Store(uint64_t, WireReader& r, WireWriter* out,
                   std::unique_ptr<StoreHandle>* handle) {
  const NsEntry* ns = FindNs(r.U64());
  std::vector<uint32_t> tokens = r.U32s(kTokensMax);
  std::vector<uint64_t> offsets = r.U64s(kTokensMax);
  StoreOptions options;
  uint8_t priority = r.U8();
  options.ttl_ms = r.U64();
  uint64_t first_chunk = r.U64();
  if (!r.done()) return Malformed(Op::kStore);
  if (ns == nullptr) return Status::InvalidArgument("an unknown namespace handle");
  if (priority > static_cast<uint8_t>(BlockPriority::kPinnedPrompt)) {
    return Status::InvalidArgument("an unknown block priority " + std::to_string(priority));
  }
  if (options.ttl_ms > kTtlMsMax) return Status::InvalidArgument("a ttl_ms beyond 10 years");
  options.priority = static_cast<BlockPriority>(priority);
  options.first_chunk = static_cast<size_t>(std::min<uint64_t>(first_chunk, tokens.size()));
  if (server_->draining) return Status::Unavailable("the kvtier service is draining");
  std::vector<std::span<std::byte>> blocks;
  KV_RETURN_IF_ERROR(BlockSpans(offsets, &blocks));
  std::vector<std::span<const std::byte>> src(blocks.begin(), blocks.end());
  KV_ASSIGN_OR_RETURN(*handle, server_->engine->Store(ns->ns, tokens, src, options));
  ++counters_.leases_active;
  ++server_->leases_active;
  ++server_->leases_total;
  ++counters_.stores;
  counters_.store_blocks += src.size();
  server_->CountTenant(ns->tenant, {0, 0, 0, 0, 1});
  out->U64((*handle)->chunks_stored());
  return Status::Ok();
}

Status Conn::Pin(WireReader& r, WireWriter* out) {
  const NsEntry* ns = FindNs(r.U64());
  std::vector<uint32_t> tokens = r.U32s(kTokensMax);
  if (!r.done()) return Malformed(Op::kPin);
  if (ns == nullptr) return Status::InvalidArgument("an unknown namespace handle");
  if (pins_.size() >= kPinsPerConnMax) {
    return Status::Busy("a connection may hold at most 65536 pins");
  }
  KV_ASSIGN_OR_RETURN(PinHandle pin, server_->engine->Pin(ns->ns, tokens));
  uint64_t id = next_pin_++;
  out->U64(id);
  out->U64(pin.chunks());
  pins_.emplace(id, std::move(pin));
  return Status::Ok();
}

void Conn::EndLease() {
  --counters_.leases_active;
  --server_->leases_active;
}

void Conn::LoadWaiter() {
  for (;;) {
    LoadJob job;
    {
      MutexLock lock(&q_mu_);
      while (loads_.empty() && !closing_) q_cv_.Wait(&q_mu_);
      if (loads_.empty()) return;
      job = std::move(loads_.front());
      loads_.pop_front();
    }
    // One frame per run of layers that arrived together: a load from host memory completes
    // many layers at once, and each frame costs the client a wake-up.
    for (uint32_t l = 0; l < job.layers;) {
      std::vector<Status> done{job.handle->WaitLayer(l)};
      while (l + done.size() < job.layers &&
             job.handle->LayerReady(l + static_cast<uint32_t>(done.size()))) {
        done.push_back(job.handle->WaitLayer(l + static_cast<uint32_t>(done.size())));
      }
      WireWriter w;
      w.U32(l);
      w.U32(static_cast<uint32_t>(done.size()));
      for (const Status& st : done) w.PutStatus(st);
      Send(Op::kLayerDone, job.id, w);
      l += static_cast<uint32_t>(done.size());
    }
    job.handle.reset();  // Waits for every copy into the staging region.
    EndLease();
  }
}

void Conn::StoreWaiter() {
  for (;;) {
    StoreJob job;
    {
      MutexLock lock(&q_mu_);
      while (stores_.empty() && !closing_) q_cv_.Wait(&q_mu_);
      if (stores_.empty()) return;
      job = std::move(stores_.front());
      stores_.pop_front();
    }
    Status s = job.handle->Wait();
    job.handle.reset();
    EndLease();
    WireWriter w;
    w.PutStatus(s);
    Send(Op::kStoreDone, job.id, w);
  }
}

}  // namespace kvtier::serve
