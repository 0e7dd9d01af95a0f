// Entry point of the `kvtier` CLI: builds the root CLI11 app, lets every subcommand factory
// declare itself, parses, and runs the chosen subcommand. CLI11 throws on parse errors; they are
// caught here, printed as one line (naming the subcommands when none or an unknown one was given)
// and exit with kExitUsage (2). `kvtier help [SUBCOMMAND]` prints the help, like --help, also
// after root flags (`kvtier -q help`). The config file (--config, KVTIER_CONFIG) must be a regular
// file of bounded size, and a key or table in it, or a KVTIER_* variable, that no option takes is
// a usage error naming the nearest valid one (config_check.h). Nothing else is expected to
// throw, but any exception (std::bad_alloc included) is still turned into a message and a failing
// exit status.
#include <CLI/CLI.hpp>
#include <unistd.h>  // environ

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "config_check.h"
#include "flags.h"
#include "kvtier/version.h"

namespace kvtier::cli {

int Command::Fail(const Status& status) const {
  // "kvtier bench: bench: ..." would repeat the prefix the message already has.
  std::string_view message = status.message();
  const std::string prefix = std::string(name()) + ": ";
  if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
  std::fprintf(stderr, "kvtier %s: %.*s\n", std::string(name()).c_str(),
               static_cast<int>(message.size()), message.data());
  return kExitFailure;
}

namespace {

// Every subcommand, in the order `--help` lists them. Append new ones here.
constexpr CommandFactory kCommandFactories[] = {
    MakeDemoCommand,      MakeRunCommand,   MakeChatCommand,    MakeHashCommand,
    MakeSelfcheckCommand, MakeBenchCommand, MakeInspectCommand, MakeVerifyCommand,
    MakeRepairCommand,    MakeClearCommand,   MakeNumaCommand,
    MakeStatsCommand,     MakePreloadCommand, MakeServeCommand,   MakeCtlCommand,
};

// "demo, run, chat, ...": the subcommands in --help's order.
std::string SubcommandList(const CLI::App& app) {
  std::string list;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    list += (list.empty() ? "" : ", ") + sub->get_name();
  }
  return list;
}

std::string OneLineFailure(const CLI::App* app, const CLI::Error& e) {
  std::string what = e.what();
  for (char& c : what) {
    if (c == '\n') c = ' ';
  }
  // An unknown word where a subcommand belongs: say which ones exist.
  const bool at_root = app != nullptr && app->get_parent() == nullptr;
  if (at_root && dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    return "kvtier: " + what + "; subcommands: " + SubcommandList(*app) +
           " (run with --help for usage)\n";
  }
  return "kvtier: " + what + " (run with --help for usage)\n";
}

// Where the word `help` stands in place of a subcommand (after root flags only, as in
// `kvtier -q help` or `kvtier --log-level info help bench`), or 0 when it does not.
int HelpWordIndex(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "help") return i;
    if (arg == "--log-level" || arg == "--config") {
      ++i;  // Its value.
    } else if (!arg.starts_with("-")) {
      return 0;  // A subcommand.
    }
  }
  return 0;
}

// `kvtier help [SUBCOMMAND [SUBCOMMAND]]` (`help bench ssd`), with `help` at argv[at]: --help's
// text; an unknown SUBCOMMAND is a usage error. Flags after `help` are ignored.
int PrintHelp(CLI::App& app, int at, int argc, char** argv) {
  CLI::App* shown = &app;
  for (int i = at + 1; i < argc; ++i) {
    if (std::string_view(argv[i]).starts_with("-")) continue;
    CLI::App* found = nullptr;
    for (CLI::App* sub : shown->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == argv[i]) found = sub;
    }
    if (found == nullptr) {
      std::fprintf(stderr, "kvtier help: no subcommand '%s'; subcommands: %s\n", argv[i],
                   SubcommandList(*shown).c_str());
      return kExitUsage;
    }
    shown = found;
  }
  std::fputs(shown->help().c_str(), stdout);
  return kExitOk;
}

int RunMain(int argc, char** argv) {
  CLI::App app{"kvtier: keeps LLM KV caches in tiers (GPU, host DRAM, SSD, Redis)", "kvtier"};
  app.set_version_flag("--version", std::string("kvtier ") + kVersionString,
                       "Print the version and exit");
  // Not require_subcommand(1): CLI11 checks that before unknown arguments, so a mistyped
  // subcommand would be reported as a missing one. The check is done after parsing instead.
  app.failure_message(OneLineFailure);
  // Root flags, accepted after the subcommand too (fallthrough).
  std::string log_level = "warn";
  bool quiet = false;
  app.add_option("--log-level", log_level, "Log lines kept: debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "Errors only (the same as --log-level error)");
  // A TOML file of the same options: top-level keys for the root flags, a [run], [chat], ...
  // table per subcommand, keys named as the long flags (cache-dir = "/var/cache/kvtier").
  // Command-line flags and KVTIER_* variables win over the file.
  // KVTIER_CONFIG names the default file (CLI11 reads config files before variables, so it is
  // passed here); given, it must exist.
  const char* env_config = std::getenv("KVTIER_CONFIG");
  // Keys as the options table names them, too; an unknown key or table is an error.
  app.config_formatter(SnakeCaseConfig(&app));
  app.set_config("--config", env_config != nullptr ? env_config : "",
                 "Read options from a TOML file ([run], [chat], ... tables; default: "
                 "$KVTIER_CONFIG)",
                 env_config != nullptr)
      ->check(ConfigFileCheck());  // A regular file of bounded size, before CLI11 opens it.
  app.fallthrough();
  std::vector<std::unique_ptr<Command>> commands;
  for (CommandFactory factory : kCommandFactories) commands.push_back(factory(&app));
  if (const int at = HelpWordIndex(argc, argv); at > 0) return PrintHelp(app, at, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  // A KVTIER_* variable no option reads is a mistake (a misspelled option), not something to
  // ignore: checked after parsing, so --help and --version still answer.
  if (const Status s = CheckVariables(environ, KnownVariables(app, EngineOptionVariables()));
      !s.ok()) {
    std::fprintf(stderr, "kvtier: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  SetCliLogLevel(quiet                  ? LogLevel::kError
                 : log_level == "debug" ? LogLevel::kDebug
                 : log_level == "info"  ? LogLevel::kInfo
                 : log_level == "error" ? LogLevel::kError
                                        : LogLevel::kWarn);
  for (const std::unique_ptr<Command>& command : commands) {
    if (command->Parsed()) return command->Run();
  }
  std::fprintf(stderr, "kvtier: a subcommand is required; subcommands: %s (run with --help for "
               "usage)\n", SubcommandList(app).c_str());
  return kExitUsage;
}

}  // namespace
}  // namespace kvtier::cli

int main(int argc, char** argv) {
  try {
    return kvtier::cli::RunMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtier: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kvtier: internal error: unknown exception\n");
  }
  return kvtier::cli::kExitFailure;
}
