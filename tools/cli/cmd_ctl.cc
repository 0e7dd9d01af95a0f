// `kvtier ctl`: operates a running `kvtier serve` over its socket (serve/client.h), as one more
// client (admitted like any other: the service's uid, --allow-uid/--allow-group, its token).
//
//   kvtier ctl stats   the service's state and its engine's stats, one JSON object on stdout
//   kvtier ctl flush   writes every stored block down to the SSD (Engine::Flush)
//   kvtier ctl drain   new loads and stores are refused from now on (a replacement is coming)
//   kvtier ctl clear --namespace TENANT [--uid UID]
//                      the tenant's cached KV becomes misses, in every tier and after restarts
//                      (Server::ClearTenant; serve/namespace_state.h says how and why)
//
// Each takes --socket (KVTIER_SOCKET; the same default as serve) and --token-file.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "core/escape.h"
#include "flags.h"
#include "serve/client.h"
#include "serve_common.h"

namespace kvtier::cli {
namespace {

constexpr uint32_t kCtlTimeoutSecondsDefault = 30;
constexpr uint32_t kCtlFlushTimeoutSecondsDefault = 600;  // A flush writes what memory holds.
constexpr uint32_t kCtlTimeoutSecondsMax = 3600;  // ClientOptions::timeout_ms allows an hour.

class CtlCommand final : public Command {
 public:
  explicit CtlCommand(CLI::App* app)
      : Command(app->add_subcommand("ctl", "Operate a running kvtier serve: stats, flush, drain, clear")) {
    CLI::App* c = subcommand();
    c->require_subcommand(0, 1);  // None: Run() names them.
    AddSocketFlags(c, &socket_, "A file (mode 0600) holding the service's client token");
    c->add_option("--timeout", timeout_s_,
                  "Seconds to wait for the service's answer (default: 30; flush: 600)")
        ->check(WholeNumber(1, kCtlTimeoutSecondsMax));
    stats_ = c->add_subcommand("stats",
                               "The service's clients, tenants and counters and its engine's "
                               "stats, as one JSON object on stdout");
    flush_ = c->add_subcommand("flush", "Write every stored block down to the SSD tier");
    drain_ = c->add_subcommand(
        "drain", "Refuse new loads and stores (clients see misses) and new connections, before "
                 "the service is replaced or stopped; /healthz answers 503");
    clear_ = c->add_subcommand(
        "clear", "Clear one tenant's cached KV: every block it stored is a miss from now on, in "
                 "every tier and after restarts (the space is reclaimed as the tiers evict)");
    clear_->add_option("--namespace", namespace_,
                       "The tenant id (vLLM's cache_salt; an empty string for requests without "
                       "one)")
        ->required();
    clear_->add_option("--uid", clear_uid_,
                       "The uid whose tenant it is (default: this user's; another uid's only as "
                       "the service's user or root)")
        ->check(WholeNumber(0, kUidMax));
  }

  int Run() override {
    if (!stats_->parsed() && !flush_->parsed() && !drain_->parsed() && !clear_->parsed()) {
      std::fprintf(stderr, "kvtier ctl: name what to do: stats, flush, drain or clear\n");
      return kExitUsage;
    }
    Result<std::unique_ptr<serve::RemoteEngine>> engine = ConnectToService();
    if (!engine.ok()) return Fail(engine.status());
    if (clear_->parsed()) {
      const Status s = ClearNamespace(**engine);
      return s.ok() ? kExitOk : Fail(s);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (stats_->parsed()) {
      Result<std::string> json = (*engine)->ServiceStatsJson();
      if (!json.ok()) return Fail(json.status().WithContext("stats"));
      std::printf("%s\n", json->c_str());
      return kExitOk;
    }
    if (flush_->parsed()) {
      if (const Status s = (*engine)->Flush(); !s.ok()) return Fail(s.WithContext("flush"));
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "kvtier ctl flush: every stored block is on the SSD tier (%.1f ms)\n",
                   ms);
      return kExitOk;
    }
    if (const Status s = (*engine)->Drain(); !s.ok()) return Fail(s.WithContext("drain"));
    std::fprintf(stderr, "kvtier ctl drain: the service refuses new loads, stores and "
                         "connections; stop it once its clients moved (kvtier ctl stats)\n");
    return kExitOk;
  }

 private:
  Result<std::unique_ptr<serve::RemoteEngine>> ConnectToService() {
    serve::ClientOptions o;
    KV_ASSIGN_OR_RETURN(o.socket_path, SocketPath(socket_, SocketRole::kClient));
    if (!socket_.token_file.empty()) {
      KV_ASSIGN_OR_RETURN(o.token, ReadSecretFile(socket_.token_file, "--token-file"));
    }
    o.name = "kvtier ctl";
    const uint32_t seconds = timeout_s_ != 0            ? timeout_s_
                             : flush_->parsed() ? kCtlFlushTimeoutSecondsDefault
                                                : kCtlTimeoutSecondsDefault;
    o.timeout_ms = seconds * 1000;
    Result<std::unique_ptr<serve::RemoteEngine>> engine = serve::Connect(o);
    if (engine.ok()) return engine;
    return ExplainConnectFailure(engine.status(), "--token-file");
  }

  Status ClearNamespace(serve::RemoteEngine& engine) const {
    const uint32_t uid = clear_uid_.value_or(static_cast<uint32_t>(::getuid()));
    Result<serve::RemoteEngine::ClearResult> r = engine.ClearTenant(uid, namespace_);
    if (!r.ok()) return r.status().WithContext("clear");
    std::fprintf(stderr,
                 "kvtier ctl clear: tenant \"%s\" of uid %u moved to generation %llu: the KV it "
                 "stored is a miss from now on, for every client; the tiers reclaim its space as "
                 "they evict%s\n",
                 EscapeForMessage(namespace_).c_str(), uid, static_cast<unsigned long long>(r->generation),
                 r->persistent ? ""
                               : ". Not recorded on disk (the service has no cache directory "
                                 "or --namespace-state): a restart of the service forgets it");
    return Status::Ok();
  }

  SocketFlags socket_;
  uint32_t timeout_s_ = 0;
  std::string namespace_;
  std::optional<uint32_t> clear_uid_;
  CLI::App* stats_ = nullptr;  // Owned by the root app, as every CLI::App.
  CLI::App* flush_ = nullptr;
  CLI::App* drain_ = nullptr;
  CLI::App* clear_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> MakeCtlCommand(CLI::App* app) { return std::make_unique<CtlCommand>(app); }

}  // namespace kvtier::cli
