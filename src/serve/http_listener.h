// HttpListener: the node service's small HTTP endpoint for monitoring (docs/serve.md):
//
//   GET /metrics   the text of a callback (Prometheus exposition format, version 0.0.4)
//   GET /healthz   200 "ok\n", or 503 "draining\n" while the health callback says so
//   anything else  404 (405 for a method other than GET and HEAD)
//
// Why a separate listener and not the service's Unix socket: Prometheus and load balancers speak
// HTTP over TCP. It is read-only (no request changes anything), and binds the loopback address
// unless the operator names another one (ParseHttpAddress).
//
// The HTTP parsing is GNU libmicrohttpd's (Debian's libmicrohttpd-dev), run with one internal
// thread that polls every connection: a request larger than request_bytes_max (headers
// included) is answered 431 (or 413) and closed, a connection that sends nothing for
// read_timeout_s is closed, at most connections_max connections are open at once (more are
// refused at accept). A slow or silent client therefore never holds the thread, and Stop() only
// waits for the callback in progress, if any.
//
// Thread safety: Start and Stop from any thread; the callbacks run on the listener's thread,
// one at a time, and must be safe to call concurrently with the owner's other work.
// Ownership: the listener owns its thread and socket; the callbacks (and what they capture) must
// stay valid until Stop() returned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/logger.h"
#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::serve {

inline constexpr uint32_t kHttpRequestBytesMax = 16 * 1024;
inline constexpr uint32_t kHttpConnectionsMax = 64;
inline constexpr uint32_t kHttpReadTimeoutSecondsMax = 3600;

// Where to listen: an IPv4 or IPv6 literal and a port.
struct HttpAddress {
  std::string host;  // "127.0.0.1", "::1", "0.0.0.0", ...
  uint16_t port = 0;
  bool ipv6 = false;
  std::string ToString() const;  // "127.0.0.1:9400", "[::1]:9400".
};

// Reads an --http value: "PORT" or ":PORT" (the loopback address 127.0.0.1), "localhost:PORT",
// "HOST:PORT" with an IPv4 literal, or "[HOST]:PORT" with an IPv6 literal. Host names other than
// localhost are refused (no name resolution: the operator names the address the port is opened
// on). PORT is 0 to 65535 (0: any free port). InvalidArgument naming the problem.
Result<HttpAddress> ParseHttpAddress(std::string_view text);

// True for 127.0.0.0/8 and ::1.
bool IsLoopback(const HttpAddress& address);

struct HttpListenerOptions {
  HttpAddress address;                   // Required (ParseHttpAddress).
  std::function<std::string()> metrics;  // Required: the body of GET /metrics.
  // Why /healthz answers 503 ("draining", "starting"); an empty string, or nullptr: 200 ok.
  std::function<std::string()> unhealthy;
  uint32_t request_bytes_max = 8 * 1024;  // Request line and headers; at least 2048.
  uint32_t connections_max = 16;          // At least 1, at most kHttpConnectionsMax.
  uint32_t read_timeout_s = 10;           // Idle connections are closed; 1 to the max.
  Logger* logger = nullptr;               // Borrowed; nullptr: silent.

  Status Validate() const;
};

class HttpListener {
 public:
  // Binds and listens (IoError naming the address when the port is taken or cannot be bound),
  // then serves on its own thread until Stop().
  static Result<std::unique_ptr<HttpListener>> Start(const HttpListenerOptions& options);
  ~HttpListener();  // Stop().
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Closes the listening socket and every connection, joins the thread. Idempotent.
  void Stop();
  // The address bound, with the port the kernel chose when the options asked for 0.
  const HttpAddress& address() const { return bound_; }

  struct Impl;

 private:
  HttpListener(std::unique_ptr<Impl> impl, HttpAddress bound);
  std::unique_ptr<Impl> impl_;
  HttpAddress bound_;
};

}  // namespace kvtier::serve
