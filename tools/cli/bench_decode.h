// `kvtier bench decode`: per-token decode latency of a long sequence with its KV resident,
// offloaded with full attention, offloaded with the INT8/INT4 ladder and offloaded with top-k
// selection, against the roofline of the same run (bench/decode_bench.h says what each
// configuration is; docs/benchmarks.md has measured figures and docs/offload.md the design).
//
// The SSD read bandwidth of the roofline is measured with fio (O_DIRECT, io_uring with registered
// buffers, random reads of one record, queue depth 32) over up to 1 GiB of the SSD tier's own
// segment files, before each measured token and after the last, so that the bound follows the
// shared disk's swings and reads what the tier reads; without fio there is no roofline.
//
// Thread safety: the CLI's main thread only. Ownership: flags are bound to this object's members.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

class BenchDecode {
 public:
  // Declares the `decode` subcommand of `bench` and its flags.
  explicit BenchDecode(CLI::App* bench);
  bool parsed() const { return app_->parsed(); }
  // Runs the benchmark and prints the report (text, or one JSON object with --json).
  Status Run();

 private:
  CLI::App* app_;
  std::string model_ = "synthetic:llama2-7b", tokenizer_;
  uint32_t layers_ = 0, dim_ = 256, hidden_dim_ = 512, vocab_ = 1024;
  uint32_t context_ = 32768, block_tokens_ = 256, tokens_ = 5, warmup_ = 1;
  std::string device_budget_, host_budget_, dram_budget_;
  uint32_t top_k_ = 16, recent_chunks_ = 2, sink_chunks_ = 1;
  uint32_t salient_tokens_ = 12;
  uint32_t codec_threads_ = 2, attention_threads_ = 1;
  float salient_scale_ = 200.0f;
  std::vector<std::string> configs_;
  std::string dir_ = "/var/tmp/kvtier-bench-decode";
  uint64_t seed_ = 1;
  bool json_ = false, no_probe_ = false;
};

}  // namespace kvtier::cli
