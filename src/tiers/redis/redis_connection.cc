// See redis_connection.h.
#include "tiers/redis/redis_connection.h"

// The reader's buffer is an sds string (TrimReaderBuffer). hiredis 0.14's sds.h has no C++ guard
// and hiredis.h includes it outside its own, so it comes first, with C linkage.
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/assert.h"
#include "core/limits.h"

namespace kvtier {
namespace {

// A pipeline window: hiredis buffers every appended command in memory before the first read, so
// a batch is sent in windows to bound that buffer (and the server's input buffer).
constexpr size_t kWindowCommandsMax = 256;
constexpr uint64_t kWindowBytesMax = 64 * kMiB;
// Bytes one socket read of replies may move (RedisConnection::ReadReply).
constexpr size_t kReplyReadBytes = 512 * kKiB;
// A status, error or integer line longer than this is refused: kvtier's are a few dozen bytes.
constexpr uint64_t kReplyLineBytesMax = 64 * kKiB;
// The direct path (ReadReplyInto) reads a reply's first bytes with reads of at most this size,
// so that at most this much of a large value arrives with its header (and is copied from the
// reader's buffer, the rest landing straight in place); a small reply usually arrives whole.
constexpr size_t kPeekBytes = 4 * kKiB;
// "$" and at most 20 digits and CRLF: a longer first line is not a length the direct path takes.
constexpr size_t kBulkHeaderBytesMax = 24;
static_assert(kRedisReplyBytesMax >= 2 * kReplyReadBytes);

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The read task hiredis's reader is in the middle of, or nullptr between replies. hiredis 1.x
// keeps a growable stack of pointers where 0.14 has a fixed array.
const redisReadTask* CurrentTask(const redisReader* r) {
  if (r->ridx < 0) return nullptr;
#if HIREDIS_MAJOR >= 1
  return r->task[r->ridx];
#else
  return &r->rstack[r->ridx];
#endif
}

// The length a bulk string declares whose bytes the reader is still waiting for, or -1. hiredis
// consumes an item's type byte first and leaves its length line unparsed in the buffer (at pos)
// until the whole string has arrived; this reads that line as soon as it is complete.
long long PendingBulkBytes(const redisReader* r) {
  const redisReadTask* task = CurrentTask(r);
  if (task == nullptr || task->type != REDIS_REPLY_STRING || r->pos >= r->len) return -1;
  const char* begin = r->buf + r->pos;
  const char* end = r->buf + r->len;
  const char* cr =
      static_cast<const char*>(std::memchr(begin, '\r', static_cast<size_t>(end - begin)));
  if (cr == nullptr) return -1;
  long long bytes = -1;
  const auto [last, ec] = std::from_chars(begin, cr, bytes);
  if (ec != std::errc() || last != cr) return -1;  // The reader reports the bad header itself.
  return bytes;
}

// True while the reader waits for the end of a status, error or integer line.
bool InLine(const redisReader* r) {
  const redisReadTask* task = CurrentTask(r);
  return task != nullptr && (task->type == REDIS_REPLY_STATUS || task->type == REDIS_REPLY_ERROR ||
                             task->type == REDIS_REPLY_INTEGER);
}

// What the first bytes of a reply say, for the direct path.
enum class BulkHead : uint8_t {
  kNeedMore = 0,  // Not enough bytes yet to tell.
  kBulk = 1,      // "$<bytes>\r\n", bytes >= 0: *bytes and *head_bytes are set.
  kOther = 2,     // Anything else (nil, an error, another type, a malformed header).
};

BulkHead ParseBulkHead(const char* p, size_t n, uint64_t* bytes, size_t* head_bytes) {
  if (n == 0) return BulkHead::kNeedMore;
  if (p[0] != '$') return BulkHead::kOther;
  const size_t scan = std::min(n, kBulkHeaderBytesMax);
  const auto* cr = static_cast<const char*>(std::memchr(p, '\r', scan));
  if (cr == nullptr) return n >= kBulkHeaderBytesMax ? BulkHead::kOther : BulkHead::kNeedMore;
  const size_t cr_at = static_cast<size_t>(cr - p);
  if (cr_at + 1 == n) return BulkHead::kNeedMore;  // Its '\n' has not arrived.
  if (p[cr_at + 1] != '\n') return BulkHead::kOther;
  uint64_t value = 0;
  const auto [last, ec] = std::from_chars(p + 1, cr, value);  // No sign: "$-1" is kOther.
  if (ec != std::errc() || last != cr || cr_at == 1) return BulkHead::kOther;
  *bytes = value;
  *head_bytes = cr_at + 2;
  return BulkHead::kBulk;
}

// Moves `*next` and the iovec it points at past `n` bytes just transferred.
void AdvanceIov(std::span<iovec> iov, size_t* next, size_t n) {
  while (*next < iov.size() && n >= iov[*next].iov_len) n -= iov[(*next)++].iov_len;
  if (n != 0) {
    KV_CHECK(*next < iov.size());
    iov[*next].iov_base = static_cast<char*>(iov[*next].iov_base) + n;
    iov[*next].iov_len -= n;
  }
}

timeval ToTimeval(uint32_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// hiredis writes with write(2), which raises SIGPIPE when the server has gone away; the default
// action kills the process. Installing a process-wide handler would be global state a library must
// not own, so SIGPIPE is blocked in this thread for the duration of the I/O, and a SIGPIPE raised
// by it is consumed before the mask is restored.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    blocked_ = pthread_sigmask(SIG_BLOCK, &block, &old_) == 0;
  }
  ~ScopedSigpipeBlock() {
    if (!blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        sigset_t pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        const timespec zero{};
        while (sigtimedwait(&pipe_only, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_{};
  bool was_pending_ = false;
  bool blocked_ = false;
};

bool LooksLikeTimeout(const redisContext* c) {
#ifdef REDIS_ERR_TIMEOUT
  if (c->err == REDIS_ERR_TIMEOUT) return true;
#endif
  if (c->err != REDIS_ERR_IO) return false;
  const std::string_view text = c->errstr;
  return text.find("timed out") != std::string_view::npos ||
         text.find("temporarily unavailable") != std::string_view::npos ||
         text.find("Timeout") != std::string_view::npos;
}

// Links a new reply object into its parent array, if it has one.
void* Attach(const redisReadTask* task, redisReply* r) {
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    KV_CHECK(parent->type == REDIS_REPLY_ARRAY);
    KV_CHECK(task->idx >= 0 && static_cast<size_t>(task->idx) < parent->elements);
    parent->element[task->idx] = r;
  }
  return r;
}

redisReply* NewReply(int type) {
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r != nullptr) r->type = type;
  return r;
}

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  redisReply* r = NewReply(task->type);
  if (r == nullptr) return nullptr;
  r->str = static_cast<char*>(std::malloc(len + 1));
  if (r->str == nullptr) {
    std::free(r);
    return nullptr;
  }
  if (len != 0) std::memcpy(r->str, str, len);
  r->str[len] = '\0';
  r->len = len;
  return Attach(task, r);
}

// Records why an array was refused (when the reader has a budget) and refuses it: hiredis then
// fails the read with an out-of-memory error.
void* Refuse(RedisReplyBudget* budget, std::string why) {
  if (budget != nullptr && budget->refused.empty()) budget->refused = std::move(why);
  return nullptr;
}

// Arrays are charged to the reader's budget as they are declared, before their element table is
// allocated, so the declared counts of a whole reply (nested arrays included) are bounded.
void* CreateArray(const redisReadTask* task, int elements) {
  auto* budget = static_cast<RedisReplyBudget*>(task->privdata);
  if (elements < 0 || elements > kRedisReplyElementsMax) {
    return Refuse(budget, "an array of " + std::to_string(elements) + " elements (at most " +
                              std::to_string(kRedisReplyElementsMax) + ")");
  }
  int depth = 1;
  for (const redisReadTask* p = task->parent; p != nullptr && depth <= kRedisReplyDepthMax;
       p = p->parent) {
    ++depth;
  }
  if (depth > kRedisReplyDepthMax) {
    return Refuse(budget, "arrays nested more than " + std::to_string(kRedisReplyDepthMax) +
                              " deep");
  }
  if (budget != nullptr) {
    if (budget->elements_max == 0) return Refuse(budget, "an array reply to this command");
    if (static_cast<uint64_t>(elements) > budget->elements_left) {
      return Refuse(budget, "arrays of more than " + std::to_string(budget->elements_max) +
                                " elements in all");
    }
    budget->elements_left -= static_cast<uint64_t>(elements);
  }
  redisReply* r = NewReply(REDIS_REPLY_ARRAY);
  if (r == nullptr) return nullptr;
  if (elements > 0) {
    r->element = static_cast<redisReply**>(
        std::calloc(static_cast<size_t>(elements), sizeof(redisReply*)));
    if (r->element == nullptr) {
      std::free(r);
      return nullptr;
    }
  }
  r->elements = static_cast<size_t>(elements);
  return Attach(task, r);
}

void* CreateInteger(const redisReadTask* task, long long value) {
  redisReply* r = NewReply(REDIS_REPLY_INTEGER);
  if (r == nullptr) return nullptr;
  r->integer = value;
  return Attach(task, r);
}

void* CreateNil(const redisReadTask* task) {
  redisReply* r = NewReply(REDIS_REPLY_NIL);
  return r == nullptr ? nullptr : Attach(task, r);
}

constinit const redisReplyObjectFunctions kBoundedReplyFunctions = {
    CreateString, CreateArray, CreateInteger, CreateNil, freeReplyObject};

uint64_t CommandBytes(const RedisCommand& command) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < command.argc; ++i) bytes += command.args[i].size();
  return bytes;
}

}  // namespace

