#include "flags.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "byte_size.h"
#include "command.h"

namespace kvtier::cli {
namespace {

std::string Trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// Reads `in` to its end into *out.
Status ReadAll(std::FILE* in, const std::string& what, std::string* out) {
  out->clear();
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), in)) > 0) out->append(buffer, n);
  if (std::ferror(in)) return Status::FromErrno(errno, what);
  return Status::Ok();
}

std::string Format(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
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

namespace {

// "64 MiB", "1 GiB", "4096 B": the largest binary unit that divides `bytes`.
std::string SizeText(uint64_t bytes) {
  const struct {
    uint64_t unit;
    const char* name;
  } units[] = {{uint64_t{1} << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}};
  for (const auto& u : units) {
    if (bytes != 0 && bytes % u.unit == 0) return std::to_string(bytes / u.unit) + " " + u.name;
  }
  return std::to_string(bytes) + " B";
}

}  // namespace

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

void AddModelFlags(CLI::App* c, ModelFlags* f, bool with_prompt, const char* steps_help) {
  c->option_defaults()->always_capture_default();
  c->add_option("-m,--model", f->session.model_path, "A llama2.c checkpoint or GGUF file")
      ->required();
  c->add_option("--tokenizer", f->session.tokenizer_path,
                "The tokenizer of a llama2.c checkpoint (GGUF files carry theirs; giving one "
                "with a GGUF file is an error)");
  if (with_prompt) {
    c->add_option("-p,--prompt", f->prompt, "Text to continue; - reads it from stdin");
    c->add_option("-f,--prompt-file", f->prompt_file, "Read the prompt from this file");
  }
  c->add_option("-n,--steps,--max-tokens", f->steps, steps_help)
      ->check(WholeNumber(1, 1u << 20));
  c->add_option("--temp,--temperature", f->sampler.temperature, "0: greedy")
      ->check(Number(0.0, 100.0));
  c->add_option("--top-p", f->sampler.top_p, "Nucleus sampling threshold")
      ->check(Number(0.0, 1.0));
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
  c->add_option("--cache-dir", f->session.cache_dir,
                "SSD tier directory: cached prompt prefixes persist across runs")
      ->envname("KVTIER_CACHE_DIR");
  c->add_option("--salt", f->session.salt,
                "Tenant salt: runs with different salts share nothing")
      ->envname("KVTIER_SALT");
  c->add_option("--host-bytes", f->host_bytes_text,
                "Host memory tier (0: twice the context's KV, at least 16 MiB)")
      ->envname("KVTIER_HOST_BYTES");
  c->add_option("--ssd-bytes", f->ssd_bytes_text, "SSD tier capacity under --cache-dir")
      ->envname("KVTIER_SSD_BYTES");
  c->add_option("--codec", f->session.codec, "How blocks are encoded on the SSD and in Redis")
      ->check(CLI::IsMember({"identity", "shuffle-zstd", "int8", "int4"}))
      ->envname("KVTIER_CODEC");
  c->add_option("--redis", f->session.redis,
                "The shared Redis tier: HOST:PORT[,HOST:PORT...] (with --remote-key-file)")
      ->envname("KVTIER_REDIS");
  c->add_option("--remote-key-file", f->session.remote_key_file,
                "Deployment keys (mode 0600) that seal values in Redis (docs/security.md)")
      ->envname("KVTIER_REMOTE_KEY_FILE");
  c->add_flag("--remote-insecure-plaintext", f->session.remote_insecure_plaintext,
              "Keep values in Redis unencrypted and unauthenticated (anyone who reaches the "
              "Redis can read and forge them)");
  c->add_option("-c,--context", f->session.context_tokens,
                "Positions per sequence (0: the model's seq_len, at most 4096)")
      ->check(WholeNumber(0, 1u << 20));
  c->add_option("--block-tokens", f->session.block_tokens, "Tokens per cached chunk")
      ->check(BlockTokens());
  c->add_option("--metrics-file", f->metrics_file,
                "Write the cache's counters here at exit (Prometheus text format)");
}

Status WriteMetricsFile(const ModelFlags& f, const std::string& text) {
  if (f.metrics_file.empty()) return Status::Ok();
  const std::string tmp = f.metrics_file + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) return Status::FromErrno(errno, "--metrics-file " + tmp);
  const bool wrote = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const bool closed = std::fclose(out) == 0;
  if (!wrote || !closed) return Status::FromErrno(errno, "--metrics-file " + tmp);
  if (std::rename(tmp.c_str(), f.metrics_file.c_str()) != 0) {
    return Status::FromErrno(errno, "--metrics-file " + f.metrics_file);
  }
  return Status::Ok();
}

Status FinishModelFlags(ModelFlags* f) {
  f->session.log_level = CliLogLevel();
  if (!f->host_bytes_text.empty()) {
    KV_ASSIGN_OR_RETURN(f->session.host_bytes, ParseBytes("--host-bytes", f->host_bytes_text));
  }
  if (!f->ssd_bytes_text.empty()) {
    KV_ASSIGN_OR_RETURN(f->session.ssd_capacity_bytes,
                        ParseBytes("--ssd-bytes", f->ssd_bytes_text));
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
    std::FILE* in = std::fopen(f->prompt_file.c_str(), "rb");
    if (in == nullptr) return Status::FromErrno(errno, "--prompt-file " + f->prompt_file);
    const Status s = ReadAll(in, "--prompt-file " + f->prompt_file, &f->prompt);
    std::fclose(in);
    return s;
  }
  if (f->prompt == "-") return ReadAll(stdin, "reading the prompt from stdin", &f->prompt);
  return Status::Ok();
}

}  // namespace kvtier::cli
