// `kvtier bench quality`: what each codec does to what the model then says. A fixed text is cut
// into windows; for each window the model computes the KV of a prefix exactly, and each codec's
// round trip of those KV blocks (encode, decode: what a load from the SSD or Redis tier gives) is
// put under the same teacher-forced continuation. The next-token distributions over the decoded
// KV are compared with those over the exact KV: KL divergence (mean and max, nats), top-1
// agreement, and the perplexity of the text's actual tokens (exact and decoded, and the relative
// change), with the codec's compression ratio over the prefix blocks. "99.9 % precision" is
// top-1 agreement >= 99.9 % and a perplexity change <= 0.1 % (docs/codecs.md); each row says
// whether it meets it.
//
// The model is the shared stories260K beside the repository (its llama2.c checkpoint and
// tokenizer: a 512-token context) unless --model names another (a llama2.c checkpoint with
// --tokenizer, or a GGUF with its vocabulary); the text is built in (simple stories of the kind
// the model was trained on) unless --text-file names one. Deterministic: the same model, text
// and codecs give the same figures on any machine of the same instruction set.
//
// Thread safety: the CLI's main thread only. Ownership: flags are bound to this object's members.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::runtime {
class Tokenizer;
}  // namespace kvtier::runtime

namespace kvtier::cli {

// The ladders' flags: rungs by codec name, layers kept one rung finer (empty: defaults, none).
struct LadderFlags {
  std::string int8_rung, int4_rung, finer_layers;
};

class BenchQuality {
 public:
  explicit BenchQuality(CLI::App* bench);
  bool parsed() const { return app_->parsed(); }
  // Aborted after Ctrl-C (the caller exits with kExitInterrupted).
  Status Run();

 private:
  Result<std::vector<std::vector<uint32_t>>> Windows(const runtime::Tokenizer& tokenizer,
                                                     uint64_t window) const;
  Status WriteWindows(const std::vector<std::vector<uint32_t>>& seqs) const;

  CLI::App* app_;
  std::string model_, tokenizer_, text_file_, windows_json_,
      codecs_text_ =
          "identity,shuffle-zstd,int8,int8+zstd,int4,int4+zstd,int8-rot,int4-rot,k8v4,k8v4-rot,"
          "ecq5,ecq6,ecq6v5,ladder-short";
  LadderFlags ladder_;
  uint32_t prefix_tokens_ = 256, continue_tokens_ = 128, stride_ = 64, windows_max_ = 64;
  bool per_layer_ = false, json_ = false;
};

}  // namespace kvtier::cli
