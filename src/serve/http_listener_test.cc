// Tests of HttpListener (the service's /metrics and /healthz endpoint) and of ParseHttpAddress.
// Each test starts a listener on a free loopback port and talks to it over a real TCP socket,
// with raw requests: well-formed ones, an unknown path and method, a malformed request line, a
// request larger than the limit, and a client that sends half a request and goes silent (its
// connection is closed after the read timeout, and Stop() does not wait for it). Every read is
// bounded by a socket timeout, so a listener that hangs fails the test instead of blocking it.
#include "serve/http_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "core/unique_fd.h"

namespace kvtier::serve {
namespace {

// A connected socket to 127.0.0.1:port whose reads give up after `timeout_s`; -1 on failure.
UniqueFd Connect(uint16_t port, int timeout_s = 10) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  timeval tv{.tv_sec = timeout_s, .tv_usec = 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return UniqueFd();
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything the peer sends until it closes (or the read times out: then "TIMEOUT" is appended).
std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  for (int i = 0; i < 4096; ++i) {  // At most 16 MiB.
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return out;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? out + "TIMEOUT" : out;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// One request on a fresh connection; the whole response ("" when the connection failed).
std::string Exchange(uint16_t port, const std::string& request) {
  UniqueFd fd = Connect(port);
  if (!fd.valid() || !SendAll(fd.get(), request)) return "";
  return ReadAll(fd.get());
}

std::string Get(uint16_t port, const std::string& path) {
  return Exchange(port,
                  "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

class HttpListenerTest : public ::testing::Test {
 protected:
  void StartListener(uint32_t read_timeout_s = 10) {
    HttpListenerOptions o{.address = {.host = "127.0.0.1", .port = 0},
                          .metrics = [] { return std::string("kvtier_up 1\n"); },
                          .unhealthy = [this] { return std::string(draining_ ? "draining" : ""); },
                          .read_timeout_s = read_timeout_s};
    Result<std::unique_ptr<HttpListener>> l = HttpListener::Start(o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(*l);
    port_ = listener_->address().port;
    ASSERT_NE(port_, 0);
  }

  std::atomic<bool> draining_{false};
  std::unique_ptr<HttpListener> listener_;
  uint16_t port_ = 0;
};

TEST_F(HttpListenerTest, MetricsIsTheCallbacksTextInPrometheusFormat) {
  StartListener();
  const std::string r = Get(port_, "/metrics");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nkvtier_up 1\n")) << r;
}

TEST_F(HttpListenerTest, HealthzIs503WhileDraining) {
  StartListener();
  std::string r = Get(port_, "/healthz");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nok\n")) << r;
  draining_ = true;
  r = Get(port_, "/healthz");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 503")) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\ndraining\n")) << r;
}

TEST_F(HttpListenerTest, OtherPathsAre404AndOtherMethods405) {
  StartListener();
  EXPECT_TRUE(Get(port_, "/").starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(Get(port_, "/metrics/../etc/passwd").starts_with("HTTP/1.1 404"));
  const std::string r = Exchange(port_,
                                 "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                                 "Connection: close\r\n\r\nabc");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 405")) << r;
}

TEST_F(HttpListenerTest, MalformedRequestIsRefusedAndTheListenerGoesOn) {
  StartListener();
  const std::string r = Exchange(port_, "THIS IS NOT HTTP\r\n\r\n");
  EXPECT_FALSE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_EQ(r.find("TIMEOUT"), std::string::npos) << "the connection was left open: " << r;
  EXPECT_TRUE(Get(port_, "/healthz").starts_with("HTTP/1.1 200"));
}

TEST_F(HttpListenerTest, OversizedRequestIsRefusedAndTheListenerGoesOn) {
  StartListener();
  const std::string big(3 * kHttpRequestBytesMax, 'a');
  const std::string r =
      Exchange(port_, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n");
  // 431 (header fields too large) or 413, or a close: never the metrics.
  EXPECT_EQ(r.find("kvtier_up"), std::string::npos) << r.substr(0, 200);
  EXPECT_EQ(r.find("TIMEOUT"), std::string::npos) << "the connection was left open";
  EXPECT_TRUE(r.empty() || r.starts_with("HTTP/1.1 4")) << r.substr(0, 200);
  EXPECT_TRUE(Get(port_, "/metrics").starts_with("HTTP/1.1 200"));
}

TEST_F(HttpListenerTest, SilentClientIsClosedAfterTheReadTimeoutAndNeverBlocksStop) {
  StartListener(/*read_timeout_s=*/1);
  UniqueFd silent = Connect(port_, /*timeout_s=*/30);
  ASSERT_TRUE(silent.valid());
  ASSERT_TRUE(SendAll(silent.get(), "GET /metr"));
  // Meanwhile another client is served.
  EXPECT_TRUE(Get(port_, "/healthz").starts_with("HTTP/1.1 200"));
  // Closed by the listener (within the 30 s read bound), not by the socket's timeout.
  EXPECT_EQ(ReadAll(silent.get()).find("TIMEOUT"), std::string::npos);

  UniqueFd second = Connect(port_, /*timeout_s=*/30);
  ASSERT_TRUE(second.valid());
  ASSERT_TRUE(SendAll(second.get(), "GET /metr"));
  listener_->Stop();  // Returns with a connection open mid-request.
  listener_->Stop();  // Idempotent.
  EXPECT_FALSE(Connect(port_).valid()) << "still listening after Stop";
}

TEST(HttpListenerStartTest, PortTakenIsAnErrorNamingTheAddress) {
  HttpListenerOptions o{.address = {.host = "127.0.0.1", .port = 0},
                        .metrics = [] { return std::string(); }};
  Result<std::unique_ptr<HttpListener>> first = HttpListener::Start(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  o.address.port = (*first)->address().port;
  Result<std::unique_ptr<HttpListener>> second = HttpListener::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsIoError());
  EXPECT_NE(second.status().message().find(o.address.ToString()), std::string::npos)
      << second.status().ToString();
}

TEST(HttpListenerStartTest, BadOptionsAreRefused) {
  HttpListenerOptions o{.address = {.host = "127.0.0.1"}};
  EXPECT_TRUE(HttpListener::Start(o).status().IsInvalidArgument());  // No metrics callback.
  o.metrics = [] { return std::string(); };
  o.request_bytes_max = 100;
  EXPECT_TRUE(HttpListener::Start(o).status().IsInvalidArgument());
  o.request_bytes_max = 8192;
  o.connections_max = 0;
  EXPECT_TRUE(HttpListener::Start(o).status().IsInvalidArgument());
  o.connections_max = 1;
  o.read_timeout_s = 0;
  EXPECT_TRUE(HttpListener::Start(o).status().IsInvalidArgument());
}

TEST(ParseHttpAddressTest, PortAloneIsLoopback) {
  for (const char* text : {"9400", ":9400", "localhost:9400"}) {
    Result<HttpAddress> a = ParseHttpAddress(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status().ToString();
    EXPECT_EQ(a->ToString(), "127.0.0.1:9400") << text;
    EXPECT_TRUE(IsLoopback(*a));
  }
}

TEST(ParseHttpAddressTest, ExplicitAddresses) {
  Result<HttpAddress> a = ParseHttpAddress("0.0.0.0:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ToString(), "0.0.0.0:80");
  EXPECT_FALSE(IsLoopback(*a));
  a = ParseHttpAddress("[::1]:9400");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->ipv6);
  EXPECT_EQ(a->ToString(), "[::1]:9400");
  EXPECT_TRUE(IsLoopback(*a));
  a = ParseHttpAddress("127.0.0.2:1");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(IsLoopback(*a));
}

TEST(ParseHttpAddressTest, BadValuesNameTheProblem) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "port"},
      {"abc", "port"},
      {"1.2.3.4:65536", "port"},
      {"1.2.3.4:", "port"},
      {"example.com:80", "not resolved"},
      {"::1:80", "brackets"},
      {"[::1]80", "[ADDRESS]:PORT"},
      {"[nope]:80", "IPv6"},
      {"300.1.1.1:80", "IPv4"},
  };
  for (const auto& c : cases) {
    Result<HttpAddress> a = ParseHttpAddress(c.text);
    ASSERT_FALSE(a.ok()) << c.text;
    EXPECT_TRUE(a.status().IsInvalidArgument()) << c.text;
    EXPECT_NE(a.status().message().find(c.says), std::string::npos)
        << c.text << ": " << a.status().ToString();
  }
}

}  // namespace
}  // namespace kvtier::serve