// hiredis takes a non-const pointer but never writes through it.
redisReplyObjectFunctions* RedisBoundedReplyFunctions() {
  return const_cast<redisReplyObjectFunctions*>(&kBoundedReplyFunctions);
}

void RedisReaderSetBudget(redisReader* reader, RedisReplyBudget* budget) {
  reader->privdata = budget;
}

std::string RedisEndpoint::ToString() const { return host + ":" + std::to_string(port); }

Result<std::vector<std::string>> SplitRedisEndpoints(std::string_view list) {
  std::vector<std::string> out;
  const std::string whole(list);
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (item.empty()) {
      return Status::InvalidArgument("empty item in the endpoint list '" + whole + "'");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return Status::InvalidArgument("redis endpoint is not host:port: " + std::string(text));
  }
  uint32_t port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port == 0 || port > 65535) {
    return Status::InvalidArgument("redis endpoint has a bad port: " + std::string(text));
  }
  return RedisEndpoint{.host = std::string(text.substr(0, colon)),
                       .port = static_cast<uint16_t>(port)};
}

void RedisReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

bool RedisReplyLanded(const redisReply& reply) {
  return reply.type == REDIS_REPLY_STRING && reply.str == nullptr;
}

const char* RedisErrorText(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ERROR) return nullptr;
  return reply->str;
}

