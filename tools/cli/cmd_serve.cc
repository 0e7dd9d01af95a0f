// `kvtier serve`: the node service (docs/serve.md). One long-lived process opens the node's tiers
// (an Engine, from the same cache flags, KVTIER_* variables and config file as `kvtier run`) and
// serves inference engines on a Unix socket (serve/server.h); optionally /metrics and /healthz
// over HTTP (serve/http_listener.h).
//
// The socket's directory is created 0700, or 0750 owned by --socket-group (whose members may
// then connect: the group is admitted too). A second service on the same socket is refused by
// Server::Start naming the holder's pid; on the same cache directory the SSD tier's LOCK refuses
// it. SIGTERM or SIGINT: the server stops (every request in flight ends), the engine flushes
// (every stored block reaches the SSD), and the process exits 0; a second signal kills it at once.
// Log lines go to stderr (--log-level; the start and the stop are always reported); stdout gets
// one line, "listening on <socket>", once clients can connect.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "byte_size.h"
#include "cache_dir.h"
#include "command.h"
#include "core/kv_layout.h"
#include "core/limits.h"
#include "core/sha256.h"
#include "flags.h"
#include "input_file.h"
#include "interrupt.h"
#include "llm_session.h"
#include "serve/http_listener.h"
#include "serve/namespace_state.h"
#include "serve/server.h"
#include "serve_common.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier::cli {
namespace {

constexpr uint64_t kServeHostBytesDefault = uint64_t{1} << 30;
constexpr const char* kServiceGroup = "Service options (docs/serve.md)";

constexpr const char* kServeFooter = R"(Examples:
  # Serve a model's KV geometry from host memory and an SSD directory:
  kvtier serve --layout layers=32,kv_heads=8,head_dim=128,dtype=bf16,block_tokens=256 \
      --model-name meta-llama/Llama-3.1-8B --cache-dir /var/cache/kvtier --host-bytes 16GiB
  # From another terminal (the same user, the default socket):
  kvtier ctl stats
  kvtier ctl flush
  kvtier ctl clear --namespace tenant-a     # tenant-a's cached KV: misses from now on
  # With Prometheus metrics and a health check on 127.0.0.1:9400:
  kvtier serve --config /etc/kvtier/kvtier.toml --http 9400
  curl -s localhost:9400/metrics; curl -s localhost:9400/healthz
vLLM connects with "server": "unix:<socket>" in kv_connector_extra_config (docs/serve.md).)";

// A stderr line that --log-level does not filter: the service's start and stop.
void Say(const std::string& line) { std::fprintf(stderr, "kvtier serve: %s\n", line.c_str()); }

class ServeCommand final : public Command {
 public:
  explicit ServeCommand(CLI::App* app);
  int Run() override;

 private:
  Result<serve::ServerOptions> MakeServerOptions();
  Result<EngineOptions> MakeEngineOptions();
  Status PrepareSocketDir(const std::string& socket_path);
  Status ShareSocket(const std::string& socket_path);
  serve::HttpListenerOptions HttpOptions(const serve::HttpAddress& address,
                                         const std::atomic<serve::Server*>* live);
  Status Serve(const serve::ServerOptions& server_options, const EngineOptions& engine_options);

  ModelFlags flags_;  // The cache flags (flags_.session), not the model ones.
  SocketFlags socket_;
  std::string layout_text_;
  std::string model_name_;
  std::string weights_digest_;
  std::string socket_group_;
  std::optional<uint32_t> socket_gid_;
  std::vector<std::string> allow_uids_;
  std::vector<std::string> allow_groups_;
  std::string tenant_secret_file_;
  std::string namespace_state_;
  std::string client_staging_text_;
  uint32_t clients_max_ = serve::kClientsMaxDefault;
  std::string http_;
  std::unique_ptr<StderrLogger> logger_;
};

CLI::Validator LayoutCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Result<KvLayout> l = ParseLayout(text);
        if (!l.ok()) return std::string(l.status().message());
        const Status s = l->Validate();
        return s.ok() ? std::string() : std::string(s.message());
      },
      "LAYOUT");
}

