#include "flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "byte_size.h"
#include "cli_limits.h"
#include "command.h"
#include "config_check.h"
#include "env/dir_trust.h"
#include "input_file.h"

namespace kvtier::cli {
namespace {

std::string Trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

std::string Format(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::string Dashed(std::string_view name) {
  std::string out(name);
  for (char& ch : out) {
    if (ch == '_') ch = '-';
  }
  return out;
}

std::string EnvName(std::string_view name) {
  std::string out = "KVTIER_";
  for (char ch : name) out += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

// --help's type column: "UINT from 1 to 16", "one of back, through".
std::string TypeName(const OptionSpec& spec) {
  std::string type(OptionTypeName(spec.type));
  for (char& ch : type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (spec.type == OptionType::kChoice) return OptionRangeText(spec);
  if (spec.type == OptionType::kStrings) return "LIST (comma-separated)";
  const std::string range = OptionRangeText(spec);
  return range.empty() || spec.type == OptionType::kBool ? type : type + " " + range;
}

// One flag per CLI row of the options table: --name (and its aliases), KVTIER_<NAME> (or a
// variable of an alias when only that one is set), the config key; the value is checked when
// parsed, through the table's setter, so a bad one is a usage error naming the range.
void AddEngineOptionFlags(CLI::App* c, ModelFlags* f) {
  for (const OptionSpec& spec : EngineOptionTable()) {
    if ((spec.surfaces & kSurfaceCli) == 0) continue;
    std::string names = "--" + Dashed(spec.name);
    std::string env = EnvName(spec.name);
    for (std::string_view alias : OptionList(spec.aliases)) {
      names += ",--" + Dashed(alias);
      if (std::getenv(env.c_str()) == nullptr && std::getenv(EnvName(alias).c_str()) != nullptr) {
        env = EnvName(alias);  // An older variable, still honoured.
      }
    }
    std::string help(spec.doc);
    if (!spec.unit.empty()) help += " (" + std::string(spec.unit) + ")";
    // The CLI's own default where it differs ("CLI default: 1 GiB" in the row's note).
    std::string default_text(spec.default_text);
    const size_t cli_default = spec.note.find("CLI default");
    if (spec.note.substr(cli_default == std::string_view::npos ? 0 : cli_default)
            .starts_with("CLI default: ")) {
      default_text = spec.note.substr(cli_default + 13);
    } else if (cli_default != std::string_view::npos) {
      help += "; " + std::string(spec.note.substr(cli_default));
    }
    std::string& text = f->engine_text[std::string(spec.name)];
    const OptionSpec* row = &spec;
    const std::string flag = "--" + Dashed(spec.name);
    CLI::Validator check(
        [row, flag](std::string& value) -> std::string {
          Result<OptionValue> parsed = ParseOptionText(*row, flag, value);
          if (!parsed.ok()) {  // CLI11 names the flag already.
            std::string_view message = parsed.status().message();
            if (message.starts_with(flag + ": ")) {
              message.remove_prefix(flag.size() + 2);
            } else if (message.starts_with(flag + " ")) {
              message.remove_prefix(flag.size() + 1);
            }
            return std::string(message);
          }
          if (!row->settable()) return std::string();  // A file name, read later.
          // The table's setter checks the value's type and range before it applies it (to a
          // tier these options lack: not at all).
          EngineOptions scratch;
          const Status s = SetEngineOption(&scratch, *row, *parsed);
          return s.ok() ? std::string() : std::string(s.message());
        },
        "");
    CLI::Option* option = spec.type == OptionType::kBool ? c->add_flag(names, text, help)
                                                         : c->add_option(names, text, help);
    option->check(check)
        ->envname(env)
        ->type_name(TypeName(spec))
        ->default_str(default_text)
        ->group("Cache engine options (docs/options.md)");
    f->engine_flags.emplace_back(&spec, option);
  }
}

// The engine flags given (on the command line, in a variable or in the config file), parsed.
// The options LlmSession has its own fields for (with their own checks and messages) go there;
// the others into session.engine_settings, in the table's order.
Status FinishEngineOptionFlags(ModelFlags* f) {
  for (const auto& [spec, option] : f->engine_flags) {
    if (option->count() == 0) continue;
    const std::string name(spec->name);
    KV_ASSIGN_OR_RETURN(OptionValue value,
                        ParseOptionText(*spec, "--" + Dashed(name), f->engine_text[name]));
    LlmSessionOptions& s = f->session;
    if (name == "host_bytes") {
      s.host_bytes = std::get<uint64_t>(value);
    } else if (name == "ssd_bytes") {
      s.ssd_capacity_bytes = std::get<uint64_t>(value);
    } else if (name == "ssd_codec") {
      s.codec = std::get<std::string>(value);
    } else if (name == "remote_endpoints") {
      s.redis = f->engine_text[name];  // SplitRedisEndpoints names an empty item.
    } else if (name == "ssd_key_file") {
      s.ssd_key_file = std::get<std::string>(value);
    } else if (name == "remote_key_file") {
      s.remote_key_file = std::get<std::string>(value);
    } else if (name == "remote_insecure_plaintext") {
      s.remote_insecure_plaintext = std::get<bool>(value);
    } else {
      s.engine_settings.emplace_back(spec, std::move(value));
    }
  }
  return Status::Ok();
}

}  // namespace

CLI::Validator WholeNumber(uint64_t lo, uint64_t hi) {
  const std::string range = "from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::string t = Trimmed(text);
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
          return "'" + text + "' is not a whole number " + range;
        }
        if (v < lo || v > hi) return "'" + text + "' is not " + range;
        return std::string();
      },
      "INT " + range);
}

CLI::Validator Number(double lo, double hi) {
  const std::string r = "from " + Format(lo) + " to " + Format(hi);
  return CLI::Validator(
      [lo, hi, r](std::string& text) -> std::string {
        const std::string t = Trimmed(text);
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(t.c_str(), &end);
        if (t.empty() || errno != 0 || end != t.c_str() + t.size()) {
          return "'" + text + "' is not a number " + r;
        }
        if (!(v >= lo && v <= hi)) return "'" + text + "' is not " + r;
        return std::string();
      },
      "NUMBER " + r);
}

CLI::Validator BlockTokens() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string t = Trimmed(text);
        uint32_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v < 16 || v > 1024 ||
            v % 16 != 0) {
          return "'" + text + "' is not a multiple of 16 from 16 to 1024";
        }
        return std::string();
      },
      "INT multiple of 16 in [16, 1024]");
}