RedisConnection::RedisConnection(RedisEndpoint endpoint, RedisConnectionOptions options,
                                 Logger* logger)
    : endpoint_(std::move(endpoint)), options_(std::move(options)), logger_(logger) {}

RedisConnection::~RedisConnection() {
  if (context_ != nullptr) redisFree(context_);
}

Status RedisConnection::EnsureConnected() {
  // An idle link the server closed meanwhile (a restart, its idle timeout) would fail the next
  // command; one that has bytes nobody asked for is out of step. Either is replaced before use.
  if (context_ != nullptr) {
    const Status stale = CheckIdleLink();
    if (stale.ok()) return Status::Ok();
    Drop(stale);
  }
  ScopedSigpipeBlock no_sigpipe;
  Status s = Connect();
  if (!s.ok()) {
    Drop(s);
    return s;
  }
  MarkUp();
  return Status::Ok();
}

Status RedisConnection::CheckIdleLink() const {
  std::byte probe{};
  const ssize_t n = recv(context_->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();  // Alive, quiet.
  if (n == 0) {
    return Status::Unavailable("redis " + endpoint_.ToString() +
                               ": the server closed the idle connection");
  }
  if (n > 0) {
    return Status::Unavailable("redis " + endpoint_.ToString() +
                               ": bytes arrived on the idle connection that no command asked for");
  }
  return Status::Unavailable("redis " + endpoint_.ToString() +
                             ": idle connection: " + std::strerror(errno));
}

Status RedisConnection::Connect() {
  context_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port,
                                     ToTimeval(options_.connect_timeout_ms));
  if (context_ == nullptr) return Status::Unavailable("redis: cannot allocate a context");
  if (context_->err != 0) return ContextError("connect");
  context_->reader->fn = RedisBoundedReplyFunctions();
  RedisReaderSetBudget(context_->reader, &budget_);
#if HIREDIS_MAJOR >= 1
  context_->reader->maxelements = kRedisReplyElementsMax;
#endif
  // Keep the reader's buffer between replies: freeing it after each large value and growing it
  // again for the next costs a page fault per 4 KiB of every value. TrimReaderBuffer bounds
  // what is kept.
  context_->reader->maxbuf = 0;
  // AUTH (when configured) and PING, pipelined, each under its own deadline like any command:
  // hiredis's blocking redisCommand would bound each socket read, not the reply.
  std::array<RedisCommand, 2> commands{};
  size_t count = 0;
  if (!options_.password.empty()) {
    RedisCommand& auth = commands[count++];
    auth.args[auth.argc++] = "AUTH";
    if (!options_.user.empty()) auth.args[auth.argc++] = options_.user;
    auth.args[auth.argc++] = options_.password;
  }
  RedisCommand& ping = commands[count++];
  ping.args[ping.argc++] = "PING";
  std::array<RedisReplyPtr, 2> replies;
  KV_RETURN_IF_ERROR(ExecuteWindow(std::span(commands.data(), count),
                                   std::span(replies.data(), count), 0, nullptr));
  if (count == 2) KV_RETURN_IF_ERROR(CheckAuthReply(replies[0].get()));
  return CheckPingReply(replies[count - 1].get());
}