CLI::Validator DigestCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Hash256 h{};
        return FromHex(text, &h) ? std::string()
                                 : "'" + text + "' is not 64 hexadecimal digits (a SHA-256)";
      },
      "HEX64");
}

CLI::Validator HttpCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Result<serve::HttpAddress> a = serve::ParseHttpAddress(text);
        return a.ok() ? std::string() : std::string(a.status().message());
      },
      "[HOST:]PORT");
}

ServeCommand::ServeCommand(CLI::App* app)
    : Command(app->add_subcommand(
          "serve",
          "Run the node service: own the node's KV tiers and serve inference engines "
          "(vLLM's connector, kvtier run --server) on a Unix socket")) {
  CLI::App* c = subcommand();
  c->footer(kServeFooter);
  c->add_option("--layout", layout_text_,
                "The KV geometry served, e.g. layers=32,kv_heads=8,head_dim=128,dtype=bf16,"
                "block_tokens=256, with ,kind=latent for an MLA model's latent cache (clients with "
                "another layout are refused)")
      ->envname("KVTIER_LAYOUT")
      ->check(LayoutCheck())
      ->required()
      ->group(kServiceGroup);
  c->add_option("--model-name", model_name_, "The model's name; enters every key")
      ->envname("KVTIER_MODEL_NAME")
      ->group(kServiceGroup);
  c->add_option("--weights-digest", weights_digest_,
                "SHA-256 of the weights (64 hex digits); enters every key (default: zeros)")
      ->envname("KVTIER_WEIGHTS_DIGEST")
      ->check(DigestCheck())
      ->group(kServiceGroup);
  AddSocketFlags(c, &socket_, "A file (mode 0600) holding the token every client must present");
  c->add_option("--socket-group", socket_group_,
                "The socket's directory (0750) and socket (0660) belong to this group, whose "
                "members may connect (it is admitted as with --allow-group)")
      ->envname("KVTIER_SOCKET_GROUP")
      ->group(kServiceGroup);
  c->add_option("--allow-uid", allow_uids_,
                "Also admit clients of this uid (repeat, or a comma-separated list); they must "
                "also be able to reach the socket")
      ->envname("KVTIER_ALLOW_UID")
      ->delimiter(',')
      ->check(WholeNumber(0, kUidMax))
      ->group(kServiceGroup);
  c->add_option("--allow-group", allow_groups_,
                "Also admit clients in this group (name or gid; repeat or a comma list)")
      ->envname("KVTIER_ALLOW_GROUP")
      ->delimiter(',')
      ->group(kServiceGroup);
  c->add_option("--tenant-secret-file", tenant_secret_file_,
                "A file (mode 0600, at least 16 bytes) from which tenants' namespaces are derived")
      ->envname("KVTIER_TENANT_SECRET_FILE")
      ->group(kServiceGroup);
  c->add_option("--namespace-state", namespace_state_,
                "Where `kvtier ctl clear --namespace` records cleared tenants, so that they stay "
                "cleared after a restart (default: serve-namespaces in the first --cache-dir "
                "directory; without one, in memory only)")
      ->envname("KVTIER_NAMESPACE_STATE")
      ->group(kServiceGroup);
  c->add_option("--client-staging-bytes", client_staging_text_,
                "Shared staging memory per connection (committed as touched; default 1 GiB)")
      ->envname("KVTIER_CLIENT_STAGING_BYTES")
      ->check(ByteSize(1, serve::kClientStagingBytesMax))
      ->group(kServiceGroup);
  c->add_option("--clients-max", clients_max_, "Connections served at once")
      ->envname("KVTIER_CLIENTS_MAX")
      ->check(WholeNumber(1, serve::kClientsMaxLimit))
      ->capture_default_str()
      ->group(kServiceGroup);
  c->add_option("--http", http_,
                "Serve GET /metrics and /healthz on [HOST:]PORT (HOST defaults to 127.0.0.1; "
                "name 0.0.0.0 or another address explicitly to expose it)")
      ->envname("KVTIER_HTTP")
      ->check(HttpCheck())
      ->group(kServiceGroup);
  for (CLI::Option* o : {c->get_option("--socket"), c->get_option("--token-file")}) {
    o->group(kServiceGroup);
  }
  // After the service's own flags, so that --help lists those first.
  AddEngineCacheFlags(c, &flags_);
  c->get_option("--cache-dir")->group(kServiceGroup);
  for (const auto& [spec, option] : flags_.engine_flags) {
    if (spec->name == "host_bytes") option->default_str("1 GiB");
    if (spec->name == "write_policy") option->default_str("back (the age limit bounds a crash)");
  }
}

