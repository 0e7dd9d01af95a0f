// See config_check.h.
#include "config_check.h"

#include <algorithm>
#include <istream>

namespace kvtier::cli {
namespace {

// Names longer than this get no suggestion: the distance table is quadratic in the length.
constexpr size_t kSuggestNameMax = 256;

// Variables of kvtier's build and test scripts, test programs and bench tools that the CLI does
// not read but may find in its environment (run.sh, ctest, scripts/, bench/), and the bench
// commands' own (read with getenv in bench_remote.cc and bench_engine.cc).
constexpr std::string_view kOtherVariables[] = {
    "KVTIER_BENCH_TMPDIR",  "KVTIER_BUILD_DIR",         "KVTIER_EXAMPLES_DIR",
    "KVTIER_FUZZ_RSS_MB",   "KVTIER_FUZZ_RUNS",         "KVTIER_JOBS",
    "KVTIER_PLOT_REEXEC",   "KVTIER_PYTEST_MIN_TESTS",  "KVTIER_REDIS_PASSWORD",
    "KVTIER_REMOTE_KEY",    "KVTIER_REQUIRE_RESOURCES", "KVTIER_SHARED_MODELS_DIR",
    "KVTIER_VLLM_VENV",     "KVTIER_WRITE_OPTIONS_MD",  "KVTIER_CONFIG",
    "KVTIER_VENV_CACHE",  // Where scripts/setup_*_venv.sh keep the shared environments.
    // The kvtier CLI the client tests start as `kvtier serve`; serve_test.cc's client processes;
    // engine_fs_tier_test.cc's writer processes.
    "KVTIER_SERVE_BIN",     "KVTIER_SERVE_CHILD",       "KVTIER_FS_CHILD",
};

std::string Dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// `name` in the spelling of `like`: snake_case when `like` has '_' and no '-'.
std::string SpelledLike(std::string name, std::string_view like) {
  if (like.find('_') != std::string_view::npos && like.find('-') == std::string_view::npos) {
    std::replace(name.begin(), name.end(), '-', '_');
  }
  return name;
}

// The named subcommands of `app` (option groups are nameless subcommands: left out).
std::vector<const CLI::App*> NamedSubcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); });
}

// The long names of the options of `app` and of its option groups, as config keys take them.
void CollectKeys(const CLI::App& app, std::vector<std::string>* keys) {
  for (const CLI::Option* o : app.get_options()) {
    if (!o->get_configurable()) continue;
    for (const std::string& n : o->get_lnames()) keys->push_back(n);
  }
  for (const CLI::App* g :
       app.get_subcommands([](const CLI::App* s) { return s->get_name().empty(); })) {
    CollectKeys(*g, keys);
  }
}

// The option a config key names in `app`, as CLI11 looks it up (--name, -n, a positional).
const CLI::Option* FindKey(const CLI::App& app, const std::string& name) {
  const CLI::Option* o = app.get_option_no_throw("--" + name);
  if (o == nullptr && name.size() == 1) o = app.get_option_no_throw("-" + name);
  return o != nullptr ? o : app.get_option_no_throw(name);
}

// "[run]", "[bench.ssd]": the table of the first `depth` parents (depth >= 1).
std::string TableName(const std::vector<std::string>& parents, size_t depth) {
  std::string out = "[";
  for (size_t i = 0; i < depth; ++i) out += (i == 0 ? "" : ".") + parents[i];
  return out + "]";
}

// The tables under `app` that have an option `name`, as "[run], [chat]"; "" when none.
std::string TablesHolding(const CLI::App& app, const std::string& name) {
  std::string out;
  for (const CLI::App* sub : NamedSubcommands(app)) {
    if (FindKey(*sub, name) == nullptr) continue;
    out += (out.empty() ? "" : ", ") + ("[" + sub->get_name() + "]");
  }
  return out;
}