Status RedisConnection::CheckPingReply(const redisReply* pong) const {
  if (const char* error = RedisErrorText(pong); error != nullptr) {
    const std::string text = error;
    if (text.rfind("NOAUTH", 0) == 0) {
      return Status::InvalidArgument("redis " + endpoint_.ToString() +
                                     ": the server requires AUTH but no password is configured (" +
                                     text + ")");
    }
    return Status::Unavailable("redis " + endpoint_.ToString() + ": PING failed: " + text);
  }
  return Status::Ok();
}

Status RedisConnection::CheckAuthReply(const redisReply* reply) const {
  if (const char* error = RedisErrorText(reply); error != nullptr) {
    const std::string who =
        options_.user.empty() ? "the default user" : "user '" + options_.user + "'";
    return Status::InvalidArgument("redis " + endpoint_.ToString() + ": AUTH as " + who +
                                   " failed: " + error);
  }
  return Status::Ok();
}

Status RedisConnection::Execute(std::span<const RedisCommand> commands,
                                std::span<RedisReplyPtr> replies, RedisReplyObserver* observer) {
  KV_CHECK(commands.size() == replies.size());
  KV_RETURN_IF_ERROR(EnsureConnected());
  ScopedSigpipeBlock no_sigpipe;
  size_t begin = 0;
  while (begin < commands.size()) {
    size_t end = begin;
    uint64_t bytes = 0;
    while (end < commands.size() && end - begin < kWindowCommandsMax &&
           (end == begin || bytes + CommandBytes(commands[end]) <= kWindowBytesMax)) {
      bytes += CommandBytes(commands[end]);
      ++end;
    }
    Status s = ExecuteWindow(commands.subspan(begin, end - begin),
                             replies.subspan(begin, end - begin), begin, observer);
    if (!s.ok()) {
      Drop(s);
      return s;
    }
    begin = end;
  }
  return Status::Ok();
}

Status RedisConnection::ExecuteWindow(std::span<const RedisCommand> commands,
                                      std::span<RedisReplyPtr> replies, size_t first_index,
                                      RedisReplyObserver* observer) {
  KV_RETURN_IF_ERROR(SendCommands(commands));
  for (size_t i = 0; i < commands.size(); ++i) {
    for (int part = commands[i].asking ? 2 : 1; part > 0; --part) {
      void* raw = nullptr;
      if (part == 1 && commands[i].bulk_target != nullptr) {
        KV_RETURN_IF_ERROR(ReadReplyInto(commands[i].bulk_target, &raw));
      } else {
        // ASKING's own reply (part 2) is a status line.
        const int64_t deadline_ns = NowNs() + int64_t{options_.command_timeout_ms} * 1'000'000;
        KV_RETURN_IF_ERROR(
            ReadReply(part == 1 ? commands[i].reply_elements_max : 0, deadline_ns, &raw));
      }
      replies[i].reset(static_cast<redisReply*>(raw));  // The ASKING reply is replaced.
    }
    if (observer != nullptr) observer->OnReply(first_index + i, *replies[i]);
  }
  return Status::Ok();
}