Result<serve::ServerOptions> ServeCommand::MakeServerOptions() {
  serve::ServerOptions o;
  KV_ASSIGN_OR_RETURN(o.socket_path, SocketPath(socket_, SocketRole::kService));
  for (const std::string& text : allow_uids_) {
    uint32_t uid = 0;  // Checked when parsed (WholeNumber).
    std::from_chars(text.data(), text.data() + text.size(), uid);
    o.allowed_uids.push_back(uid);
  }
  for (const std::string& name : allow_groups_) {
    KV_ASSIGN_OR_RETURN(const uint32_t gid, ResolveGroup(name, "--allow-group"));
    o.allowed_gids.push_back(gid);
  }
  if (!socket_group_.empty()) {
    KV_ASSIGN_OR_RETURN(socket_gid_, ResolveGroup(socket_group_, "--socket-group"));
    o.allowed_gids.push_back(*socket_gid_);
  }
  if (!socket_.token_file.empty()) {
    KV_ASSIGN_OR_RETURN(o.token, ReadSecretFile(socket_.token_file, "--token-file"));
  }
  if (!tenant_secret_file_.empty()) {
    KV_ASSIGN_OR_RETURN(o.tenant_secret,
                        ReadSecretFile(tenant_secret_file_, "--tenant-secret-file"));
    if (o.tenant_secret.size() < 16) {
      return Status::InvalidArgument("--tenant-secret-file " + tenant_secret_file_ + " holds " +
                                     std::to_string(o.tenant_secret.size()) +
                                     " bytes; a tenant secret has at least 16 (openssl rand "
                                     "-hex 32 makes one)");
    }
  }
  if (!client_staging_text_.empty()) {
    KV_ASSIGN_OR_RETURN(o.client_staging_bytes,
                        ParseBytes("--client-staging-bytes", client_staging_text_));
  }
  o.clients_max = clients_max_;
  o.logger = logger_.get();
  KV_RETURN_IF_ERROR(o.Validate());
  return o;
}

Result<EngineOptions> ServeCommand::MakeEngineOptions() {
  KV_RETURN_IF_ERROR(FinishEngineCacheFlags(&flags_));
  EngineOptions o;
  Result<KvLayout> layout = ParseLayout(layout_text_);
  if (!layout.ok()) return layout.status().WithContext("--layout");
  o.layout = *layout;
  if (model_name_.size() > kModelNameBytesMax) {
    return Status::InvalidArgument("--model-name is longer than " +
                                   std::to_string(kModelNameBytesMax) + " bytes");
  }
  o.model.name = model_name_;
  if (!weights_digest_.empty() && !FromHex(weights_digest_, &o.model.weights_digest)) {
    return Status::InvalidArgument("--weights-digest is not 64 hexadecimal digits");
  }
  const LlmSessionOptions& s = flags_.session;
  o.host.capacity_bytes = s.host_bytes != 0 ? s.host_bytes : kServeHostBytesDefault;
  KV_RETURN_IF_ERROR(ApplyCacheOptions(s, &o));
  // A long-lived service writes back (the age limit bounds what a crash loses) unless told.
  bool policy_given = false;
  for (const auto& [spec, option] : flags_.engine_flags) {
    if (spec->name == "write_policy" && option->count() > 0) policy_given = true;
  }
  if (!policy_given) o.write_policy = WritePolicy::kWriteBack;
  o.logger = logger_.get();
  return o;
}

