// RedisConnection: one blocking hiredis connection to one Redis endpoint, with connect and
// command timeouts, AUTH (ACL user + password), pipelined execution of a batch of commands, and
// automatic reconnection on the next call after any connection-level failure.
//
// Failures are classified once, here: a command whose reply is not complete within its deadline
// is TimedOut, anything else that breaks the connection (refused, reset, EOF, protocol error, a
// reply over its bounds) is Unavailable, and a rejected AUTH is InvalidArgument (a configuration
// error, with the server's message). After any of them the hiredis context is freed: a blocking
// hiredis context is unusable after an I/O error.
//
// A server is not trusted to be quick or well-behaved (docs/remote_tier.md, "Hostile or slow
// servers"): each command has a deadline (command_timeout_ms) for writing it and, separately,
// for its whole reply, however slowly the bytes trickle in; one reply may hold at most
// reply_bytes_max bytes (a longer declared bulk string is refused at its header, before its
// bytes arrive); and it may declare at most RedisCommand::reply_elements_max array elements in
// all, nested at most kRedisReplyDepthMax deep.
//
// Replies are parsed by hiredis's reader, except the bytes of a bulk string whose command names a
// RedisBulkTarget: the connection parses that reply's "$<length>" line itself and receives the
// bytes with readv straight into the target's buffers (docs/remote_tier.md, "The get path").
//
// Logging: one line per link state change: "connected", "connection lost (<why>)",
// "connection restored". Repeated failures while the link is down log nothing more.
//
// Thread safety: not synchronized; the owner (RedisStore) serializes calls.
// Ownership: owns its hiredis context; borrows the Logger. Commands borrow their argument bytes
// for the duration of Execute.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/limits.h"
#include "core/logger.h"
#include "kvtier/result.h"

struct redisContext;  // hiredis; kept out of this header so only redis_*.cc see hiredis.
struct redisReply;
struct redisReplyObjectFunctions;
struct redisReader;

namespace kvtier {

struct RedisEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;  // "host:port"
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// Parses "host:port" (port in 1..65535); InvalidArgument otherwise.
Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text);

// "a:1,b:2" -> {"a:1", "b:2"}: the endpoint lists of the C API and the CLI. An empty item
// ("a:1,,b:2", a trailing comma) is InvalidArgument.
Result<std::vector<std::string>> SplitRedisEndpoints(std::string_view list);

// hiredis's reader buffer is kept between replies (growing it again for every large value costs
// a page fault per 4 KiB), but only up to this size: after a reply, once nothing unread is left
// in it, a buffer grown larger (one huge reply of a hostile or misconfigured server) is released,
// so a connection never pins more than this between calls. It holds a 4 MiB value many times over.
inline constexpr uint64_t kRedisReaderBufferRetainBytes = 64 * kMiB;

// The most bytes one reply may hold (RESP framing included), by default: the largest value the
// remote tier ever stores (a sealed value of kRemoteValueBytesMax payload bytes, its header and
// sealing overhead) plus its bulk-string framing, rounded up to the next MiB. A reply that
// declares or brings more is refused (Unavailable) as soon as it does.
inline constexpr uint64_t kRedisReplyBytesMax = kBlockBytesMax + kMiB;

struct RedisConnectionOptions {
  uint32_t connect_timeout_ms = 200;
  // The deadline of one command: its bytes must be written, and then its whole reply read,
  // within this long each (a server that trickles a reply fails the command when it passes).
  uint32_t command_timeout_ms = 500;
  std::string user;      // Empty: AUTH with the password only (the default user).
  std::string password;  // Empty: no AUTH.
  uint64_t reader_buffer_retain_bytes = kRedisReaderBufferRetainBytes;
  uint64_t reply_bytes_max = kRedisReplyBytesMax;  // Bytes one reply may hold; >= 1 MiB.
};

// Elements one reply array may declare. hiredis 0.14 allocates an array's element table as soon
// as it reads "*<count>", so without a bound a hostile or broken server could make a 400-byte
// reply cost gigabytes. kvtier's largest arrays are CLUSTER SLOTS answers: at most one entry per
// slot, and a few nodes per entry.
inline constexpr int kRedisReplyElementsMax = 1 << 16;
// Elements all the arrays of one CLUSTER SLOTS reply may declare together: 16384 single-slot
// ranges of a master and a replica with their ids and hostnames (about 15 elements each) fit.
// Each element costs about 72 bytes of reply objects, so such a reply holds at most ~19 MiB.
inline constexpr uint32_t kRedisClusterSlotsElementsMax = 1u << 18;
// How deep arrays may nest in a reply: CLUSTER SLOTS is reply > range > node > node metadata.
// (hiredis itself stops at 7.)
inline constexpr int kRedisReplyDepthMax = 4;