CLI::Validator ByteSize(uint64_t lo, uint64_t hi) {
  const std::string range = "from " + SizeText(lo) + " to " + SizeText(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const Result<uint64_t> v = ParseBytes("size", Trimmed(text));
        if (!v.ok()) return "'" + text + "' is not a size (4096, 64KiB, 1g) " + range;
        if (*v < lo || *v > hi) return "'" + text + "' is not " + range;
        return std::string();
      },
      "SIZE " + range);
}

namespace {

void AddModelFileFlags(CLI::App* c, ModelFlags* f) {
  c->option_defaults()->always_capture_default();
  c->add_option("-m,--model", f->session.model_path, "A llama2.c checkpoint or GGUF file")
      ->required();
  c->add_option("--tokenizer", f->session.tokenizer_path,
                "The tokenizer of a llama2.c checkpoint (GGUF files carry theirs; giving one "
                "with a GGUF file is an error)");
}

void AddSamplingFlags(CLI::App* c, ModelFlags* f, const char* steps_help) {
  c->add_option("-n,--steps,--max-tokens", f->steps, steps_help)->check(WholeNumber(1, 1u << 20));
  c->add_option("--temp,--temperature", f->sampler.temperature, "0: greedy")
      ->check(Number(0.0, 100.0));
  c->add_option("--top-p", f->sampler.top_p, "Nucleus sampling threshold")->check(Number(0.0, 1.0));
  c->add_option("-s,--seed", f->seed, "Sampling seed; -1: a random one")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            long long v = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < -1) {
              return "'" + text + "' is not -1 (random) or a whole number from 0";
            }
            return std::string();
          },
          "INT (-1: random)"));
}

