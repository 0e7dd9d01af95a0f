#include "bench_decode.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/decode_bench.h"
#include "byte_size.h"
#include "core/limits.h"
#include "engine/offload_sequence.h"
#include "interrupt.h"
#include "log_level.h"
#include "progress.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool HaveFio() { return std::system("command -v fio >/dev/null 2>&1") == 0; }

// fio's O_DIRECT read bandwidth over the SSD tier's own segment files in `dir` (up to 1 GiB of
// them, every block read once in random order, as a layer's records lie scattered over the
// segments), with requests of `block_bytes` at queue depth 32 from one thread (the tier's one ring
// per directory), through registered buffers (--fixedbufs): without them fio pins the 1,024 pages
// of every 4 MiB request and measures 0.6-0.8x of what the disk gives (the tier's buffers are
// pre-faulted huge pages). The same data on the same disk as the tier reads, so caches below the
// guest (a virtual disk's host) treat both alike.
Result<double> FioRead(const std::string& dir, uint64_t block_bytes) {
  const uint64_t bs = AlignUp(block_bytes, kDirectIoAlignment);
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.file_size(ec) >= bs) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string names;
  uint64_t total = 0;
  for (const std::filesystem::path& f : files) {
    if (total >= kGiB) break;
    std::string name = f.string();
    std::string escaped;
    for (const char c : name) {
      if (c == ':') escaped += '\\';
      escaped += c;
    }
    names += (names.empty() ? "" : ":") + escaped;
    total += std::filesystem::file_size(f, ec);
  }
  if (names.empty()) return Status::NotFound("no SSD tier files to probe in " + dir);
  const std::string cmd = "fio --name=probe --filename=" + ShellQuote(names) +
                          " --rw=randread --bs=" + std::to_string(bs) +
                          " --iodepth=32 --ioengine=io_uring --fixedbufs --direct=1"
                          " --numjobs=1 --output-format=json 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Status::IoError("cannot start fio");
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) return Status::IoError("fio failed (exit status " + std::to_string(rc) + ")");
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) {
    return Status::IoError("fio printed no JSON report");
  }
  const double bw = j["jobs"][0]["read"]["bw_bytes"].get<double>();
  if (!(bw > 0)) return Status::IoError("fio measured no read bandwidth");
  return bw;
}

nlohmann::ordered_json ConfigJson(const runtime::DecodeConfigReport& r) {
  nlohmann::ordered_json j;
  j["config"] = std::string(runtime::DecodeConfigName(r.config));
  j["ms_per_token"] = r.ms_per_token_median;
  j["ms_per_token_min"] = r.ms_per_token_min;
  j["ms_per_token_max"] = r.ms_per_token_max;
  j["ms_per_token_all"] = r.ms_per_token;
  j["stall_ms_per_token"] = r.stall_ms_per_token;
  j["compute_ms_per_token"] = r.compute_ms_per_token;
  j["ssd_read_bytes_per_token"] = r.ssd_read_bytes_per_token;
  j["ssd_write_bytes_per_token"] = r.ssd_write_bytes_per_token;
  j["host_to_device_bytes_per_token"] = r.host_to_device_bytes_per_token;
  j["ssd_read_bytes_per_s"] = r.ssd_read_bytes_per_s;
  j["roofline_ms_per_token"] = r.roofline_ms_per_token;
  j["over_roofline"] = r.over_roofline;
  j["depth"] = r.depth;
  j["blocks_prefetched"] = r.blocks_prefetched;
  j["blocks_demand"] = r.blocks_demand;
  j["prefetch_coverage"] = r.prefetch_coverage;
  j["chunks_attended"] = r.chunks_attended;
  j["quantized_attention"] = r.quantized_attention;
  j["quantized_attention_bytes_per_token"] = r.quantized_attention_bytes_per_token;
  j["fp16_attention_bytes_per_token"] = r.fp16_attention_bytes_per_token;
  j["logits_identical"] = r.logits_identical;
  j["greedy_agreement"] = r.greedy_agreement;
  j["attention_cosine_min"] = r.attention_cosine_min;
  j["attention_cosine_mean"] = r.attention_cosine_mean;
  j["device_budget_bytes"] = r.device_budget_bytes;
  j["host_budget_bytes"] = r.host_budget_bytes;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["weights_bytes"] = r.weights_bytes;
  return j;
}

