// See redis_connection.h.
#include "tiers/redis_connection.h"

// The reader's buffer is an sds string (TrimReaderBuffer). hiredis 0.14's sds.h has no C++ guard
// and hiredis.h includes it outside its own, so it comes first, with C linkage.
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
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

void* CreateArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kRedisReplyElementsMax) return nullptr;  // Refused: "OOM".
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
  if (context_ != nullptr) return Status::Ok();
  ScopedSigpipeBlock no_sigpipe;
  Status s = Connect();
  if (!s.ok()) {
    Drop(s);
    return s;
  }
  MarkUp();
  return Status::Ok();
}

Status RedisConnection::Connect() {
  context_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port,
                                     ToTimeval(options_.connect_timeout_ms));
  if (context_ == nullptr) return Status::Unavailable("redis: cannot allocate a context");
  if (context_->err != 0) return ContextError("connect");
  context_->reader->fn = RedisBoundedReplyFunctions();
  // Keep the reader's buffer between replies: freeing it after each large value and growing it
  // again for the next costs a page fault per 4 KiB of every value. TrimReaderBuffer bounds
  // what is kept.
  context_->reader->maxbuf = 0;
  if (redisSetTimeout(context_, ToTimeval(options_.command_timeout_ms)) != REDIS_OK) {
    return ContextError("set timeout");
  }
  KV_RETURN_IF_ERROR(Authenticate());
  RedisReplyPtr pong(static_cast<redisReply*>(redisCommand(context_, "PING")));
  if (pong == nullptr) return ContextError("PING");
  if (const char* error = RedisErrorText(pong.get()); error != nullptr) {
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

Status RedisConnection::Authenticate() {
  if (options_.password.empty()) return Status::Ok();
  RedisReplyPtr reply;
  if (options_.user.empty()) {
    reply.reset(static_cast<redisReply*>(
        redisCommand(context_, "AUTH %b", options_.password.data(), options_.password.size())));
  } else {
    reply.reset(static_cast<redisReply*>(
        redisCommand(context_, "AUTH %b %b", options_.user.data(), options_.user.size(),
                     options_.password.data(), options_.password.size())));
  }
  if (reply == nullptr) return ContextError("AUTH");
  if (const char* error = RedisErrorText(reply.get()); error != nullptr) {
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
      KV_RETURN_IF_ERROR(ReadReply(&raw));
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
  auto add = [&](std::string_view header, std::string_view arg) {
    const size_t begin = frames.size();
    frames += header;
    pieces.push_back(SendPiece{.frame_begin = begin, .frame_end = frames.size(), .arg = arg});
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
    add(header, {});
  }
  std::vector<iovec>& iov = send_iov_;
  iov.clear();
  for (const SendPiece& p : pieces) {
    iov.push_back(iovec{frames.data() + p.frame_begin, p.frame_end - p.frame_begin});
    if (!p.arg.empty()) iov.push_back(iovec{const_cast<char*>(p.arg.data()), p.arg.size()});
  }
  size_t next = 0;
  while (next < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - next, IOV_MAX));
    const ssize_t n = writev(context_->fd, iov.data() + next, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string text = "redis " + endpoint_.ToString() + ": write: " + std::strerror(errno);
      // The socket's send timeout (redisSetTimeout: SO_SNDTIMEO) expired.
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::TimedOut(text);
      return Status::Unavailable(text);
    }
    size_t left = static_cast<size_t>(n);
    while (next < iov.size() && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left != 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return Status::Ok();
}

Status RedisConnection::ReadReply(void** reply) {
  *reply = nullptr;
  if (reply_buffer_ == nullptr) reply_buffer_ = std::make_unique<char[]>(kReplyReadBytes);
  while (true) {
    if (redisReaderGetReply(context_->reader, reply) != REDIS_OK) {
      const std::string why = context_->reader->errstr;
      return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " + why);
    }
    if (*reply != nullptr) {
      TrimReaderBuffer();
      return Status::Ok();
    }
    const ssize_t n = read(context_->fd, reply_buffer_.get(), kReplyReadBytes);
    if (n > 0) {
      if (redisReaderFeed(context_->reader, reply_buffer_.get(), static_cast<size_t>(n)) !=
          REDIS_OK) {
        const std::string why = context_->reader->errstr;
        return Status::Unavailable("redis " + endpoint_.ToString() + ": read reply: " + why);
      }
      continue;
    }
    if (n == 0) {
      return Status::Unavailable("redis " + endpoint_.ToString() +
                                 ": read reply: the server closed the connection");
    }
    if (errno == EINTR) continue;
    // The socket's receive timeout (redisSetTimeout: SO_RCVTIMEO) expired.
    const std::string text =
        "redis " + endpoint_.ToString() + ": read reply: " + std::strerror(errno);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::TimedOut(text);
    return Status::Unavailable(text);
  }
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
