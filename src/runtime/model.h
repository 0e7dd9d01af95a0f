// Model: the forward pass of a llama-family transformer on the CPU. RMSNorm, RoPE on adjacent
// pairs, grouped-query attention over an FP16 KV cache reached through a KvBlockSource, SwiGLU
// FFN, tied or separate classifier. Matrix products go through OpenBLAS (sgemm for a chunk of
// tokens, sgemv for one token); attention uses the AVX2/F16C kernels of runtime/kernels.h, one
// AttendF16 call per token and layer, which reads the attended blocks' K and V once for all
// query heads.
//
// Forward() processes any number of tokens starting at any position, in chunks of at most
// `chunk_tokens` (default 2048): each chunk's K/V are written to the cache and then every token
// of the chunk attends causally to all earlier positions, so chunked prefill gives the same
// logits as feeding the tokens one by one (up to float summation order; tests bound the gap).
// When decoding one token the source may narrow attention to a subset of chunks
// (KvBlockSource::SelectChunks, attention-guided selection); by default every chunk is attended.
//
// With ForwardOptions::attention_threads = 2 a helper thread takes half of each long layer's
// attention: at decode the second half of the attended rows (the two halves merged exactly, see
// kernels.h MergeAttendParts), in prefill every other token of the chunk.
//
// Thread safety: a Model owns scratch buffers and is used by one thread at a time; distinct
// Models may share nothing and run concurrently. OpenBLAS may use its own threads inside a call.
// The helper thread (started by the first call that asks for two attention threads, stopped
// with the Model) only runs inside a Forward() call, on buffers the calling thread does not
// touch until it has waited for it.
// Ownership: owns its weights; borrows the KvBlockSource for the duration of a call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kvtier/result.h"
#include "runtime/kernels.h"
#include "runtime/kv_blocks.h"
#include "runtime/model_weights.h"
#include "runtime/runtime_limits.h"

namespace kvtier::runtime {

// Which logits Forward() returns.
enum class LogitsMode : uint8_t {
  kLast = 0,  // vocab_size floats: the last token's.
  kAll = 1,   // n_tokens * vocab_size floats, row t for token t.
  kNone = 2,  // Nothing (prefill that only fills the cache).
};

// Receives the attention output of every token a Forward() call processes, per layer: `out` is
// the token's q_dim attention output (before the wo projection), valid during the call only. For
// quality measurements (the cosine between full and selected attention); costs nothing when unset.
class AttentionProbe {
 public:
  virtual ~AttentionProbe() = default;
  virtual void OnAttentionOutput(uint32_t layer, uint32_t pos, std::span<const float> out) = 0;
};

struct ForwardOptions {
  uint32_t chunk_tokens = kPrefillChunkTokensDefault;  // Tokens per sgemm chunk, >= 1.
  LogitsMode logits = LogitsMode::kLast;
  KernelIsa isa = KernelIsa::kAuto;  // kScalar forces the reference attention kernels.
  AttentionProbe* probe = nullptr;   // Borrowed for the call; nullptr = none.
  // 1, or 2 to split the attention of layers that read at least kAttentionSplitBytesMin of KV
  // with a helper thread. 1 by default: in offloaded mode the other core copies blocks. Logits
  // are the same bit for bit in prefill; at decode they differ by float rounding (the merge).
  uint32_t attention_threads = 1;
  // Polled before each chunk, after each layer's attention and between the query tokens of a
  // prefill's attention (also on the helper thread); once it returns true (and it must stay
  // true), Forward returns Aborted and the KV of the positions it was computing is incomplete.
  // Long prefills (a 64k-token prompt) stop within a fraction of a second. Unset: runs to the
  // end.
  std::function<bool()> cancelled;
  // Called on the calling thread after each chunk with the tokens of this call done so far and
  // the call's tokens in all.
  std::function<void(uint32_t tokens_done, uint32_t tokens_total)> progress;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Create(ModelWeights weights);

  const ModelConfig& config() const { return weights_.config(); }
  const ModelWeights& weights() const { return weights_; }

  // Runs tokens at positions [start_pos, start_pos + tokens.size()). Positions before start_pos
  // must already be in `kv` (written by earlier calls with the same model). `logits` is resized
  // as LogitsMode says. Errors: InvalidArgument for a token id >= vocab_size, an empty input, a
  // layout that does not match the model, or chunk_tokens out of range; NoSpace when the
  // positions exceed the source's capacity; any error of the source.
  Status Forward(std::span<const uint32_t> tokens, uint32_t start_pos, KvBlockSource& kv,
                 const ForwardOptions& options, std::vector<float>* logits);