// "0750": the permission bits of `mode`, for messages.
std::string ModeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// The socket's directory: created 0700 (0750 and --socket-group's with a group) when missing; an
// existing one must be a directory (not a link). With a group, a directory of ours is given to it.
Status ServeCommand::PrepareSocketDir(const std::string& socket_path) {
  const std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  const std::string d = dir.empty() ? std::string(".") : dir.string();
  const mode_t mode = socket_gid_.has_value() ? 0750 : 0700;
  struct stat st {};
  if (::lstat(d.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::FromErrno(errno, "socket directory " + d);
    if (::mkdir(d.c_str(), mode) != 0) {
      return Status::FromErrno(
          errno, "cannot create the socket directory " + d + " (its parent must exist)");
    }
    if (::lstat(d.c_str(), &st) != 0) return Status::FromErrno(errno, "socket directory " + d);
  } else if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("socket directory " + d + " is " +
                                   (S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory"));
  }
  if (socket_gid_.has_value() && st.st_uid == ::geteuid()) {
    if (::chown(d.c_str(), static_cast<uid_t>(-1), *socket_gid_) != 0) {
      return Status::FromErrno(errno, "--socket-group " + socket_group_ + ": cannot give " + d +
                                          " to the group (is this user a member?)");
    }
    if (::chmod(d.c_str(), mode) != 0) return Status::FromErrno(errno, "chmod " + d);
    st.st_mode = (st.st_mode & ~mode_t{07777}) | mode;
  }
  const bool others_reach = (st.st_mode & 0011) != 0;
  if ((!allow_uids_.empty() || !allow_groups_.empty()) && !others_reach) {
    LogTo(logger_.get(), LogLevel::kWarn,
          "socket directory " + d + " has mode " + ModeText(st.st_mode) +
              ": the clients --allow-uid/--allow-group admit cannot reach the socket unless "
              "they are in its group (--socket-group gives it one)");
  }
  return Status::Ok();
}

// With --socket-group the socket itself is 0660 and the group's; without, 0600.
Status ServeCommand::ShareSocket(const std::string& socket_path) {
  if (socket_gid_.has_value() &&
      ::chown(socket_path.c_str(), static_cast<uid_t>(-1), *socket_gid_) != 0) {
    return Status::FromErrno(errno, "--socket-group: chown " + socket_path);
  }
  if (::chmod(socket_path.c_str(), socket_gid_.has_value() ? 0660 : 0600) != 0) {
    return Status::FromErrno(errno, "chmod " + socket_path);
  }
  return Status::Ok();
}

// The engine's open, with what to do when the cache directory is held.
Result<std::shared_ptr<Engine>> OpenEngine(const EngineOptions& o) {
  Result<std::unique_ptr<Engine>> engine = Engine::Open(o);
  if (!engine.ok() && engine.status().IsBusy()) {
    return Status::Busy("cannot open the cache: " + engine.status().message() +
                        " (another kvtier serve or run uses it: stop it, or give this service "
                        "another --cache-dir)");
  }
  if (!engine.ok()) return engine.status().WithContext("cannot open the cache");
  // Shared with the Server, which outlives no request; released after it stopped.
  return std::shared_ptr<Engine>(std::move(*engine));
}

std::string TierList(Engine& engine) {
  std::string out;
  for (const TierStats& t : engine.Stats().tiers) {
    out += (out.empty() ? "" : " + ") + std::string(TierKindName(t.kind)) + " " +
           SizeText(t.capacity_bytes);
  }
  return out;
}

// The HTTP listener's options: /metrics and /healthz read the server once it serves (`*live`
// set); before, /healthz answers 503 starting and /metrics a comment line.
serve::HttpListenerOptions ServeCommand::HttpOptions(const serve::HttpAddress& address,
                                                     const std::atomic<serve::Server*>* live) {
  return {.address = address,
          .metrics =
              [live] {
                serve::Server* s = live->load();
                return s != nullptr ? s->MetricsText() : std::string("# kvtier serve: starting\n");
              },
          .unhealthy =
              [live] {
                serve::Server* s = live->load();
                if (s == nullptr) return std::string("starting");
                return std::string(s->Stats().draining ? "draining" : "");
              },
          .logger = logger_.get()};
}

Status ServeCommand::Serve(const serve::ServerOptions& server_options,
                           const EngineOptions& engine_options) {
  // The socket and the HTTP port first: a path that cannot be served, a socket another service
  // holds or a port taken fails in milliseconds instead of after the engine's open (which faults
  // in the host tier: seconds per GiB).
  KV_RETURN_IF_ERROR(serve::CheckSocketPath(server_options.socket_path));
  KV_RETURN_IF_ERROR(PrepareSocketDir(server_options.socket_path));
  // Declared in this order so that they are destroyed in the reverse one: the listener (its
  // thread joined) before the server its callbacks read, the server before the engine.
  std::shared_ptr<Engine> engine;
  std::unique_ptr<serve::Server> server;
  std::atomic<serve::Server*> live{nullptr};  // Set once the server serves.
  std::unique_ptr<serve::HttpListener> http;
  if (!http_.empty()) {
    KV_ASSIGN_OR_RETURN(serve::HttpAddress address, serve::ParseHttpAddress(http_));
    KV_ASSIGN_OR_RETURN(http, serve::HttpListener::Start(HttpOptions(address, &live)));
    if (!serve::IsLoopback(http->address())) {
      Say("warning: /metrics is served on " + http->address().ToString() +
          ", reachable from other machines");
    }
  }
  KV_ASSIGN_OR_RETURN(engine, OpenEngine(engine_options));
  KV_ASSIGN_OR_RETURN(server, serve::Server::Start(server_options, engine));
  live.store(server.get());
  KV_RETURN_IF_ERROR(ShareSocket(server_options.socket_path));
  Say("serving " + server_options.socket_path + " (pid " + std::to_string(::getpid()) +
      "; layout " + engine_options.layout.ToString() + "; tiers " + TierList(*engine) +
      (http != nullptr ? "; http " + http->address().ToString() : "") + ")");
  // Scripts and tests wait for this line: clients can connect from now on.
  std::printf("listening on %s\n", server_options.socket_path.c_str());
  std::fflush(stdout);
  while (!Interrupted()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Say("stopping: closing connections, then flushing the cache");
  if (http != nullptr) http->Stop();
  server->Stop();
  server.reset();
  const auto t0 = std::chrono::steady_clock::now();
  const Status flushed = engine->Flush();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!flushed.ok()) return flushed.WithContext("flush at stop");
  char line[96];
  std::snprintf(line, sizeof(line), "stopped; the cache was flushed in %.1f ms", ms);
  Say(line);
  return Status::Ok();
}

int ServeCommand::Run() {
  // Before anything is opened: a SIGTERM during startup stops the service as soon as it serves.
  InstallInterruptHandler();
  ::signal(SIGPIPE, SIG_IGN);  // A client gone mid-reply is an error on its socket, not a death.
  logger_ = std::make_unique<StderrLogger>(CliLogLevel());
  Result<serve::ServerOptions> server_options = MakeServerOptions();
  if (!server_options.ok()) return Fail(server_options.status());
  Result<EngineOptions> engine_options = MakeEngineOptions();
  if (!engine_options.ok()) return Fail(engine_options.status());
  if (!flags_.session.cache_dir.empty()) {
    if (Status s = CheckCacheDirUsable(flags_.session.cache_dir, kCacheSegmentBytes); !s.ok()) {
      return Fail(s);
    }
  }
  server_options->namespace_state_path = namespace_state_;
  const SsdTierOptions* ssd_options = FindSsdOptions(engine_options->tiers);
  if (namespace_state_.empty() && ssd_options != nullptr && !ssd_options->dirs.empty()) {
    server_options->namespace_state_path = ssd_options->dirs[0] + "/" + ssd::kServeStateName;
  }
  if (const Status s = Serve(*server_options, *engine_options); !s.ok()) return Fail(s);
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> MakeServeCommand(CLI::App* app) {
  return std::make_unique<ServeCommand>(app);
}

}  // namespace kvtier::cli
