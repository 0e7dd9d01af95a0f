// One client of the node service (server_internal.h): the hello and its checks, the staging
// region, and each request.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/escape.h"
#include "serve/server_internal.h"

namespace kvtier::serve {
namespace {

constexpr uint32_t kHelloTimeoutMs = 5000;

void SetTimeout(int fd, int option, uint32_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  (void)::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

bool SameToken(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Conn::~Conn() { Join(); }

void Conn::Start() { reader_ = std::thread([this] { Run(); }); }

void Conn::Shutdown() { (void)::shutdown(fd_.get(), SHUT_RDWR); }

void Conn::Join() {
  if (reader_.joinable()) reader_.join();
}

ClientStats Conn::Snapshot() const {
  ClientStats s;
  s.id = id_;
  s.pid = static_cast<uint32_t>(cred_.pid);
  s.uid = cred_.uid;
  s.gid = cred_.gid;
  s.name = name_;
  s.requests = counters_.requests;
  s.lookups = counters_.lookups;
  s.lookup_tokens = counters_.lookup_tokens;
  s.lookup_hit_tokens = counters_.lookup_hit_tokens;
  s.loads = counters_.loads;
  s.load_blocks = counters_.load_blocks;
  s.stores = counters_.stores;
  s.store_blocks = counters_.store_blocks;
  s.errors = counters_.errors;
  s.leases_active = counters_.leases_active;
  return s;
}

bool Conn::Admitted(std::string* why) {
  socklen_t len = sizeof(cred_);
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERCRED, &cred_, &len) != 0) {
    *why = "its credentials could not be read";
    return false;
  }
  const ServerOptions& o = server_->options;
  if (cred_.uid == server_->own_uid || cred_.uid == 0) return true;
  if (std::find(o.allowed_uids.begin(), o.allowed_uids.end(), cred_.uid) != o.allowed_uids.end()) {
    return true;
  }
  if (!o.allowed_gids.empty()) {
    std::vector<gid_t> groups(256);
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
    } else {
      groups.clear();
    }
    groups.push_back(cred_.gid);
    for (gid_t g : groups) {
      if (std::find(o.allowed_gids.begin(), o.allowed_gids.end(), g) != o.allowed_gids.end()) {
        return true;
      }
    }
  }
  *why = "uid " + std::to_string(cred_.uid) + " is neither the service's nor allowed";
  return false;
}

Status Conn::SetUpStaging() {
  int memfd = ::memfd_create("kvtier-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) return Status::FromErrno(errno, "memfd_create for a client's staging");
  UniqueFd owned(memfd);
  staging_bytes_ = server_->options.client_staging_bytes;
  if (::ftruncate(memfd, static_cast<off_t>(staging_bytes_)) != 0) {
    return Status::FromErrno(errno, "sizing a client's staging region");
  }
  // Sealed: a client cannot shrink the region under the service's mapping (SIGBUS).
  if (::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Status::FromErrno(errno, "sealing a client's staging region");
  }
  void* p = ::mmap(nullptr, staging_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a client's staging region");
  staging_ = static_cast<std::byte*>(p);
  WireWriter w;
  w.PutStatus(Status::Ok());
  w.Str(server_->layout_text);
  w.U64(server_->block_bytes);
  w.U64(staging_bytes_);
  w.U64(id_);
  return SendFrame(fd_.get(), Op::kHelloReply, 0, w.bytes(), memfd);
}

Status Conn::Handshake() {
  SetTimeout(fd_.get(), SO_RCVTIMEO, kHelloTimeoutMs);
  SetTimeout(fd_.get(), SO_SNDTIMEO, server_->options.send_timeout_ms);
  std::string why;
  bool admitted = Admitted(&why);
  FrameHeader h;
  std::vector<std::byte> payload;
  Status got = RecvFrame(fd_.get(), &h, &payload);
  if (!got.ok() || h.op != Op::kHello) {
    if (!admitted) server_->Refused(cred_, why);
    return got.ok() ? Status::InvalidArgument("the first frame was not a hello") : got;
  }
  WireReader r(payload);
  uint32_t version = r.U32();
  std::string token = r.Str(kNameBytesMax);
  name_ = r.Str(kNameBytesMax);
  if (admitted && !r.ok()) why = "a malformed hello", admitted = false;
  if (admitted && version != kProtocolVersion) {
    why = "protocol version " + std::to_string(version) + " (the service speaks " +
          std::to_string(kProtocolVersion) + ")";
    admitted = false;
  }
  if (admitted && !server_->options.token.empty() && !SameToken(token, server_->options.token)) {
    why = "a missing or wrong token", admitted = false;
  }
  if (admitted && server_->draining) why = "the service is draining", admitted = false;
  if (!admitted) {
    server_->Refused(cred_, why);
    WireWriter w;
    w.PutStatus(Status::Unavailable("the kvtier service refused this client: " + why));
    (void)SendFrame(fd_.get(), Op::kHelloReply, 0, w.bytes());
    return Status::Unavailable(why);
  }
  KV_RETURN_IF_ERROR(SetUpStaging());
  SetTimeout(fd_.get(), SO_RCVTIMEO, 0);  // Clients may idle for as long as they like.
  return Status::Ok();
}

void Conn::Run() {
  Status hello = Handshake();
  admitted_ = hello.ok();
  if (hello.ok()) {
    server_->Log(LogLevel::kInfo, "client " + std::to_string(id_) + " connected: pid " +
                                      std::to_string(cred_.pid) + ", " + DescribeUidText() +
                                      ", name \"" + EscapeForMessage(name_) + "\"");
    load_waiter_ = std::thread([this] { LoadWaiter(); });
    store_waiter_ = std::thread([this] { StoreWaiter(); });
    FrameHeader h;
    std::vector<std::byte> payload;
    while (!server_->stopping) {
      Status s = RecvFrame(fd_.get(), &h, &payload);
      if (!s.ok()) {
        if (s.code() != StatusCode::kUnavailable) {
          ++server_->bad_requests;
          server_->Log(LogLevel::kWarn, "client " + std::to_string(id_) +
                                               " dropped: " + s.message());
        }
        break;
      }
      Serve(h, payload);
    }
  }
  Teardown();
}

std::string Conn::DescribeUidText() const { return "uid " + std::to_string(cred_.uid); }

void Conn::Teardown() {
  uint64_t in_flight = counters_.leases_active;
  if (in_flight > 0) {
    ++server_->disconnects_mid_request;
    server_->leases_orphaned += in_flight;
  }
  {
    MutexLock lock(&q_mu_);
    closing_ = true;
  }
  q_cv_.SignalAll();
  if (load_waiter_.joinable()) load_waiter_.join();
  if (store_waiter_.joinable()) store_waiter_.join();
  pins_.clear();
  if (staging_ != nullptr) ::munmap(staging_, staging_bytes_);
  staging_ = nullptr;
  (void)::shutdown(fd_.get(), SHUT_RDWR);
  if (admitted_) {
    server_->Log(LogLevel::kInfo, "client " + std::to_string(id_) + " disconnected" +
                                      (in_flight > 0 ? " with " + std::to_string(in_flight) +
                                                           " requests in flight (finished "
                                                           "by the service)"
                                                     : std::string()));
  }
  finished_ = true;
}

void Conn::Send(Op op, uint64_t id, const WireWriter& w) {
  MutexLock lock(&send_mu_);
  Status s = SendFrame(fd_.get(), op, id, w.bytes());
  if (!s.ok()) (void)::shutdown(fd_.get(), SHUT_RDWR);  // The reader ends the connection.
}

void Conn::Reply(uint64_t id, const WireWriter& w) { Send(Op::kReply, id, w); }

void Conn::ReplyStatus(uint64_t id, const Status& s) {
  if (!s.ok()) ++counters_.errors;
  WireWriter w;
  w.PutStatus(s);
  Reply(id, w);
}

}  // namespace kvtier::serve