// What the reply being parsed may still declare; hiredis's reader passes it to the reply
// constructors (as its privdata). `refused` holds why a reply was refused, for the error.
struct RedisReplyBudget {
  uint64_t elements_max = 0;  // 0: the reply may not be an array at all.
  uint64_t elements_left = 0;
  std::string refused;
};

// Reply constructors for hiredis's reader that build the same redisReply objects as its defaults
// (freeReplyObject frees them) but refuse an array of more than kRedisReplyElementsMax elements,
// more elements than the reader's budget has left (when it has one: RedisReaderSetBudget), or
// one nested deeper than kRedisReplyDepthMax: the reader then fails with an out-of-memory error
// and the call fails like any protocol error. Every connection of the remote tier reads with
// them.
redisReplyObjectFunctions* RedisBoundedReplyFunctions();

// Makes the reply constructors charge `budget` (borrowed; it must outlive the reader's use, or
// be detached with nullptr). Without a budget only the per-array and depth bounds apply.
void RedisReaderSetBudget(redisReader* reader, RedisReplyBudget* budget);

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// Buffers one bulk-string reply may be received into (RedisBulkTarget::Place).
inline constexpr size_t kRedisBulkPiecesMax = 4;

// Where the bytes of a command's bulk-string reply land instead of in a redisReply: a caller that
// knows where a value belongs (RedisStore's GET: the payload straight into the caller's block)
// has the socket read it there, without hiredis's two copies (into its reader's buffer, then
// into the reply's string). Only the bytes go there: the reply's framing is still checked (a
// bulk header, the CRLF after the bytes), its length bounded by reply_bytes_max, its deadline
// kept. A reply that is not a bulk string (nil, an error, anything else) is read as usual.
// Ownership: the connection borrows the target for the duration of Execute.
class RedisBulkTarget {
 public:
  virtual ~RedisBulkTarget() = default;
  // Called with the length a bulk-string reply declares (at most reply_bytes_max) before any
  // of its bytes is read: the buffers that receive them, in order, their lengths adding up to
  // `bytes`, at most kRedisBulkPiecesMax of them, valid until the reply has been read. An empty
  // span declines: the reply is then read into a redisReply as usual. May be called again for
  // a later attempt of the same command (after a redirect).
  virtual std::span<const iovec> Place(uint64_t bytes) = 0;
};

// A bulk-string reply whose bytes landed in its command's RedisBulkTarget: type
// REDIS_REPLY_STRING, `len` its length, and no `str`.
bool RedisReplyLanded(const redisReply& reply);

// One command: up to 6 borrowed arguments. `asking` sends ASKING first (for an ASK redirect);
// its reply is consumed here. `reply_elements_max` is how many array elements its reply may
// declare in all: 0 (every command kvtier sends but CLUSTER SLOTS) refuses any array reply.
// `bulk_target`, when set, receives the bytes of a bulk-string reply (borrowed).
struct RedisCommand {
  static constexpr size_t kArgsMax = 6;
  std::array<std::string_view, kArgsMax> args{};
  uint32_t argc = 0;
  bool asking = false;
  uint32_t reply_elements_max = 0;
  RedisBulkTarget* bulk_target = nullptr;
};

// Told of each reply of a pipeline as soon as it has been read, while the later replies may
// still be arriving, so that the owner can start working on it (RedisStore opens sealed values on
// a worker thread meanwhile). Called on the thread that runs Execute, in command order.
class RedisReplyObserver {
 public:
  virtual ~RedisReplyObserver() = default;
  // `reply` is the final reply of commands[index] (after any ASKING reply), already stored in
  // replies[index]; it stays owned there. It may be an error reply.
  virtual void OnReply(size_t index, const redisReply& reply) = 0;
};

class RedisConnection {
 public:
  RedisConnection(RedisEndpoint endpoint, RedisConnectionOptions options, Logger* logger);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects (TCP, timeouts, AUTH, PING) unless already connected.
  Status EnsureConnected();

  // Runs `commands` pipelined, in windows bounded in count and bytes, and moves the reply of
  // commands[i] into replies[i] (replies.size() == commands.size()). Redis error replies are
  // replies, not failures. On a connection-level failure returns its Status; replies of commands
  // that were answered before it are kept, the others stay null. `observer`, when given, is told
  // of each reply as soon as it is read.
  Status Execute(std::span<const RedisCommand> commands, std::span<RedisReplyPtr> replies,
                 RedisReplyObserver* observer = nullptr);

