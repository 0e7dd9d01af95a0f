// The service's wire format (protocol.h): frame I/O over a Unix socket and the payload codec.
#include "serve/protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/coding.h"
#include "engine/stats_table.h"

namespace kvtier::serve {
namespace {

constexpr uint16_t kOpMax = static_cast<uint16_t>(Op::kClearTenant);

Status SocketError(int err, std::string_view what) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return Status::TimedOut(std::string(what) + ": the peer did not answer in time");
  }
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) {
    return Status::Unavailable(std::string(what) + ": the peer closed the connection");
  }
  return Status::FromErrno(err, what);
}

void CloseReceivedFds(msghdr* msg, int* keep) {
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (keep != nullptr && *keep < 0) {
        *keep = fd;
      } else {
        ::close(fd);
      }
    }
  }
}

// Reads exactly `n` bytes; ancillary descriptors (on the first read only) into *received_fd.
Status ReadFull(int fd, std::byte* out, size_t n, int* received_fd, bool first) {
  size_t got = 0;
  while (got < n) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{out + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      return SocketError(errno, "receive from the kvtier service socket");
    }
    CloseReceivedFds(&msg, first ? received_fd : nullptr);
    if (r == 0) {
      return Status::Unavailable(got == 0 && first ? "the peer closed the connection"
                                                   : "the peer closed the connection mid-frame");
    }
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace

void WireWriter::U32(uint32_t v) {
  std::byte b[4];
  EncodeFixed32(b, v);
  bytes_.insert(bytes_.end(), b, b + 4);
}

void WireWriter::U64(uint64_t v) {
  std::byte b[8];
  EncodeFixed64(b, v);
  bytes_.insert(bytes_.end(), b, b + 8);
}

void WireWriter::F64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  U64(bits);
}

void WireWriter::Str(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  bytes_.insert(bytes_.end(), p, p + s.size());
}

void WireWriter::U32s(std::span<const uint32_t> v) {
  U32(static_cast<uint32_t>(v.size()));
  for (uint32_t x : v) U32(x);
}

void WireWriter::U64s(std::span<const uint64_t> v) {
  U32(static_cast<uint32_t>(v.size()));
  for (uint64_t x : v) U64(x);
}

void WireWriter::PutStatus(const Status& s) {
  U8(static_cast<uint8_t>(s.code()));
  Str(s.ok() ? std::string_view() : std::string_view(s.message()));
}