Status RedisConnection::SendCommands(std::span<const RedisCommand> commands) {
  // RESP framing: "*<argc>\r\n" then "$<bytes>\r\n<arg>\r\n" per argument. The frames are
  // written into one string first (its pointers must not move while the iovecs point into it),
  // then the iovecs interleave them with the arguments, which are sent from where they are.
  std::string& frames = send_frames_;
  frames.clear();
  std::vector<SendPiece>& pieces = send_pieces_;
  pieces.clear();
  auto add = [&](std::string_view header, std::string_view arg, bool last = false) {
    const size_t begin = frames.size();
    frames += header;
    pieces.push_back(
        SendPiece{.frame_begin = begin, .frame_end = frames.size(), .arg = arg, .last = last});
  };
  for (const RedisCommand& command : commands) {
    KV_CHECK(command.argc >= 1 && command.argc <= RedisCommand::kArgsMax);
    if (command.asking) add("*1\r\n$6\r\nASKING\r\n", {});
    std::string header = "*" + std::to_string(command.argc) + "\r\n";
    for (uint32_t i = 0; i < command.argc; ++i) {
      header += "$" + std::to_string(command.args[i].size()) + "\r\n";
      add(header, command.args[i]);
      header = "\r\n";
    }
    add(header, {}, /*last=*/true);
  }
  std::vector<iovec>& iov = send_iov_;
  iov.clear();
  send_command_ends_.clear();
  for (const SendPiece& p : pieces) {
    iov.push_back(iovec{frames.data() + p.frame_begin, p.frame_end - p.frame_begin});
    if (!p.arg.empty()) iov.push_back(iovec{const_cast<char*>(p.arg.data()), p.arg.size()});
    if (p.last) send_command_ends_.push_back(iov.size());
  }
  return WriteIov();
}

Status RedisConnection::WriteIov() {
  std::vector<iovec>& iov = send_iov_;
  const int64_t timeout_ns = int64_t{options_.command_timeout_ms} * 1'000'000;
  int64_t deadline_ns = NowNs() + timeout_ns;  // Of the command being written.
  size_t next = 0;
  size_t command = 0;
  while (next < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + next;
    msg.msg_iovlen = std::min<size_t>(iov.size() - next, IOV_MAX);
    const ssize_t n = sendmsg(context_->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        KV_RETURN_IF_ERROR(WaitReady(POLLOUT, deadline_ns, "write"));
        continue;
      }
      return Status::Unavailable("redis " + endpoint_.ToString() + ": write: " +
                                 std::strerror(errno));
    }
    size_t left = static_cast<size_t>(n);
    while (next < iov.size() && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left != 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
    // Each command written in full starts the next one's deadline.
    while (command < send_command_ends_.size() && next >= send_command_ends_[command]) {
      ++command;
      deadline_ns = NowNs() + timeout_ns;
    }
  }
  return Status::Ok();
}