  const RedisEndpoint& endpoint() const { return endpoint_; }
  bool connected() const { return context_ != nullptr; }
  uint64_t reconnects() const { return reconnects_; }  // Times the link came back after a loss.
  // The bytes hiredis's reader buffer holds allocated now (0 when not connected).
  uint64_t reader_buffer_bytes() const;

 private:
  enum class Link : uint8_t { kNever = 0, kUp = 1, kLost = 2 };

  Status Connect();
  // The replies of the handshake's AUTH and PING, as Connect classifies them.
  Status CheckAuthReply(const redisReply* reply) const;
  Status CheckPingReply(const redisReply* reply) const;
  Status ExecuteWindow(std::span<const RedisCommand> commands, std::span<RedisReplyPtr> replies,
                       size_t first_index, RedisReplyObserver* observer);
  Status ContextError(std::string_view what) const;
  // Writes the commands in RESP, the arguments straight from the caller's memory (no copy into
  // a command buffer, as hiredis's redisAppendCommandArgv would make). Each command's bytes must
  // be written within command_timeout_ms.
  Status SendCommands(std::span<const RedisCommand> commands);
  // Writes send_iov_ (non-blocking writes, waiting for the socket under each command's deadline).
  Status WriteIov();
  // The next reply, read with large reads into reply_buffer_ and fed to hiredis's reader, by
  // `deadline_ns`, at most reply_bytes_max bytes and `elements_max` elements.
  Status ReadReply(uint32_t elements_max, int64_t deadline_ns, void** reply);
  // The next reply, a bulk string's bytes straight into `target`'s buffers (any other reply, or
  // one the target declines, as ReadReply reads it), within command_timeout_ms from now.
  Status ReadReplyInto(RedisBulkTarget* target, void** reply);
  // Receives the rest of a bulk string into `pieces` (the bytes already in the reader's buffer
  // first), then its CRLF, by `deadline_ns`.
  Status LandBulk(std::span<const iovec> pieces, int64_t deadline_ns);
  // One socket read into `iov` (non-blocking, waiting for the socket under `deadline_ns`):
  // *got > 0 bytes, or a failure (the server closed, an error, TimedOut).
  Status RecvSome(iovec* iov, size_t count, int64_t deadline_ns, size_t* got);
  // Drops the first `n` unparsed bytes of the reader's buffer (taken by the direct path).
  void ConsumeReaderBytes(size_t n);
  // Refuses the reply being read once it holds, or its bulk string being read declares, more
  // than reply_bytes_max bytes. `received` counts the reply's bytes fed to the reader so far.
  Status CheckReplyBytes(uint64_t received) const;
  // Waits until the socket is ready for `events` (POLLIN/POLLOUT) or `deadline_ns` (on
  // CLOCK_MONOTONIC) passes: TimedOut then, naming `what`.
  Status WaitReady(short events, int64_t deadline_ns, std::string_view what) const;
  // Releases the reader's buffer when it is empty and above reader_buffer_retain_bytes.
  void TrimReaderBuffer();
  void Drop(const Status& why);
  // Ok when the open connection is idle and still up: the server has neither closed it nor sent
  // anything (peeked without blocking); else Unavailable saying which.
  Status CheckIdleLink() const;
  void MarkUp();

  const RedisEndpoint endpoint_;
  const RedisConnectionOptions options_;
  Logger* const logger_;
  redisContext* context_ = nullptr;  // Owned; freed by Drop and the destructor.
  Link link_ = Link::kNever;
  uint64_t reconnects_ = 0;
  // Socket reads land here before hiredis's reader parses them: one read moves up to this
  // buffer's size, where hiredis's own reads take 16 KiB (256 system calls for a 4 MiB value).
  std::unique_ptr<char[]> reply_buffer_;
  // SendCommands' scratch, kept between calls.
  std::string send_frames_;
  struct SendPiece {
    size_t frame_begin = 0, frame_end = 0;  // The RESP framing before `arg`, in send_frames_.
    std::string_view arg;                   // Empty after a command's last argument.
    bool last = false;                      // The command's final piece.
  };
  std::vector<SendPiece> send_pieces_;
  std::vector<iovec> send_iov_;
  std::vector<size_t> send_command_ends_;  // Per command: the iovec index just past its bytes.
  RedisReplyBudget budget_;                // The reply being read; the reader points at it.
};

// Classifies a reply: nullptr when it is not an error reply, otherwise its text.
const char* RedisErrorText(const redisReply* reply);

}  // namespace kvtier