// Why `item` is unknown in `app`: the nearest key of `app`, or where the key belongs.
Status UnknownKey(const CLI::App& root, const CLI::App& app, const CLI::ConfigItem& item) {
  std::vector<std::string> keys;
  CollectKeys(app, &keys);
  const std::string where = item.parents.empty()
                                ? std::string("at the top level")
                                : "in " + TableName(item.parents, item.parents.size());
  std::string message = "unknown key '" + item.name + "' " + where;
  if (&app != &root && FindKey(root, Dashed(item.name)) != nullptr) {
    return Status::InvalidArgument(message + "; it belongs at the top level");
  }
  const std::string holders = TablesHolding(app, Dashed(item.name));
  if (!holders.empty()) return Status::InvalidArgument(message + "; it belongs in " + holders);
  const std::string nearest = NearestName(Dashed(item.name), keys);
  if (!nearest.empty()) message += "; did you mean '" + SpelledLike(nearest, item.name) + "'?";
  return Status::InvalidArgument(message);
}

}  // namespace

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string NearestName(std::string_view name, const std::vector<std::string>& candidates) {
  if (name.size() > kSuggestNameMax) return "";
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

Status ReadConfigText(std::istream& input, size_t bytes_max, std::string* text) {
  text->assign(bytes_max + 1, '\0');
  input.read(text->data(), static_cast<std::streamsize>(text->size()));
  text->resize(static_cast<size_t>(input.gcount()));
  if (text->size() > bytes_max) {
    return Status::InvalidArgument("more than " + std::to_string(bytes_max) +
                                   " bytes (the limit for a config file)");
  }
  if (input.bad()) return Status::IoError("cannot read the config file");
  return Status::Ok();
}

Status CheckConfigNesting(std::string_view text, size_t depth_max) {
  size_t table_depth = 0, line_number = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++line_number;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line.remove_prefix(first);
    // A header "[a.b]" or "[[a.b]]" opens a table of depth 2; a key "c.d = 1" in it is at depth
    // 3. Dots inside quotes are counted too: a bound, not a parse.
    size_t depth = 0;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    if (line.front() == '[' && line.back() == ']') {  // A header, as CLI11's reader finds one.
      depth = 1 + static_cast<size_t>(std::count(line.begin(), line.end(), '.'));
      table_depth = depth;
    } else {
      const std::string_view key = line.substr(0, line.find('='));
      depth = table_depth + static_cast<size_t>(std::count(key.begin(), key.end(), '.'));
    }
    if (depth > depth_max) {
      return Status::InvalidArgument("line " + std::to_string(line_number) + ": tables nested " +
                                     std::to_string(depth) + " deep (at most " +
                                     std::to_string(depth_max) + ")");
    }
  }
  return Status::Ok();
}

Status CheckConfigItems(const CLI::App& root, const std::vector<CLI::ConfigItem>& items) {
  for (const CLI::ConfigItem& item : items) {
    const CLI::App* app = &root;
    for (size_t depth = 0; depth < item.parents.size(); ++depth) {
      const CLI::App* next = nullptr;
      std::vector<std::string> names;
      for (const CLI::App* sub : NamedSubcommands(*app)) {
        if (sub->get_name() == item.parents[depth]) next = sub;
        names.push_back(sub->get_name());
      }
      if (next == nullptr) {
        std::string message = "unknown table " + TableName(item.parents, depth + 1);
        const std::string nearest = NearestName(item.parents[depth], names);
        if (!nearest.empty()) message += "; did you mean [" + nearest + "]?";
        return Status::InvalidArgument(message + " (tables are subcommands)");
      }
      app = next;
    }
    // "++" and "--" open and close a table; every other item is a key of `app`.
    if (item.name == "++" || item.name == "--") continue;
    if (FindKey(*app, Dashed(item.name)) == nullptr) return UnknownKey(root, *app, item);
  }
  return Status::Ok();
}

std::vector<std::string> KnownVariables(const CLI::App& root,
                                        const std::vector<std::string>& aliases) {
  std::vector<std::string> known(aliases);
  for (std::string_view v : kOtherVariables) known.emplace_back(v);
  std::vector<const CLI::App*> apps = {&root};
  // Bounded by the command tree: every app is visited once.
  for (size_t i = 0; i < apps.size(); ++i) {
    for (const CLI::Option* o : apps[i]->get_options()) {
      if (!o->get_envname().empty()) known.push_back(o->get_envname());
    }
    for (const CLI::App* sub : apps[i]->get_subcommands([](const CLI::App*) { return true; })) {
      apps.push_back(sub);
    }
  }
  std::sort(known.begin(), known.end());
  known.erase(std::unique(known.begin(), known.end()), known.end());
  return known;
}

Status CheckVariables(char** env, const std::vector<std::string>& known) {
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("KVTIER_")) continue;
    const std::string name(entry.substr(0, entry.find('=')));
    if (std::binary_search(known.begin(), known.end(), name)) continue;
    std::string message = "the environment variable " + name + " is not one kvtier reads";
    const std::string nearest = NearestName(name, known);
    if (!nearest.empty()) message += "; did you mean " + nearest + "?";
    return Status::InvalidArgument(message + " (unset it; docs/options.md lists the variables)");
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