void PrintJson(const runtime::DecodeBenchReport& report) {
  using runtime::DecodeConfig;
  nlohmann::ordered_json j;
  j["model"] = report.model;
  j["layers"] = report.layout.layers;
  j["kv_heads"] = report.layout.kv_heads;
  j["head_dim"] = report.layout.head_dim;
  j["block_tokens"] = report.layout.block_tokens;
  j["context_tokens"] = report.context_tokens;
  j["kv_bytes"] = report.kv_bytes;
  j["tokens"] = report.tokens;
  j["warmup_tokens"] = report.warmup_tokens;
  j["top_k"] = report.top_k;
  j["reference"] = std::string(runtime::DecodeConfigName(report.reference));
  j["salient_attention_mass"] = report.salient_attention_mass;
  const struct {
    DecodeConfig config;
    const char* key;
  } keys[] = {{DecodeConfig::kResident, "resident_ms_per_token"},
              {DecodeConfig::kResidentTopk, "resident_topk_ms_per_token"},
              {DecodeConfig::kOffload, "offload_ms_per_token"},
              {DecodeConfig::kLadder, "ladder_ms_per_token"},
              {DecodeConfig::kLadderDequant, "ladder_dequant_ms_per_token"},
              {DecodeConfig::kTopk, "topk_ms_per_token"},
              {DecodeConfig::kReference, "reference_ms_per_token"}};
  for (const auto& k : keys) {
    if (const runtime::DecodeConfigReport* r = report.Find(k.config)) {
      j[k.key] = r->ms_per_token_median;
    }
  }
  const runtime::DecodeConfigReport* offload = report.Find(DecodeConfig::kOffload);
  if (offload != nullptr && offload->roofline_ms_per_token > 0) {
    j["roofline_ms_per_token"] = offload->roofline_ms_per_token;
    j["offload_over_roofline"] = offload->over_roofline;
  }
  const runtime::DecodeConfigReport* resident = report.Find(DecodeConfig::kResident);
  const runtime::DecodeConfigReport* topk = report.Find(DecodeConfig::kTopk);
  if (resident != nullptr && topk != nullptr) {
    j["topk_over_resident"] = topk->ms_per_token_median / resident->ms_per_token_median;
    j["topk_context_over_device_budget"] =
        static_cast<double>(report.kv_bytes) / static_cast<double>(topk->device_budget_bytes);
  }
  if (const runtime::DecodeConfigReport* rt = report.Find(DecodeConfig::kResidentTopk);
      rt != nullptr && topk != nullptr) {
    j["topk_over_resident_topk"] = topk->ms_per_token_median / rt->ms_per_token_median;
  }
  const runtime::DecodeConfigReport* ladder = report.Find(DecodeConfig::kLadder);
  if (ladder != nullptr && offload != nullptr) {
    j["ladder_over_offload"] = ladder->ms_per_token_median / offload->ms_per_token_median;
  }
  if (ladder != nullptr && ladder->roofline_ms_per_token > 0) {
    j["ladder_over_roofline"] = ladder->over_roofline;
  }
  if (const runtime::DecodeConfigReport* dq = report.Find(DecodeConfig::kLadderDequant);
      ladder != nullptr && dq != nullptr) {
    j["ladder_over_ladder_dequant"] = ladder->ms_per_token_median / dq->ms_per_token_median;
  }
  // Per configuration: whether decode attended int8/int4 blocks from their codes, over how many
  // bytes per token.
  nlohmann::ordered_json quantized = nlohmann::ordered_json::object();
  for (const runtime::DecodeConfigReport& r : report.configs) {
    quantized[std::string(runtime::DecodeConfigName(r.config))] = {
        {"attended_quantized", r.quantized_attention},
        {"quantized_bytes_per_token", r.quantized_attention_bytes_per_token},
        {"fp16_bytes_per_token", r.fp16_attention_bytes_per_token}};
  }
  j["quantized_attention"] = quantized;
  nlohmann::ordered_json configs = nlohmann::ordered_json::array();
  for (const runtime::DecodeConfigReport& r : report.configs) configs.push_back(ConfigJson(r));
  j["configs"] = configs;
  std::printf("%s\n", JsonText(j, 2).c_str());
}