 private:
  explicit Model(ModelWeights weights);
  Status CheckForward(std::span<const uint32_t> tokens, uint32_t start_pos, const KvBlockSource& kv,
                      const ForwardOptions& options) const;
  void ReserveScratch(uint32_t chunk_tokens, uint32_t context_tokens, uint32_t block_tokens);
  Status ForwardChunk(std::span<const uint32_t> tokens, uint32_t start_pos, KvBlockSource& kv,
                      const AttentionKernels& kernels);
  Status AttentionBlock(uint32_t layer, uint32_t n_tokens, uint32_t start_pos, KvBlockSource& kv,
                        const AttentionKernels& kernels);
  Status StoreKv(uint32_t layer, uint32_t n_tokens, uint32_t start_pos, KvBlockSource& kv,
                 const AttentionKernels& kernels);
  // Selects the chunks the tokens attend to and reads their blocks, unless the source attended a
  // decoded token itself (KvBlockSource::AttendDecode: *attended, att_ and chunk_mass_ written).
  Status GatherBlocks(uint32_t layer, uint32_t end_pos, uint32_t n_tokens, KvBlockSource& kv,
                      const AttentionKernels& kernels, bool* attended);
  // One thread's working set for attention: the runs of the token it handles, the kernel's
  // scratch, and (helper) the output and log-sum-exps of its part of a decode.
  struct AttendShare {
    std::vector<KvRun> runs;
    std::vector<float> scratch;   // AttendScratchFloats(n_heads, chunks).
    std::vector<float> out;       // [q_dim]
    std::vector<float> head_lse;  // [n_heads]
  };
  // What the helper thread does during one layer's attention.
  struct HelperJob {
    uint32_t n_tokens = 0;
    uint32_t start_pos = 0;
    size_t split = 0;  // Decode: the helper attends runs [split, end) of shares_[0].runs.
    const AttentionKernels* kernels = nullptr;
  };
  void Attend(uint32_t n_tokens, uint32_t start_pos, const AttentionKernels& kernels);
  void PrepareToken(uint32_t t, uint32_t pos, std::vector<KvRun>* runs);
  void AttendRuns(uint32_t t, std::span<const KvRun> runs, AttendShare& share, float* out,
                  float* run_mass, float* head_lse, float* run_lse,
                  const AttentionKernels& kernels);
  void AttendDecodeSplit(const AttentionKernels& kernels);
  void RunHelperJob();
  void FfnBlock(uint32_t layer, uint32_t n_tokens);
  void Logits(const float* x_rows, uint32_t n_rows, float* out);

  ModelWeights weights_;
  std::vector<float> inv_freq_;  // head_dim / 2 RoPE frequencies.

  // Scratch, grown on first use and reused (no allocation per token afterwards).
  std::vector<float> x_;                           // [chunk][dim] residual stream.
  std::vector<float> xb_;                          // [chunk][dim] normalized input.
  std::vector<float> q_;                           // [chunk][q_dim]
  std::vector<float> k_;                           // [chunk][kv_dim]
  std::vector<float> v_;                           // [chunk][kv_dim]
  std::vector<float> att_;                         // [chunk][q_dim] attention output.
  std::vector<float> q_scaled_;                    // [q_dim] decode query offered to the source.
  std::vector<float> hb_;                          // [chunk][hidden]
  std::vector<float> hb2_;                         // [chunk][hidden]
  AttendShare shares_[kAttentionThreadsMax];       // [0] the calling thread's, [1] the helper's.
  std::vector<float> run_lse_;                     // [chunks][n_heads] decode split.
  std::vector<std::span<const uint16_t>> blocks_;  // Blocks of the current layer, as selected_.
  std::vector<uint32_t> selected_;                 // Chunks attended to, ascending.
  uint32_t block_tokens_ = 0;                      // Of the source behind blocks_.
  std::vector<float> chunk_mass_;                  // [selected] attention mass (decode).
  AttentionProbe* probe_ = nullptr;                // Of the current Forward() call.
  const std::function<bool()>* cancelled_ = nullptr;  // Of the current Forward() call.
  bool Cancelled() const { return cancelled_ != nullptr && (*cancelled_)(); }
  uint32_t attention_threads_ = 1;                 // Of the current Forward() call.
  std::unique_ptr<ThreadPool> helper_;             // One thread; started on first need.
  HelperJob helper_job_;                           // Set before each hand-off.
};

}  // namespace kvtier::runtime