bool WireReader::Take(size_t n, const std::byte** p) {
  if (!ok_ || bytes_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  *p = bytes_.data() + pos_;
  pos_ += n;
  return true;
}

uint8_t WireReader::U8() {
  const std::byte* p;
  return Take(1, &p) ? static_cast<uint8_t>(*p) : 0;
}

uint32_t WireReader::U32() {
  const std::byte* p;
  return Take(4, &p) ? DecodeFixed32(p) : 0;
}

uint64_t WireReader::U64() {
  const std::byte* p;
  return Take(8, &p) ? DecodeFixed64(p) : 0;
}

double WireReader::F64() {
  uint64_t bits = U64();
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

std::string WireReader::Str(size_t max_bytes) {
  uint32_t n = U32();
  const std::byte* p;
  if (n > max_bytes) ok_ = false;
  if (!Take(n, &p)) return {};
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::vector<uint32_t> WireReader::U32s(size_t max_count) {
  uint32_t n = U32();
  if (n > max_count || (bytes_.size() - pos_) / 4 < n) ok_ = false;
  if (!ok_) return {};
  std::vector<uint32_t> v(n);
  for (uint32_t& x : v) x = U32();
  return v;
}

std::vector<uint64_t> WireReader::U64s(size_t max_count) {
  uint32_t n = U32();
  if (n > max_count || (bytes_.size() - pos_) / 8 < n) ok_ = false;
  if (!ok_) return {};
  std::vector<uint64_t> v(n);
  for (uint64_t& x : v) x = U64();
  return v;
}

Status WireReader::GetStatus() {
  uint8_t code = U8();
  std::string message = Str(kFramePayloadMax);
  if (!ok_) return Status::InvalidArgument("a malformed status in a kvtier service reply");
  if (code > static_cast<uint8_t>(StatusCode::kUnavailable)) {
    return Status::InvalidArgument("an unknown status code in a kvtier service reply");
  }
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), std::move(message));
}

Status SendFrame(int fd, Op op, uint64_t id, std::span<const std::byte> payload, int pass_fd) {
  if (payload.size() > kFramePayloadMax) {
    return Status::InvalidArgument("a kvtier service frame of " + std::to_string(payload.size()) +
                                   " bytes exceeds the protocol's limit");
  }
  std::byte header[kFrameHeaderBytes] = {};
  EncodeFixed32(header, kFrameMagic);
  EncodeFixed16(header + 4, static_cast<uint16_t>(op));
  EncodeFixed64(header + 8, id);
  EncodeFixed32(header + 16, static_cast<uint32_t>(payload.size()));
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<std::byte*>(payload.data()), payload.size()}};
  size_t total = sizeof(header) + payload.size(), sent = 0;
  bool fd_sent = pass_fd < 0;
  while (sent < total) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    iovec rest[2];
    int n = 0;
    size_t skip = sent;
    for (const iovec& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      rest[n++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
      skip = 0;
    }
    msg.msg_iov = rest;
    msg.msg_iovlen = static_cast<size_t>(n);
    if (!fd_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return SocketError(errno, "send to the kvtier service socket");
    }
    fd_sent = true;
    sent += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status RecvFrame(int fd, FrameHeader* header, std::vector<std::byte>* payload, int* received_fd) {
  if (received_fd != nullptr) *received_fd = -1;
  std::byte raw[kFrameHeaderBytes];
  KV_RETURN_IF_ERROR(ReadFull(fd, raw, sizeof(raw), received_fd, /*first=*/true));
  uint32_t magic = DecodeFixed32(raw);
  uint16_t op = DecodeFixed16(raw + 4);
  uint32_t length = DecodeFixed32(raw + 16);
  if (magic != kFrameMagic) {
    return Status::Corruption("not a kvtier service frame (bad magic): is the peer kvtier?");
  }
  if (op == 0 || op > kOpMax) {
    return Status::Corruption("a kvtier service frame with unknown op " + std::to_string(op));
  }
  if (length > kFramePayloadMax) {
    return Status::Corruption("a kvtier service frame of " + std::to_string(length) +
                              " bytes exceeds the protocol's limit");
  }
  header->op = static_cast<Op>(op);
  header->id = DecodeFixed64(raw + 8);
  header->payload_bytes = length;
  payload->resize(length);
  if (length > 0) KV_RETURN_IF_ERROR(ReadFull(fd, payload->data(), length, nullptr, false));
  return Status::Ok();
}

namespace {

// The remote store's rows on the wire, each as its own type.
void PutStat(uint64_t v, WireWriter* w) { w->U64(v); }
void PutStat(uint32_t v, WireWriter* w) { w->U32(v); }
void PutStat(BreakerState v, WireWriter* w) { w->U8(static_cast<uint8_t>(v)); }
void GetStat(WireReader* r, uint64_t* v) { *v = r->U64(); }
void GetStat(WireReader* r, uint32_t* v) { *v = r->U32(); }
void GetStat(WireReader* r, BreakerState* v) {
  const uint8_t state = r->U8();
  *v = state <= static_cast<uint8_t>(BreakerState::kHalfOpen) ? static_cast<BreakerState>(state)
                                                                : BreakerState::kClosed;
}

void PutRemoteStoreStats(const std::optional<RemoteStoreStats>& remote, WireWriter* w) {
  w->U8(remote.has_value() ? 1 : 0);
  if (!remote.has_value()) return;
#define KVTIER_WIRE_PUT(name, type, kind, unit, scope, help) PutStat(remote->name, w);
  KVTIER_REMOTE_STORE_STATS(KVTIER_WIRE_PUT)
#undef KVTIER_WIRE_PUT
}

std::optional<RemoteStoreStats> GetRemoteStoreStats(WireReader* r) {
  if (r->U8() != 1) return std::nullopt;
  RemoteStoreStats remote;
#define KVTIER_WIRE_GET(name, type, kind, unit, scope, help) GetStat(r, &remote.name);
  KVTIER_REMOTE_STORE_STATS(KVTIER_WIRE_GET)
#undef KVTIER_WIRE_GET
  if (!r->ok()) return std::nullopt;
  return remote;
}

}  // namespace

void PutEngineStats(const EngineStats& s, WireWriter* w, bool remote_store) {
  for (uint64_t v : {s.lookups, s.lookup_hit_tokens, s.lookup_tokens, s.loads, s.load_blocks,
                     s.load_failures, s.stores, s.store_blocks, s.busy_rejections, s.prefetches,
                     s.prefetch_blocks, s.corrupt_blocks, s.remote_put_errors,
                     s.remote_not_admitted, s.remote_over_budget, s.remote_lookup_errors,
                     s.background_writebacks, s.staged_copy_bytes, s.ratio_samples,
                     s.ratio_cv_events, s.prediction_accesses, s.prediction_scored,
                     s.prediction_hits, s.prediction_promoted_blocks, s.prediction_useful_blocks,
                     s.hints, s.hint_promoted_blocks, s.hint_useful_blocks,
                     s.prediction_dropped_blocks, s.prediction_sessions,
                     s.prediction_tasks_pending}) {
    w->U64(v);
  }
  w->F64(s.prediction_accuracy);
  w->U32(static_cast<uint32_t>(s.tiers.size()));
  for (const TierStats& t : s.tiers) {
    w->U8(static_cast<uint8_t>(t.kind));
    for (uint64_t v : {t.capacity_bytes, t.used_bytes, t.blocks, t.hits, t.evictions,
                       t.writebacks, t.promotions, t.write_failures}) {
      w->U64(v);
    }
  }
  // Appended after the tiers, so that a client from before reads the stats as it did (it ignores
  // trailing bytes) and a client reading a service from before finds none.
  for (const TierStats& t : s.tiers) {
    w->U64(t.writeback_horizon_us);
    w->U64(t.writeback_lag_us);
  }
  // Appended after the horizons, only when the request asked (a client from before reads the
  // horizons only when nothing follows them).
  if (!remote_store) return;
  PutRemoteStoreStats(s.remote, w);
  // Appended after the remote block (a client from before ignores trailing bytes).
  for (const TierStats& t : s.tiers) {
    w->U64(t.write_bytes);
    w->U64(t.staged_write_bytes);
  }
  // Appended after the write bytes: each tier's name (a client from before ignores them).
  for (const TierStats& t : s.tiers) w->Str(t.name);
}

EngineStats GetEngineStats(WireReader* r) {
  EngineStats s;
  for (uint64_t* v : {&s.lookups, &s.lookup_hit_tokens, &s.lookup_tokens, &s.loads,
                      &s.load_blocks, &s.load_failures, &s.stores, &s.store_blocks,
                      &s.busy_rejections, &s.prefetches, &s.prefetch_blocks, &s.corrupt_blocks,
                      &s.remote_put_errors, &s.remote_not_admitted, &s.remote_over_budget,
                      &s.remote_lookup_errors, &s.background_writebacks, &s.staged_copy_bytes,
                      &s.ratio_samples, &s.ratio_cv_events, &s.prediction_accesses,
                      &s.prediction_scored, &s.prediction_hits, &s.prediction_promoted_blocks,
                      &s.prediction_useful_blocks, &s.hints, &s.hint_promoted_blocks,
                      &s.hint_useful_blocks, &s.prediction_dropped_blocks,
                      &s.prediction_sessions, &s.prediction_tasks_pending}) {
    *v = r->U64();
  }
  s.prediction_accuracy = r->F64();
  uint32_t tiers = r->U32();
  for (uint32_t i = 0; i < tiers && i < 16 && r->ok(); ++i) {
    TierStats t;
    uint8_t kind = r->U8();
    t.kind = kind <= static_cast<uint8_t>(TierKind::kRemote) ? static_cast<TierKind>(kind)
                                                             : TierKind::kNone;
    for (uint64_t* v : {&t.capacity_bytes, &t.used_bytes, &t.blocks, &t.hits, &t.evictions,
                        &t.writebacks, &t.promotions, &t.write_failures}) {
      *v = r->U64();
    }
    s.tiers.push_back(t);
  }
  if (r->ok() && r->remaining() >= s.tiers.size() * 16) {  // The write-back horizons.
    for (TierStats& t : s.tiers) {
      t.writeback_horizon_us = r->U64();
      t.writeback_lag_us = r->U64();
    }
  }
  if (r->ok() && r->remaining() > 0) s.remote = GetRemoteStoreStats(r);
  if (r->ok() && r->remaining() >= s.tiers.size() * 16) {  // The tiers' write bytes.
    for (TierStats& t : s.tiers) {
      t.write_bytes = r->U64();
      t.staged_write_bytes = r->U64();
    }
  }
  // The tiers' names, from a service that sends them; one that is not a tier's name is dropped
  // (the surfaces then show the kind's).
  for (TierStats& t : s.tiers) {
    if (!r->ok() || r->remaining() == 0) break;
    t.name = r->Str(kTierNameMax);
    if (!IsTierName(t.name)) t.name.clear();
  }
  return s;
}

}  // namespace kvtier::serve