void PrintText(const runtime::DecodeBenchReport& report) {
  std::printf("%s: %u layers, %u KV heads x %u, context %u tokens, KV %.0f MiB, %u tokens\n",
              report.model.c_str(), report.layout.layers, report.layout.kv_heads,
              report.layout.head_dim, report.context_tokens,
              static_cast<double>(report.kv_bytes) / double(kMiB), report.tokens);
  for (const runtime::DecodeConfigReport& r : report.configs) {
    std::printf("%-14s %8.1f ms/token (%.1f-%.1f)", std::string(DecodeConfigName(r.config)).c_str(),
                r.ms_per_token_median, r.ms_per_token_min, r.ms_per_token_max);
    if (r.device_budget_bytes != 0) {
      std::printf("  stall %.1f  ssd %.0f MiB/token  roofline %.1f ms  depth %u",
                  r.stall_ms_per_token, r.ssd_read_bytes_per_token / double(kMiB),
                  r.roofline_ms_per_token, r.depth);
    }
    std::printf("  agree %.3f  cos min %.4f%s", r.greedy_agreement, r.attention_cosine_min,
                r.logits_identical ? "  logits identical" : "");
    if (r.quantized_attention) {
      std::printf("  quantized attention %.0f MiB/token",
                  r.quantized_attention_bytes_per_token / double(kMiB));
    }
    std::printf("\n");
  }
  const runtime::DecodeConfigReport* ladder = report.Find(runtime::DecodeConfig::kLadder);
  const runtime::DecodeConfigReport* offload = report.Find(runtime::DecodeConfig::kOffload);
  if (ladder != nullptr && offload != nullptr) {
    std::printf("ladder/offload %.3f", ladder->ms_per_token_median / offload->ms_per_token_median);
    if (ladder->roofline_ms_per_token > 0) {
      std::printf("  ladder over roofline %.3f", ladder->over_roofline);
    }
    std::printf("\n");
  }
}

}  // namespace

BenchDecode::BenchDecode(CLI::App* bench)
    : app_(bench->add_subcommand(
          "decode", "Decode latency with KV resident, offloaded, laddered and top-k selected")) {
  app_->add_option("--model", model_, "synthetic:<preset> or a llama2.c/GGUF file");
  app_->add_option("--tokenizer", tokenizer_, "llama2.c tokenizer (for llama2.c files)");
  app_->add_option("--layers", layers_, "Cut a synthetic model to this many layers (default 8)");
  app_->add_option("--dim", dim_, "Synthetic model width (KV geometry unchanged; default 256)");
  app_->add_option("--context", context_, "Context tokens before decoding (default 32768)");
  app_->add_option("--block-tokens", block_tokens_, "Tokens per KV block (default 256)");
  app_->add_option("--tokens", tokens_, "Measured decode tokens per configuration (default 5)");
  app_->add_option("--warmup", warmup_, "Unmeasured tokens first (default 1)");
  app_->add_option("--device-budget", device_budget_, "Device tier bytes (default: automatic)");
  app_->add_option("--host-budget", host_budget_, "Host tier bytes (default: KV / 4)");
  app_->add_option("--dram-budget", dram_budget_, "Device + host bytes (capacity runs)");
  app_->add_option("--top-k", top_k_, "Chunks chosen by selection (default 16)");
  app_->add_option("--recent-chunks", recent_chunks_, "Trailing chunks always attended");
  app_->add_option("--codec-threads", codec_threads_, "Ladder decoders (default 2)");
  app_->add_option("--attention-threads", attention_threads_,
                   "Threads of the model's attention (default 1)");
  app_->add_option("--salient-tokens", salient_tokens_,
                   "Synthetic context: heavy-hitter tokens per layer (0 = spread attention)");
  app_->add_option("--salient-scale", salient_scale_, "Synthetic context: their key norm");
  app_->add_option("--configs", configs_,
                   "resident, resident-topk, offload, ladder, ladder-dequant, topk, reference "
                   "(comma list)")
      ->delimiter(',');
  app_->add_option("--dir", dir_, "Directory for the SSD tier and the fio probe");
  app_->add_option("--seed", seed_, "Weights and context seed");
  app_->add_flag("--no-probe", no_probe_, "Skip the fio bandwidth probes (no roofline)");
  app_->add_flag("--json", json_, "Print one JSON object");
}

