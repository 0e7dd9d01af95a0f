// The node service's HTTP endpoint: see http_listener.h.
#include "serve/http_listener.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "core/mutex.h"

namespace kvtier::serve {

namespace {

constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kTextType = "text/plain; charset=utf-8";

Result<uint16_t> ParsePort(std::string_view text, std::string_view whole) {
  uint32_t port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || port > 65535) {
    return Status::InvalidArgument("--http '" + std::string(whole) +
                                   "': the port is not a whole number from 0 to 65535");
  }
  return static_cast<uint16_t>(port);
}

}  // namespace

std::string HttpAddress::ToString() const {
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HttpAddress> ParseHttpAddress(std::string_view text) {
  HttpAddress a{.host = "127.0.0.1"};
  const std::string whole(text);
  if (text.find(':') == std::string_view::npos) {  // "9400": the loopback address.
    KV_ASSIGN_OR_RETURN(a.port, ParsePort(text, whole));
    return a;
  }
  std::string_view host;
  std::string_view port;
  if (text.starts_with("[")) {
    const size_t close = text.find("]:");
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("--http '" + whole +
                                     "': an IPv6 address is written "
                                     "[ADDRESS]:PORT");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    a.ipv6 = true;
  } else {
    const size_t colon = text.rfind(':');
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return Status::InvalidArgument("--http '" + whole +
                                     "': write an IPv6 address in "
                                     "brackets, [ADDRESS]:PORT");
    }
  }
  KV_ASSIGN_OR_RETURN(a.port, ParsePort(port, whole));
  if (host.empty() || host == "localhost") return a;  // ":9400" and "localhost:9400".
  a.host = std::string(host);
  unsigned char scratch[sizeof(in6_addr)];
  if (::inet_pton(a.ipv6 ? AF_INET6 : AF_INET, a.host.c_str(), scratch) != 1) {
    return Status::InvalidArgument(
        "--http '" + whole + "': '" + a.host + "' is not an " + (a.ipv6 ? "IPv6" : "IPv4") +
        " address (host names other than localhost are not resolved: give the address)");
  }
  return a;
}

bool IsLoopback(const HttpAddress& a) {
  if (a.ipv6) {
    in6_addr v6{};
    return ::inet_pton(AF_INET6, a.host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
  }
  in_addr v4{};
  return ::inet_pton(AF_INET, a.host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

Status HttpListenerOptions::Validate() const {
  if (!metrics) return Status::InvalidArgument("http listener: no metrics callback");
  if (request_bytes_max < 2048 || request_bytes_max > kHttpRequestBytesMax) {
    return Status::InvalidArgument("http listener: request_bytes_max " +
                                   std::to_string(request_bytes_max) + " is not from 2048 to " +
                                   std::to_string(kHttpRequestBytesMax));
  }
  if (connections_max < 1 || connections_max > kHttpConnectionsMax) {
    return Status::InvalidArgument("http listener: connections_max " +
                                   std::to_string(connections_max) + " is not from 1 to " +
                                   std::to_string(kHttpConnectionsMax));
  }
  if (read_timeout_s < 1 || read_timeout_s > kHttpReadTimeoutSecondsMax) {
    return Status::InvalidArgument("http listener: read_timeout_s " +
                                   std::to_string(read_timeout_s) + " is not from 1 to " +
                                   std::to_string(kHttpReadTimeoutSecondsMax));
  }
  return Status::Ok();
}

struct HttpListener::Impl {
  HttpListenerOptions options;
  Mutex mu;
  MHD_Daemon* daemon KV_GUARDED_BY(mu) = nullptr;
};

namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned int code, std::string_view type,
                 const std::string& body) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // Out of memory: MHD closes the connection.
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, std::string(type).c_str());
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

// libmicrohttpd's access handler: called once the request line and headers are in. A GET has no
// body to wait for, so every request is answered on its first call.
MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                     const char* /*version*/, const char* /*upload_data*/,
                     size_t* /*upload_data_size*/, void** /*con_cls*/) {
  const HttpListenerOptions& o = static_cast<HttpListener::Impl*>(cls)->options;
  const std::string_view m(method);
  if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, kTextType,
                 "only GET and HEAD are served\n");
  }
  const std::string_view path(url);
  if (path == "/metrics") return Reply(connection, MHD_HTTP_OK, kMetricsType, o.metrics());
  if (path == "/healthz") {
    const std::string why = o.unhealthy ? o.unhealthy() : std::string();
    return Reply(connection, why.empty() ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, kTextType,
                 why.empty() ? "ok\n" : why + "\n");
  }
  return Reply(connection, MHD_HTTP_NOT_FOUND, kTextType,
               "not found: the service answers /metrics and /healthz\n");
}