void AddCacheFlags(CLI::App* c, ModelFlags* f) {
  c->add_option("--cache-dir", f->session.cache_dir,
                "SSD tier directory: cached prompt prefixes persist across runs")
      ->envname("KVTIER_CACHE_DIR");
  c->add_option("--salt", f->session.salt, "Tenant salt: runs with different salts share nothing")
      ->envname("KVTIER_SALT");
  c->add_option("-c,--context", f->session.context_tokens,
                "Positions per sequence (0: the model's seq_len, at most 4096)")
      ->check(WholeNumber(0, 1u << 20));
  c->add_option("--block-tokens", f->session.block_tokens, "Tokens per cached chunk")
      ->check(BlockTokens());
  c->add_option("--metrics-file", f->metrics_file,
                "Write the cache's counters here at exit (Prometheus text format)");
  c->add_option("--server", f->session.server,
                "Use the tiers of a running kvtier serve, at this socket (unix:PATH or PATH), "
                "instead of opening them here (docs/serve.md)")
      ->envname("KVTIER_SERVER");
  c->add_option("--server-token-file", f->session.server_token_file,
                "A file (mode 0600) holding the --server service's client token")
      ->envname("KVTIER_SERVER_TOKEN_FILE");
  AddEngineOptionFlags(c, f);
}

}  // namespace

void AddModelFlags(CLI::App* c, ModelFlags* f, bool with_prompt, const char* steps_help) {
  AddModelFileFlags(c, f);
  if (with_prompt) {
    c->add_option("-p,--prompt", f->prompt, "Text to continue; - reads it from stdin");
    c->add_option("-f,--prompt-file", f->prompt_file,
                  "Read the prompt from this file (a regular file of at most " +
                      SizeText(kPromptFileBytesMax) + ")");
  }
  AddSamplingFlags(c, f, steps_help);
  AddCacheFlags(c, f);
}

void AddModelCacheFlags(CLI::App* c, ModelFlags* f) {
  AddModelFileFlags(c, f);
  AddCacheFlags(c, f);
}

void AddEngineCacheFlags(CLI::App* c, ModelFlags* f) {
  c->option_defaults()->always_capture_default();
  c->add_option("--cache-dir", f->session.cache_dir,
                "SSD tier directory: cached KV persists across restarts")
      ->envname("KVTIER_CACHE_DIR");
  AddEngineOptionFlags(c, f);
}

Status FinishEngineCacheFlags(ModelFlags* f) {
  f->session.log_level = CliLogLevel();
  return FinishEngineOptionFlags(f);
}

Result<OptionValue> ParseOptionText(const OptionSpec& spec, std::string_view flag,
                                    const std::string& text) {
  const std::string t = Trimmed(text);
  const std::string what(flag);
  switch (spec.type) {
    case OptionType::kBool:
      if (t.empty() || t == "true" || t == "1" || t == "yes" || t == "on") return OptionValue(true);
      if (t == "false" || t == "0" || t == "no" || t == "off" || t == "-1") {
        return OptionValue(false);
      }
      return Status::InvalidArgument(what + " '" + text + "' is not true or false");
    case OptionType::kBytes: {
      KV_ASSIGN_OR_RETURN(const uint64_t bytes, ParseBytes(flag, t));
      return OptionValue(bytes);
    }
    case OptionType::kUint: {
      const int base = spec.default_text.size() > 1 && spec.default_text[0] == '0' ? 8 : 10;
      uint64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, base);
      if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
        return Status::InvalidArgument(what + " '" + text + "' is not a whole number " +
                                       OptionRangeText(spec));
      }
      return OptionValue(v);
    }
    case OptionType::kInt: {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
        return Status::InvalidArgument(what + " '" + text + "' is not a whole number " +
                                       OptionRangeText(spec));
      }
      return OptionValue(v);
    }
    case OptionType::kDouble: {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(t.c_str(), &end);
      if (t.empty() || errno != 0 || end != t.c_str() + t.size()) {
        return Status::InvalidArgument(what + " '" + text + "' is not a number " +
                                       OptionRangeText(spec));
      }
      return OptionValue(v);
    }
    case OptionType::kStrings: {
      std::vector<std::string> items;
      size_t start = 0;
      while (start <= t.size()) {
        const size_t comma = std::min(t.find(',', start), t.size());
        const std::string item = Trimmed(t.substr(start, comma - start));
        if (!item.empty()) items.push_back(item);
        start = comma + 1;
      }
      return OptionValue(std::move(items));
    }
    default:
      return OptionValue(t);
  }
}