Status BenchDecode::Run() {
  runtime::DecodeBenchOptions o;
  o.model = model_;
  o.tokenizer = tokenizer_;
  o.layers = layers_;
  o.dim = dim_;
  o.hidden_dim = std::max(dim_ * 2, 64u);
  o.vocab_size = vocab_;
  o.seed = seed_;
  o.context_tokens = context_;
  o.block_tokens = block_tokens_;
  o.tokens = tokens_;
  o.warmup_tokens = warmup_;
  o.top_k = top_k_;
  o.recent_chunks = recent_chunks_;
  o.sink_chunks = sink_chunks_;
  o.codec_threads = codec_threads_;
  o.attention_threads = attention_threads_;
  o.dir = dir_;
  o.context.seed = seed_;
  o.context.salient_tokens = salient_tokens_;
  o.context.salient_scale = salient_scale_;
  const struct {
    const std::string* text;
    const char* flag;
    uint64_t* out;
  } sizes[] = {{&device_budget_, "--device-budget", &o.device_budget_bytes},
               {&host_budget_, "--host-budget", &o.host_budget_bytes},
               {&dram_budget_, "--dram-budget", &o.dram_budget_bytes}};
  for (const auto& s : sizes) {
    if (s.text->empty()) continue;
    KV_ASSIGN_OR_RETURN(*s.out, ParseBytes(s.flag, *s.text));
  }
  if (!configs_.empty()) {
    o.configs.clear();
    for (const std::string& name : configs_) {
      KV_ASSIGN_OR_RETURN(runtime::DecodeConfig c, runtime::ParseDecodeConfig(name));
      o.configs.push_back(c);
    }
  }
  // A --dir this run creates is removed with the rest of its scratch data; one that existed
  // stays, emptied of what the run wrote.
  ScopedRemoval removal;
  KV_RETURN_IF_ERROR(CreateScratchDir(dir_, &removal));
  if (!no_probe_ && HaveFio()) {
    o.ssd_probe = [](const std::string& tier_dir, uint64_t request_bytes) {
      return FioRead(tier_dir, request_bytes);
    };
  } else if (!no_probe_) {
    std::fprintf(stderr, "kvtier bench decode: fio not found; no roofline (install fio)\n");
  }
  // One progress line for the whole run, named after its step; the steps as lines of their own
  // with --log-level info.
  Progress progress("bench decode", 0, ProgressUnit::kCount, "blocks");
  o.progress_blocks = [&progress](uint64_t done, uint64_t total, std::string_view phase) {
    progress.SetTotal(total);
    progress.SetLabel("bench decode " + std::string(phase));
    progress.Update(done);
  };
  if (CliLogLevel() <= LogLevel::kInfo) {
    o.progress = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  o.cancelled = Interrupted;
  Result<runtime::DecodeBenchReport> report = runtime::RunDecodeBench(o);
  progress.Finish();
  KV_RETURN_IF_ERROR(report.status());
  if (json_) {
    PrintJson(*report);
  } else {
    PrintText(*report);
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
