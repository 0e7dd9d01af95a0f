// A node service for the client tests (tests/capi, tests/python): a serve::Server over an
// in-process engine with the given layout and host tier (and, with --ssd-dir, an SSD tier), on
// the given socket, until SIGTERM or SIGINT (then it stops and flushes). Prints one line,
// "listening on <socket>", once clients can connect. Test-only: `kvtier serve` is the service
// people run; this one has no options beyond what the tests need and no configuration file.
//
//   serve_fixture --layout layers=..,kv_heads=..,head_dim=..,dtype=..,block_tokens=..
//                 --host-bytes N [--ssd-dir DIR --ssd-bytes N] --socket PATH
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/kv_layout.h"
#include "engine/engine.h"
#include "serve/server.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "serve_fixture: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string layout_text, socket, ssd_dir;
  uint64_t host_bytes = 64ull << 20, ssd_bytes = 64ull << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--layout") {
      layout_text = value;
    } else if (flag == "--socket") {
      socket = value;
    } else if (flag == "--host-bytes") {
      host_bytes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--ssd-dir") {
      ssd_dir = value;
    } else if (flag == "--ssd-bytes") {
      ssd_bytes = std::strtoull(value, nullptr, 10);
    } else {
      return Fail("unknown flag " + std::string(flag));
    }
  }
  if (argc % 2 == 0 || socket.empty() || layout_text.empty()) {
    return Fail("usage: serve_fixture --layout L --host-bytes N [--ssd-dir D --ssd-bytes N] "
                "--socket PATH");
  }
  kvtier::Result<kvtier::KvLayout> layout = kvtier::ParseLayout(layout_text);
  if (!layout.ok()) return Fail(layout.status().ToString());
  kvtier::EngineOptions options;
  options.layout = *layout;
  options.model.name = "serve-fixture";
  options.host.capacity_bytes = host_bytes;
  options.host.prefault = false;
  options.device_backend = kvtier::DeviceBackend::kCpu;
  if (!ssd_dir.empty()) {
    options.ssd = kvtier::SsdTierOptions{};
    options.ssd->dirs = {ssd_dir};
    options.ssd->capacity_bytes = ssd_bytes;
    options.ssd->segment_bytes = 1ull << 20;
  }
  // Signals are taken by sigwait below, not by a handler; blocked before any thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  kvtier::Result<std::unique_ptr<kvtier::Engine>> engine = kvtier::Engine::Open(options);
  if (!engine.ok()) return Fail(engine.status().ToString());
  std::shared_ptr<kvtier::Engine> shared = std::move(engine).value();
  kvtier::Result<std::unique_ptr<kvtier::serve::Server>> server =
      kvtier::serve::Server::Start(kvtier::serve::ServerOptions{.socket_path = socket}, shared);
  if (!server.ok()) return Fail(server.status().ToString());
  std::printf("listening on %s\n", socket.c_str());
  std::fflush(stdout);
  int signum = 0;
  sigwait(&stop, &signum);
  (*server)->Stop();
  const kvtier::Status flushed = shared->Flush();
  if (!flushed.ok()) return Fail("flush: " + flushed.ToString());
  return 0;
}
