// FakeRemoteStore: values in a hash map, armed faults consulted once per call, and a circuit
// breaker in front of the store. See the header for the contract.
#include "testing/fake_remote_store.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/assert.h"

namespace kvtier {
namespace {

bool Matches(const RemoteFaultSpec& spec, RemoteOp op) {
  if (spec.kind == RemoteFaultKind::kCorrupt && op != RemoteOp::kGet) return false;
  return spec.op == RemoteOp::kAny || spec.op == op;
}

Status CheckBatch(size_t entries) {
  if (entries > kRemoteBatchMax) {
    return Status::InvalidArgument("fake remote store: batch of " + std::to_string(entries) +
                                   " entries exceeds kRemoteBatchMax");
  }
  return Status::Ok();
}

}  // namespace

FakeRemoteStore::FakeRemoteStore(const FakeRemoteStoreOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : SystemClock()),
      breaker_("fake remote store", options.breaker, clock_, options.logger) {}

// --- Faults and test controls -------------------------------------------------------------------

Result<FaultId> FakeRemoteStore::ArmFault(const RemoteFaultSpec& spec) {
  if (spec.kind == RemoteFaultKind::kCorrupt && spec.op != RemoteOp::kGet &&
      spec.op != RemoteOp::kAny) {
    return Status::InvalidArgument("kCorrupt applies to Get only");
  }
  MutexLock lock(&mu_);
  return faults_.Arm(spec);
}

void FakeRemoteStore::DisarmFault(FaultId id) {
  MutexLock lock(&mu_);
  faults_.Disarm(id);
}

void FakeRemoteStore::DisarmAllFaults() {
  MutexLock lock(&mu_);
  faults_.DisarmAll();
}

uint64_t FakeRemoteStore::FiredCount(FaultId id) const {
  MutexLock lock(&mu_);
  return faults_.Fired(id);
}

Status FakeRemoteStore::CorruptStoredValue(const BlockKey& key, uint64_t byte_index) {
  MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return Status::NotFound("no stored value of " + key.ToString());
  std::vector<std::byte>& bytes = it->second.bytes;
  bytes[byte_index % bytes.size()] ^= std::byte{1};
  return Status::Ok();
}

bool FakeRemoteStore::Contains(const BlockKey& key) {
  MutexLock lock(&mu_);
  return FindLocked(key) != nullptr;
}

size_t FakeRemoteStore::value_count() const {
  MutexLock lock(&mu_);
  return values_.size();
}

void FakeRemoteStore::Clear() {
  MutexLock lock(&mu_);
  values_.clear();
  used_bytes_ = 0;
}

FakeRemoteStore::CallFaults FakeRemoteStore::DecideLocked(RemoteOp op) {
  CallFaults out;
  faults_.Count([op](const RemoteFaultSpec& spec) { return Matches(spec, op); },
                [&out](const RemoteFaultSpec& spec, uint64_t /*fired*/) {
                  switch (spec.kind) {
                    case RemoteFaultKind::kUnavailable:
                      out.unavailable = true;
                      break;
                    case RemoteFaultKind::kSlow:
                      out.delay_us = std::max(out.delay_us, spec.delay_us);
                      break;
                    case RemoteFaultKind::kCorrupt:
                      out.corrupt = true;
                      break;
                  }
                });
  return out;
}

Status FakeRemoteStore::Reach(RemoteOp op, size_t entries, bool* corrupt) {
  *corrupt = false;
  uint64_t sleep_us = 0;
  Status outcome;
  {
    MutexLock lock(&mu_);
    if (!breaker_.Allow()) {
      stats_.errors += entries;
      return Status::Unavailable("fake remote store: circuit breaker open");
    }
    const CallFaults faults = DecideLocked(op);
    *corrupt = faults.corrupt;
    sleep_us = faults.delay_us;
    if (faults.unavailable) {
      outcome = Status::Unavailable("fake remote store: injected fault: connection refused");
    } else if (faults.delay_us != 0 && faults.delay_us >= options_.timeout_us) {
      sleep_us = options_.timeout_us;
      outcome = Status::TimedOut("fake remote store: injected fault: no answer within " +
                                 std::to_string(options_.timeout_us) + " us");
    }
  }
  if (sleep_us != 0) clock_->SleepForMicros(sleep_us);
  MutexLock lock(&mu_);
  if (outcome.ok()) {
    breaker_.RecordSuccess();
    return outcome;
  }
  breaker_.RecordFailure();
  (outcome.IsTimedOut() ? stats_.timeouts : stats_.errors) += entries;
  return outcome;
}

// --- Values -------------------------------------------------------------------------------------

const FakeRemoteStore::Value* FakeRemoteStore::FindLocked(const BlockKey& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return nullptr;
  const uint64_t expiry = it->second.expiry_wall_us;
  if (expiry != 0 && clock_->WallMicros() >= expiry) {
    EraseLocked(key);
    return nullptr;
  }
  return &it->second;
}

void FakeRemoteStore::EraseLocked(const BlockKey& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return;
  used_bytes_ -= it->second.bytes.size();
  values_.erase(it);
}

Status FakeRemoteStore::PutLocked(const RemotePut& p) {
  const uint64_t expiry = p.ttl_ms == 0 ? 0 : clock_->WallMicros() + p.ttl_ms * 1000;
  Value value{.expiry_wall_us = expiry};
  EncodeRemoteValue({.key = p.key,
                     .layout_digest = options_.layout_digest,
                     .codec_id = p.codec_id,
                     .raw_bytes = p.raw_bytes,
                     .expiry_wall_us = expiry},
                    p.payload, &value.bytes);
  auto old = values_.find(p.key);
  const uint64_t replaced = old != values_.end() ? old->second.bytes.size() : 0;
  if (used_bytes_ - replaced + value.bytes.size() > options_.capacity_bytes) {
    return Status::NoSpace("fake remote store: OOM, " + std::to_string(options_.capacity_bytes) +
                           " bytes of values held");
  }
  used_bytes_ = used_bytes_ - replaced + value.bytes.size();
  values_[p.key] = std::move(value);
  return Status::Ok();
}

void FakeRemoteStore::GetLocked(RemoteGet& g, bool corrupt) {
  const Value* v = FindLocked(g.key);
  if (v == nullptr) {
    g.status = Status::NotFound("remote miss");
    return;
  }
  std::span<const std::byte> value = v->bytes;
  std::vector<std::byte> damaged;
  if (corrupt && !value.empty()) {  // A copy, so the stored value stays intact.
    damaged.assign(value.begin(), value.end());
    damaged[value.size() - 1] ^= std::byte{0x10};
    value = damaged;
  }
  ssd::RecordHeader header;
  std::span<const std::byte> payload;
  RemoteValueCheck check = RemoteValueCheck::kOk;
  g.status = VerifyRemoteValue(value, g.key, options_.layout_digest, &header, &payload, &check);
  if (check == RemoteValueCheck::kCorrupt) ++stats_.corrupt;
  if (check == RemoteValueCheck::kMismatched) ++stats_.mismatched;
  if (g.status.ok() && payload.size() > g.dst.size()) {
    g.status = Status::InvalidArgument("remote get: destination smaller than the value");
  }
  if (!g.status.ok()) return;
  if (!payload.empty()) std::memcpy(g.dst.data(), payload.data(), payload.size());
  g.codec_id = header.codec_id;
  g.raw_bytes = header.raw_bytes;
  g.payload_bytes = header.payload_bytes;
}

// --- RemoteStore --------------------------------------------------------------------------------

Status FakeRemoteStore::Put(std::span<RemotePut> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  for (const RemotePut& p : entries) {
    if (p.payload.size() > kRemoteValueBytesMax) {
      return Status::InvalidArgument("fake remote store: value above kRemoteValueBytesMax");
    }
  }
  bool corrupt = false;
  const Status reach = Reach(RemoteOp::kPut, entries.size(), &corrupt);
  MutexLock lock(&mu_);
  for (RemotePut& p : entries) {
    p.status = reach.ok() ? PutLocked(p) : reach;
    if (p.status.ok()) ++stats_.puts;
    if (reach.ok() && !p.status.ok()) ++stats_.errors;  // Failures of Reach are counted there.
  }
  return Status::Ok();
}

Status FakeRemoteStore::Get(std::span<RemoteGet> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  bool corrupt = false;
  const Status reach = Reach(RemoteOp::kGet, entries.size(), &corrupt);
  MutexLock lock(&mu_);
  for (RemoteGet& g : entries) {
    if (reach.ok()) {
      GetLocked(g, corrupt);
    } else {
      g.status = reach;
    }
    ++(g.status.ok() ? stats_.hits : stats_.misses);
  }
  stats_.gets += entries.size();
  return Status::Ok();
}

Status FakeRemoteStore::Exists(std::span<RemoteExists> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  bool corrupt = false;
  const Status reach = Reach(RemoteOp::kExists, entries.size(), &corrupt);
  MutexLock lock(&mu_);
  for (RemoteExists& x : entries) {
    x.status = reach;
    x.exists = reach.ok() && FindLocked(x.key) != nullptr;
  }
  return Status::Ok();
}

Status FakeRemoteStore::Delete(std::span<RemoteDelete> entries) {
  KV_RETURN_IF_ERROR(CheckBatch(entries.size()));
  bool corrupt = false;
  const Status reach = Reach(RemoteOp::kDelete, entries.size(), &corrupt);
  MutexLock lock(&mu_);
  for (RemoteDelete& d : entries) {
    d.status = reach;
    if (reach.ok()) EraseLocked(d.key);
  }
  return Status::Ok();
}

RemoteStoreStats FakeRemoteStore::Stats() const {
  MutexLock lock(&mu_);
  RemoteStoreStats out = stats_;
  out.breaker_state = breaker_.state();
  out.breakers_open = breaker_.state() == BreakerState::kClosed ? 0 : 1;
  out.breaker_trips = breaker_.trips();
  return out;
}

}  // namespace kvtier