// libmicrohttpd's error lines (a refused connection, a request over the limit): debug lines.
void OnMhdLog(void* cls, const char* format, va_list args) {
  Logger* logger = static_cast<Logger*>(cls);
  if (logger == nullptr) return;
  char line[256];
  std::vsnprintf(line, sizeof(line), format, args);
  std::string text = "http: ";
  text += line;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  logger->Log(LogLevel::kDebug, text);
}

}  // namespace

Result<std::unique_ptr<HttpListener>> HttpListener::Start(const HttpListenerOptions& options) {
  KV_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const HttpAddress& a = options.address;
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  const sockaddr* addr = nullptr;
  if (a.ipv6) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(a.port);
    if (::inet_pton(AF_INET6, a.host.c_str(), &v6.sin6_addr) != 1) {
      return Status::InvalidArgument("--http: '" + a.host + "' is not an IPv6 address");
    }
    addr = reinterpret_cast<const sockaddr*>(&v6);
  } else {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(a.port);
    if (::inet_pton(AF_INET, a.host.c_str(), &v4.sin_addr) != 1) {
      return Status::InvalidArgument("--http: '" + a.host + "' is not an IPv4 address");
    }
    addr = reinterpret_cast<const sockaddr*>(&v4);
  }
  // No MHD_OPTION_LISTENING_ADDRESS_REUSE: on Linux it sets SO_REUSEPORT, and a second service
  // would share the port instead of being refused. (libmicrohttpd sets SO_REUSEADDR itself.)
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
  if (a.ipv6) flags |= MHD_USE_IPv6;
  MHD_Daemon* daemon = MHD_start_daemon(
      flags, a.port, nullptr, nullptr, &OnRequest, impl.get(), MHD_OPTION_SOCK_ADDR, addr,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(options.request_bytes_max),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options.connections_max),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(options.read_timeout_s),
      MHD_OPTION_EXTERNAL_LOGGER, &OnMhdLog, static_cast<void*>(options.logger), MHD_OPTION_END);
  if (daemon == nullptr) {
    return Status::IoError("cannot listen for HTTP on " + a.ToString() +
                           " (the port is taken, or the address is not one of this machine's)");
  }
  HttpAddress bound = a;
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  if (info != nullptr && info->port != 0) bound.port = info->port;
  {
    MutexLock lock(&impl->mu);
    impl->daemon = daemon;
  }
  LogTo(options.logger, LogLevel::kInfo,
        "http: serving /metrics and /healthz on " + bound.ToString());
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl), std::move(bound)));
}

HttpListener::HttpListener(std::unique_ptr<Impl> impl, HttpAddress bound)
    : impl_(std::move(impl)), bound_(std::move(bound)) {}

HttpListener::~HttpListener() { Stop(); }

void HttpListener::Stop() {
  MHD_Daemon* daemon = nullptr;
  {
    MutexLock lock(&impl_->mu);
    std::swap(daemon, impl_->daemon);
  }
  if (daemon != nullptr) MHD_stop_daemon(daemon);
}

}  // namespace kvtier::serve