Status RedisConnection::WaitReady(short events, int64_t deadline_ns, std::string_view what) const {
  while (true) {
    const int64_t left_ns = deadline_ns - NowNs();
    if (left_ns <= 0) break;
    pollfd p{.fd = context_->fd, .events = events, .revents = 0};
    const int ms = static_cast<int>((left_ns + 999'999) / 1'000'000);  // Rounded up.
    const int ready = poll(&p, 1, ms);
    if (ready > 0) return Status::Ok();  // Readable, writable, or an error the I/O will name.
    if (ready < 0 && errno != EINTR) {
      return Status::Unavailable("redis " + endpoint_.ToString() + ": poll: " +
                                 std::strerror(errno));
    }
  }
  return Status::TimedOut("redis " + endpoint_.ToString() + ": " + std::string(what) +
                          ": not done within command_timeout_ms (" +
                          std::to_string(options_.command_timeout_ms) + " ms)");
}

Status RedisConnection::CheckReplyBytes(uint64_t received) const {
  const redisReader* r = context_->reader;
  const uint64_t cap = options_.reply_bytes_max;
  const long long declared = PendingBulkBytes(r);
  std::string why;
  if (declared >= 0 && static_cast<uint64_t>(declared) > cap) {
    why = "a bulk string of " + std::to_string(declared) + " bytes";
  } else if (received > cap) {
    why = "more than " + std::to_string(cap) + " bytes without ending";
  } else if (InLine(r) && r->len - r->pos > kReplyLineBytesMax) {
    why = "a status or error line of more than " + std::to_string(kReplyLineBytesMax) + " bytes";
  } else {
    return Status::Ok();
  }
  return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: refused " + why +
                             " (one reply holds at most " + std::to_string(cap) + " bytes)");
}

Status RedisConnection::ReadReply(uint32_t elements_max, int64_t deadline_ns, void** reply) {
  *reply = nullptr;
  if (reply_buffer_ == nullptr) reply_buffer_ = std::make_unique<char[]>(kReplyReadBytes);
  budget_.elements_max = elements_max;
  budget_.elements_left = elements_max;
  budget_.refused.clear();
  uint64_t received = 0;  // Bytes fed to the reader for this reply (and at most one read more).
  while (true) {
    if (redisReaderGetReply(context_->reader, reply) != REDIS_OK) {
      const std::string why =
          budget_.refused.empty() ? context_->reader->errstr : "refused " + budget_.refused;
      return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " + why);
    }
    if (*reply != nullptr) {
      TrimReaderBuffer();
      return Status::Ok();
    }
    KV_RETURN_IF_ERROR(CheckReplyBytes(received));
    iovec iov{reply_buffer_.get(), kReplyReadBytes};
    size_t n = 0;
    KV_RETURN_IF_ERROR(RecvSome(&iov, 1, deadline_ns, &n));
    received += n;
    if (redisReaderFeed(context_->reader, reply_buffer_.get(), n) != REDIS_OK) {
      const std::string why = context_->reader->errstr;
      return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " + why);
    }
  }
}

Status RedisConnection::RecvSome(iovec* iov, size_t count, int64_t deadline_ns, size_t* got) {
  *got = 0;
  while (true) {
    // Past the deadline even while bytes keep coming: WaitReady says TimedOut at once.
    if (NowNs() >= deadline_ns) return WaitReady(POLLIN, deadline_ns, "read reply");
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = recvmsg(context_->fd, &msg, MSG_DONTWAIT);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Status::Ok();
    }
    if (n == 0) {
      return Status::Unavailable("redis " + endpoint_.ToString() +
                                 ": read reply: the server closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KV_RETURN_IF_ERROR(WaitReady(POLLIN, deadline_ns, "read reply"));
      continue;
    }
    return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " +
                               std::strerror(errno));
  }
}

Status RedisConnection::ReadReplyInto(RedisBulkTarget* target, void** reply) {
  *reply = nullptr;
  if (reply_buffer_ == nullptr) reply_buffer_ = std::make_unique<char[]>(kReplyReadBytes);
  const int64_t deadline_ns = NowNs() + int64_t{options_.command_timeout_ms} * 1'000'000;
  redisReader* r = context_->reader;
  KV_DCHECK(r->ridx == -1);  // Between replies: each read ends with a whole reply or a failure.
  // The reply's first line, from bytes the reader holds already (the tail of an earlier read)
  // and small reads fed to it.
  uint64_t bytes = 0;
  size_t head_bytes = 0;
  while (true) {
    const BulkHead head = ParseBulkHead(r->buf + r->pos, r->len - r->pos, &bytes, &head_bytes);
    if (head == BulkHead::kBulk) break;
    if (head == BulkHead::kOther) return ReadReply(0, deadline_ns, reply);
    iovec iov{reply_buffer_.get(), kPeekBytes};
    size_t n = 0;
    KV_RETURN_IF_ERROR(RecvSome(&iov, 1, deadline_ns, &n));
    if (redisReaderFeed(r, reply_buffer_.get(), n) != REDIS_OK) {
      return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " + r->errstr);
    }
  }
  // A length over the cap is refused by ReadReply at this same header, before its bytes come.
  if (bytes > options_.reply_bytes_max) return ReadReply(0, deadline_ns, reply);
  const std::span<const iovec> pieces = target->Place(bytes);
  if (pieces.empty()) return ReadReply(0, deadline_ns, reply);
  KV_CHECK(pieces.size() <= kRedisBulkPiecesMax);
  uint64_t placed = 0;
  for (const iovec& piece : pieces) placed += piece.iov_len;
  KV_CHECK(placed == bytes);
  auto* landed = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (landed == nullptr) {
    return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: out of memory");
  }
  RedisReplyPtr out(landed);
  out->type = REDIS_REPLY_STRING;  // No str: its bytes are in the target (RedisReplyLanded).
  out->len = static_cast<size_t>(bytes);
  ConsumeReaderBytes(head_bytes);
  KV_RETURN_IF_ERROR(LandBulk(pieces, deadline_ns));
  TrimReaderBuffer();
  *reply = out.release();
  return Status::Ok();
}