namespace {
// CLI11's TOML reader, bounded (size, nesting) before it reads, strict after (every key an
// option), with the table's snake_case keys read as the flags' dashed names. Errors are thrown
// as CLI11 expects of a reader: main() prints them as usage errors.
class SnakeCaseToml : public CLI::ConfigTOML {
 public:
  explicit SnakeCaseToml(const CLI::App* root) : root_(root) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string text;
    Status s = ReadConfigText(input, kConfigFileBytesMax, &text);
    if (s.ok()) s = CheckConfigNesting(text, kConfigDepthMax);
    std::vector<CLI::ConfigItem> read;
    if (s.ok()) {
      std::istringstream bounded(text);
      read = CLI::ConfigTOML::from_config(bounded);
      s = CheckConfigItems(*root_, read);
    }
    if (!s.ok()) throw CLI::ConfigError("config file " + FileName() + ": " + s.message());
    for (CLI::ConfigItem& item : read) {
      for (char& ch : item.name) {
        if (ch == '_') ch = '-';
      }
    }
    return read;
  }

 private:
  // The file being read, for messages (--config's value or KVTIER_CONFIG's).
  std::string FileName() const {
    const CLI::Option* config = root_->get_config_ptr();
    if (config == nullptr) return "";
    const std::vector<std::string> files = config->as<std::vector<std::string>>();
    return files.empty() ? std::string() : files.front();
  }

  const CLI::App* root_;  // Owns this reader.
};
}  // namespace

std::shared_ptr<CLI::Config> SnakeCaseConfig(const CLI::App* root) {
  return std::make_shared<SnakeCaseToml>(root);
}

CLI::Validator ConfigFileCheck() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (path.empty()) return std::string();
        const Status s = CheckInputFile(path, "config file " + path, kConfigFileBytesMax);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

std::vector<std::string> EngineOptionVariables() {
  std::vector<std::string> out;
  for (const OptionSpec& spec : EngineOptionTable()) {
    if ((spec.surfaces & kSurfaceCli) == 0) continue;
    out.push_back(EnvName(spec.name));
    for (std::string_view alias : OptionList(spec.aliases)) out.push_back(EnvName(alias));
  }
  return out;
}

Status WriteMetricsFile(const ModelFlags& f, const std::string& text) {
  if (f.metrics_file.empty()) return Status::Ok();
  // Through an unpredictable O_EXCL|O_NOFOLLOW temporary; a FIFO, device or link is refused.
  return ReplaceRegularFile("--metrics-file", f.metrics_file, text, 0644);
}

Status FinishModelFlags(ModelFlags* f) {
  f->session.log_level = CliLogLevel();
  KV_RETURN_IF_ERROR(FinishEngineOptionFlags(f));
  // Written at exit: a path that cannot take it fails now, not after the run.
  if (!f->metrics_file.empty()) {
    KV_RETURN_IF_ERROR(CheckReplaceable("--metrics-file", f->metrics_file));
  }
  if (f->seed == -1) {
    std::random_device rd;
    f->sampler.seed = (uint64_t{rd()} << 32) | rd();
  } else {
    f->sampler.seed = static_cast<uint64_t>(f->seed);
  }
  if (!f->prompt_file.empty()) {
    if (!f->prompt.empty()) {
      return Status::InvalidArgument("give --prompt or --prompt-file, not both");
    }
    return ReadInputFile(f->prompt_file, "--prompt-file " + f->prompt_file, kPromptFileBytesMax,
                         &f->prompt);
  }
  if (f->prompt == "-") {
    return ReadInputFile("-", "--prompt - (stdin)", kPromptFileBytesMax, &f->prompt);
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
