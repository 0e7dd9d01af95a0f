// The wire protocol between kvtier's node service and its clients (serve/server.h,
// serve/client.h), over a Unix stream socket. KV bytes never travel here: requests name blocks by
// their offsets in the connection's shared staging region.
//
// A frame: a 24-byte header (magic "KVS1", op, flags, request id, payload length, reserved 0),
// then the payload, little-endian. Requests carry a client-chosen id; every reply, layer
// completion and store completion carries the id of its request. The service's hello reply
// carries the staging region's memfd (SCM_RIGHTS).
//
//   op            client -> service                      service -> client
//   kHello        version, token, name                   kHelloReply: status, layout, block
//                                                        bytes, staging bytes, connection id
//   kMakeNamespace tenant id, extra keys                 kReply: status, namespace handle
//   kLookup       ns, session, tokens                    kReply: status, matched, chunk tiers
//   kLoad         ns, tokens, block offsets              kReply: status, chunks; then
//                                                        kLayerDone frames (first layer, count,
//                                                        a status per layer) covering every
//                                                        layer in order, one per run of layers
//                                                        that arrived together
//   kStore        ns, tokens, block offsets, priority,   kReply: status, chunks stored; then
//                 ttl, first chunk                       kStoreDone (status)
//   kPrefetch / kHint  ns, tokens (, session)            kReply: status
//   kPin          ns, tokens                             kReply: status, pin id, chunks
//   kUnpin        pin id                                 (none)
//   kFlush, kDrain                                       kReply: status
//   kStats        (remote store flag)                    kReply: status, EngineStats
//   kServiceStats                                        kReply: status, JSON text
//   kClearTenant  uid, tenant id                         kReply: status, new generation
//
// Every read is bounds-checked: a malformed payload fails WireReader::ok() and the request gets
// InvalidArgument (the service counts it in bad_requests).
//
// Thread safety: WireWriter/WireReader are values used by one thread. SendFrame is not
// synchronised: callers serialise sends on one socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "kvtier/status.h"

namespace kvtier::serve {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kFrameMagic = 0x3153564bu;  // "KVS1"
inline constexpr size_t kFrameHeaderBytes = 24;
// Tokens of the longest request (16 Mi tokens) and their block offsets, with room to spare.
inline constexpr uint32_t kFramePayloadMax = 96u << 20;
inline constexpr size_t kNameBytesMax = 256;     // Client names, tokens.
inline constexpr size_t kTenantBytesMax = 4096;  // Tenant ids and each extra key.
inline constexpr size_t kExtraKeysMax = 64;
// Staging offsets are aligned to this; staging slots are block_bytes rounded up to it.
inline constexpr uint64_t kStagingAlign = 64;

enum class Op : uint16_t {
  kHello = 1,
  kHelloReply = 2,
  kReply = 3,
  kMakeNamespace = 4,
  kLookup = 5,
  kLoad = 6,
  kLayerDone = 7,
  kStore = 8,
  kStoreDone = 9,
  kPrefetch = 10,
  kHint = 11,
  kPin = 12,
  kUnpin = 13,
  kFlush = 14,
  kStats = 15,
  kServiceStats = 16,
  kDrain = 17,
  kClearTenant = 18,
};

struct FrameHeader {
  Op op = Op::kReply;
  uint64_t id = 0;
  uint32_t payload_bytes = 0;
};

class WireWriter {
 public:
  void U8(uint8_t v) { bytes_.push_back(static_cast<std::byte>(v)); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void F64(double v);
  void Str(std::string_view s);
  void U32s(std::span<const uint32_t> v);
  void U64s(std::span<const uint64_t> v);
  void PutStatus(const Status& s);
  void Append(const WireWriter& other) {
    bytes_.insert(bytes_.end(), other.bytes_.begin(), other.bytes_.end());
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

// Reads a payload; the first out-of-bounds read (or a string or array longer than its limit)
// makes ok() false and every later read return 0 / empty.
class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  uint8_t U8();
  uint32_t U32();
  uint64_t U64();
  double F64();
  std::string Str(size_t max_bytes);
  std::vector<uint32_t> U32s(size_t max_count);
  std::vector<uint64_t> U64s(size_t max_count);
  Status GetStatus();
  bool ok() const { return ok_; }
  size_t consumed() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  bool done() const { return ok_ && pos_ == bytes_.size(); }

 private:
  bool Take(size_t n, const std::byte** p);
  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Writes the whole frame (retrying short writes and EINTR), with `pass_fd` (>= 0) attached as
// SCM_RIGHTS. IoError/Unavailable when the peer is gone or the socket's send timeout expired.
Status SendFrame(int fd, Op op, uint64_t id, std::span<const std::byte> payload,
                 int pass_fd = -1);
// Reads one frame: the header, checked (magic, op range, payload <= kFramePayloadMax), then the
// payload into *payload. *received_fd (when given) gets a descriptor passed with the frame, or
// -1. Unavailable at end of stream, TimedOut when the socket's receive timeout expired,
// InvalidArgument (Corruption) for a bad header.
Status RecvFrame(int fd, FrameHeader* header, std::vector<std::byte>* payload,
                 int* received_fd = nullptr);

// The kStats request's flag asking for the remote store's counters (EngineStats::remote). A client
// from before sends no flag and gets the reply it knows; a service from before ignores the flag
// and sends no remote block (the reply decodes with remote unset).
inline constexpr uint8_t kStatsWithRemoteStore = 1;

// EngineStats: the engine rows, the tiers, then their write-back horizons; with `remote_store`,
// then a byte saying whether the remote store's rows follow and those rows (in the stats table's
// order, each as its type: U64, U32, or U8 for breaker_state), then each tier's write_bytes and
// staged_write_bytes. GetEngineStats decodes each version: a reply ending after the tiers, the
// horizons or the remote block leaves the rest unset.
void PutEngineStats(const EngineStats& stats, WireWriter* w, bool remote_store = false);
EngineStats GetEngineStats(WireReader* r);

}  // namespace kvtier::serve