Status RedisConnection::LandBulk(std::span<const iovec> pieces, int64_t deadline_ns) {
  std::array<iovec, kRedisBulkPiecesMax + 1> iov{};
  std::copy(pieces.begin(), pieces.end(), iov.begin());
  std::array<char, 2> crlf{};
  iov[pieces.size()] = iovec{crlf.data(), crlf.size()};
  const std::span<iovec> all(iov.data(), pieces.size() + 1);
  size_t next = 0;
  // Bytes the reader already holds (read with the header) go first, by copy.
  const redisReader* r = context_->reader;
  size_t buffered = r->len - r->pos;
  size_t taken = 0;
  while (next < all.size() && buffered != 0) {
    const size_t n = std::min(buffered, all[next].iov_len);
    if (n != 0) std::memcpy(all[next].iov_base, r->buf + r->pos + taken, n);
    taken += n;
    buffered -= n;
    AdvanceIov(all, &next, n);
  }
  ConsumeReaderBytes(taken);
  // The rest straight from the socket: a read never goes past this reply's CRLF.
  while (next < all.size()) {
    if (all[next].iov_len == 0) {
      ++next;
      continue;
    }
    size_t n = 0;
    KV_RETURN_IF_ERROR(RecvSome(all.data() + next, all.size() - next, deadline_ns, &n));
    AdvanceIov(all, &next, n);
  }
  if (crlf[0] != '\r' || crlf[1] != '\n') {
    return Status::Unavailable("redis " + endpoint_.ToString() +
                               ": read reply: Protocol error: a bulk string does not end in CRLF");
  }
  return Status::Ok();
}

void RedisConnection::ConsumeReaderBytes(size_t n) {
  if (n == 0) return;
  redisReader* r = context_->reader;
  KV_CHECK(n <= r->len - r->pos);
  r->pos += n;
  if (r->pos == r->len) {
    sdsclear(r->buf);
  } else {
    KV_CHECK(r->len <= static_cast<size_t>(INT_MAX));
    sdsrange(r->buf, static_cast<int>(r->pos), -1);
  }
  r->pos = 0;
  r->len = sdslen(r->buf);
}

void RedisConnection::TrimReaderBuffer() {
  redisReader* r = context_->reader;
  // Unparsed bytes (later replies of the pipeline) stay; the next reply retries.
  if (r->pos != r->len) return;
  if (sdsalloc(r->buf) <= options_.reader_buffer_retain_bytes) return;
  sds fresh = sdsempty();
  if (fresh == nullptr) return;  // Out of memory: keep the old one until the next reply.
  sdsfree(r->buf);
  r->buf = fresh;
  r->pos = 0;
  r->len = 0;
}

uint64_t RedisConnection::reader_buffer_bytes() const {
  if (context_ == nullptr || context_->reader == nullptr || context_->reader->buf == nullptr) {
    return 0;
  }
  return sdsalloc(context_->reader->buf);
}

Status RedisConnection::ContextError(std::string_view what) const {
  std::string text = "redis " + endpoint_.ToString() + ": " + std::string(what) + ": ";
  text += context_ != nullptr ? context_->errstr : "no context";
  if (context_ != nullptr && LooksLikeTimeout(context_)) return Status::TimedOut(std::move(text));
  return Status::Unavailable(std::move(text));
}

void RedisConnection::Drop(const Status& why) {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  if (link_ != Link::kLost) {
    LogTo(logger_, LogLevel::kWarn,
          "redis " + endpoint_.ToString() + ": connection lost (" + why.ToString() + ")");
    link_ = Link::kLost;
  }
}

void RedisConnection::MarkUp() {
  if (link_ == Link::kLost) {
    ++reconnects_;
    LogTo(logger_, LogLevel::kInfo, "redis " + endpoint_.ToString() + ": connection restored");
  } else if (link_ == Link::kNever) {
    LogTo(logger_, LogLevel::kInfo, "redis " + endpoint_.ToString() + ": connected");
  }
  link_ = Link::kUp;
}

}  // namespace kvtier
