// `kvtier bench codec`: every block codec on the same data, side by side. One row per codec and
// data set: compression ratio, encode and decode throughput (raw bytes per second, medians over
// --repeat runs), relative RMSE of the decoded block and the cosine between the attention output
// of a query over the original FP16 block and over the decoded one (1 for lossless codecs).
//
// Data sets: Gaussian FP16 (bench/micro/codecs_bench.cc's blocks), synthetic KV with outlier
// channels (runtime/synthetic_kv.h's heavy-hitter tokens, plus a few key channels 8x larger, as
// trained models' keys have), and the K/V blocks of a real model after a prefill (--model; the
// shared stories260K model beside the repository by default, left out with a note when absent).
// Two reference rows: `zstd-cli`, the same bytes through the zstd program at level 1 (what
// shuffle-zstd uses) in the same run, and `ladder`, the precision ladder's codecs by age over a
// long synthetic sequence (SSD tier: shuffle-zstd for the sink and recent window, then int8,
// int4) with the attention cosine taken over the whole sequence. docs/benchmarks.md has figures.
// --save-model-kv FILE writes the real model's blocks as a NumPy array (.npy, FP16, shape
// [blocks][2 (K, V)][tokens][kv_heads][head_dim]) for analyses outside the CLI
// (bench/ecq_bounds.py).
//
// Thread safety: the CLI's main thread only. Ownership: flags are bound to this object's members.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

class BenchCodec {
 public:
  explicit BenchCodec(CLI::App* bench);
  bool parsed() const { return app_->parsed(); }
  // Aborted after Ctrl-C (the caller exits with kExitInterrupted).
  Status Run();

 private:
  CLI::App* app_;
  std::string model_, tokenizer_, bytes_text_ = "16MiB", save_model_kv_;
  uint32_t repeat_ = 5, model_tokens_ = 512, ladder_tokens_ = 32768;
  std::string ladder_int8_, ladder_int4_;             // Empty: the ladder's defaults.
  uint32_t ladder_recent_ = 0, ladder_int4_age_ = 0;  // 0: the ladder's defaults.
  uint64_t seed_ = 1;
  bool json_ = false, no_zstd_cli_ = false, cpu_time_ = false;
};

}  // namespace kvtier::cli
