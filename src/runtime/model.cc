#include "runtime/model.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/assert.h"

namespace kvtier::runtime {
namespace {

// C[rows][out] = A[rows][in] * W[out][in]^T + beta * C. Dimensions are within runtime limits,
// so they fit OpenBLAS's int.
void MatMulTransposed(const float* a, size_t rows, size_t in, const float* w, size_t out,
                      float beta, float* c) {
  const auto m = static_cast<blasint>(rows);
  const auto n = static_cast<blasint>(out);
  const auto k = static_cast<blasint>(in);
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, a, 1, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, w, k, beta, c, n);
}

}  // namespace

Model::Model(ModelWeights weights) : weights_(std::move(weights)) {
  const ModelConfig& c = weights_.config();
  inv_freq_.resize(c.head_dim / 2);
  for (uint32_t i = 0; i < c.head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv_freq_[i] = 1.0f / std::pow(c.rope_base, exponent);
  }
}

Result<std::unique_ptr<Model>> Model::Create(ModelWeights weights) {
  KV_RETURN_IF_ERROR(weights.config().Validate());
  return std::unique_ptr<Model>(new Model(std::move(weights)));
}

Status Model::CheckForward(std::span<const uint32_t> tokens, uint32_t start_pos,
                           const KvBlockSource& kv, const ForwardOptions& options) const {
  const ModelConfig& c = config();
  if (tokens.empty()) return Status::InvalidArgument("Forward needs at least one token");
  if (options.chunk_tokens == 0 || options.chunk_tokens > kPrefillChunkTokensMax) {
    return Status::InvalidArgument("chunk_tokens " + std::to_string(options.chunk_tokens) +
                                   " is outside [1, " + std::to_string(kPrefillChunkTokensMax) +
                                   "]");
  }
  if (options.attention_threads == 0 || options.attention_threads > kAttentionThreadsMax) {
    return Status::InvalidArgument("attention_threads " +
                                   std::to_string(options.attention_threads) + " is outside [1, " +
                                   std::to_string(kAttentionThreadsMax) + "]");
  }
  const KvLayout& layout = kv.Layout();
  if (layout.layers != c.n_layers || layout.kv_heads != c.n_kv_heads ||
      layout.head_dim != c.head_dim || layout.dtype != DType::kF16) {
    return Status::InvalidArgument("KV layout " + layout.ToString() + " does not match the model " +
                                   c.ToString());
  }
  if (uint64_t{start_pos} + tokens.size() > kv.CapacityTokens()) {
    return Status::NoSpace("positions up to " + std::to_string(start_pos + tokens.size()) +
                           " exceed the KV capacity of " + std::to_string(kv.CapacityTokens()) +
                           " tokens");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= c.vocab_size) {
      return Status::InvalidArgument("token " + std::to_string(tokens[i]) + " at index " +
                                     std::to_string(i) + " is outside the vocabulary of " +
                                     std::to_string(c.vocab_size));
    }
  }
  return Status::Ok();
}

void Model::ReserveScratch(uint32_t chunk_tokens, uint32_t context_tokens, uint32_t block_tokens) {
  const ModelConfig& c = config();
  const size_t t = chunk_tokens;
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x_, t * c.dim);
  grow(xb_, t * c.dim);
  grow(q_, t * c.q_dim());
  grow(k_, t * c.kv_dim());
  grow(v_, t * c.kv_dim());
  grow(att_, t * c.q_dim());
  grow(hb_, t * c.hidden_dim);
  grow(hb2_, t * c.hidden_dim);
  const size_t chunks = (size_t{context_tokens} + block_tokens - 1) / block_tokens;
  for (uint32_t i = 0; i < attention_threads_; ++i) {
    AttendShare& share = shares_[i];
    grow(share.scratch, AttendScratchFloats(c.n_heads, chunks));
    if (share.runs.capacity() < chunks) share.runs.reserve(chunks);
    grow(share.out, c.q_dim());
    grow(share.head_lse, c.n_heads);
  }
  if (attention_threads_ > 1) grow(run_lse_, chunks * c.n_heads);
}

Status Model::Forward(std::span<const uint32_t> tokens, uint32_t start_pos, KvBlockSource& kv,
                      const ForwardOptions& options, std::vector<float>* logits) {
  KV_RETURN_IF_ERROR(CheckForward(tokens, start_pos, kv, options));
  probe_ = options.probe;
  cancelled_ = options.cancelled ? &options.cancelled : nullptr;
  attention_threads_ = options.attention_threads;
  if (attention_threads_ > 1 && helper_ == nullptr) {
    KV_ASSIGN_OR_RETURN(helper_, ThreadPool::Create({.threads = 1, .name = "kvtier-attend"}));
  }
  const ModelConfig& c = config();
  const AttentionKernels& kernels = GetAttentionKernels(options.isa);
  const auto n_total = static_cast<uint32_t>(tokens.size());
  const uint32_t chunk_max = std::min(options.chunk_tokens, n_total);
  ReserveScratch(chunk_max, start_pos + n_total, kv.Layout().block_tokens);
  switch (options.logits) {
    case LogitsMode::kLast:
      logits->assign(c.vocab_size, 0.0f);
      break;
    case LogitsMode::kAll:
      logits->assign(size_t{n_total} * c.vocab_size, 0.0f);
      break;
    case LogitsMode::kNone:
      logits->clear();
      break;
  }
  for (uint32_t done = 0; done < n_total;) {
    const uint32_t n = std::min(chunk_max, n_total - done);
    if (Cancelled()) return Status::Aborted("forward pass cancelled");
    KV_RETURN_IF_ERROR(ForwardChunk(tokens.subspan(done, n), start_pos + done, kv, kernels));
    if (options.logits == LogitsMode::kAll) {
      Logits(x_.data(), n, logits->data() + size_t{done} * c.vocab_size);
    } else if (options.logits == LogitsMode::kLast && done + n == n_total) {
      Logits(x_.data() + size_t{n - 1} * c.dim, 1, logits->data());
    }
    done += n;
    if (options.progress) options.progress(done, n_total);
  }
  return Status::Ok();
}

Status Model::ForwardChunk(std::span<const uint32_t> tokens, uint32_t start_pos, KvBlockSource& kv,
                           const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  const auto n = static_cast<uint32_t>(tokens.size());
  const std::span<const float> embedding = weights_.Get(WeightKind::kTokenEmbedding);
  for (uint32_t t = 0; t < n; ++t) {
    std::copy_n(embedding.data() + size_t{tokens[t]} * c.dim, c.dim, x_.data() + size_t{t} * c.dim);
  }
  for (uint32_t layer = 0; layer < c.n_layers; ++layer) {
    KV_RETURN_IF_ERROR(AttentionBlock(layer, n, start_pos, kv, kernels));
    FfnBlock(layer, n);
  }
  return Status::Ok();
}

Status Model::AttentionBlock(uint32_t layer, uint32_t n_tokens, uint32_t start_pos,
                             KvBlockSource& kv, const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  const float* rms = weights_.Get(WeightKind::kRmsAtt, layer).data();
  for (uint32_t t = 0; t < n_tokens; ++t) {
    RmsNorm(x_.data() + size_t{t} * c.dim, rms, c.dim, c.rms_eps, xb_.data() + size_t{t} * c.dim);
  }
  MatMulTransposed(xb_.data(), n_tokens, c.dim, weights_.Get(WeightKind::kWq, layer).data(),
                   c.q_dim(), 0.0f, q_.data());
  MatMulTransposed(xb_.data(), n_tokens, c.dim, weights_.Get(WeightKind::kWk, layer).data(),
                   c.kv_dim(), 0.0f, k_.data());
  MatMulTransposed(xb_.data(), n_tokens, c.dim, weights_.Get(WeightKind::kWv, layer).data(),
                   c.kv_dim(), 0.0f, v_.data());
  for (uint32_t t = 0; t < n_tokens; ++t) {
    RopeInPlace(q_.data() + size_t{t} * c.q_dim(), c.n_heads, c.head_dim, start_pos + t,
                inv_freq_.data());
    RopeInPlace(k_.data() + size_t{t} * c.kv_dim(), c.n_kv_heads, c.head_dim, start_pos + t,
                inv_freq_.data());
  }
  KV_RETURN_IF_ERROR(StoreKv(layer, n_tokens, start_pos, kv, kernels));
  bool attended = false;
  KV_RETURN_IF_ERROR(GatherBlocks(layer, start_pos + n_tokens, n_tokens, kv, kernels, &attended));
  if (!attended) Attend(n_tokens, start_pos, kernels);
  // A cancelled prefill leaves the attention output half computed: nothing may use it.
  if (Cancelled()) return Status::Aborted("forward pass cancelled");
  if (n_tokens == 1) kv.ObserveAttention(layer, selected_, chunk_mass_);
  if (probe_ != nullptr) {
    for (uint32_t t = 0; t < n_tokens; ++t) {
      probe_->OnAttentionOutput(
          layer, start_pos + t,
          std::span<const float>(att_.data() + size_t{t} * c.q_dim(), c.q_dim()));
    }
  }
  // Residual: x += att * wo^T.
  MatMulTransposed(att_.data(), n_tokens, c.q_dim(), weights_.Get(WeightKind::kWo, layer).data(),
                   c.dim, 1.0f, x_.data());
  return Status::Ok();
}

Status Model::StoreKv(uint32_t layer, uint32_t n_tokens, uint32_t start_pos, KvBlockSource& kv,
                      const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  const uint32_t block_tokens = kv.Layout().block_tokens;
  const size_t kv_dim = c.kv_dim();
  std::span<uint16_t> block;
  uint32_t block_chunk = UINT32_MAX;
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const uint32_t pos = start_pos + t;
    if (pos / block_tokens != block_chunk) {
      block_chunk = pos / block_tokens;
      KV_ASSIGN_OR_RETURN(block, kv.MutableBlock(layer, block_chunk));
      KV_CHECK(block.size() == 2 * size_t{block_tokens} * kv_dim);
    }
    const size_t row = size_t{pos % block_tokens} * kv_dim;
    kernels.float_to_half(k_.data() + t * kv_dim, kv_dim, block.data() + row);
    kernels.float_to_half(v_.data() + t * kv_dim, kv_dim,
                          block.data() + size_t{block_tokens} * kv_dim + row);
  }
  return Status::Ok();
}

Status Model::GatherBlocks(uint32_t layer, uint32_t end_pos, uint32_t n_tokens, KvBlockSource& kv,
                           const AttentionKernels& kernels, bool* attended) {
  const uint32_t block_tokens = kv.Layout().block_tokens;
  *attended = false;
  const uint32_t chunks = (end_pos + block_tokens - 1) / block_tokens;
  if (n_tokens == 1) {
    // Decode: the source may narrow attention to some chunks (attention-guided selection).
    const ModelConfig& c = config();
    KV_RETURN_IF_ERROR(kv.SelectChunks(layer, std::span<const float>(q_.data(), c.q_dim()),
                                       c.n_heads, chunks, &selected_));
    for (size_t i = 0; i < selected_.size(); ++i) {
      if (selected_[i] >= chunks || (i > 0 && selected_[i] <= selected_[i - 1])) {
        return Status::InvalidArgument("SelectChunks returned unsorted or out-of-range chunks");
      }
    }
    if (selected_.empty() || selected_.back() != chunks - 1) {
      return Status::InvalidArgument("SelectChunks must keep the last chunk");
    }
    // The source may attend itself (blocks it holds quantized), with the query scaled as
    // PrepareToken scales it.
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    q_scaled_.resize(c.q_dim());
    for (size_t d = 0; d < c.q_dim(); ++d) q_scaled_[d] = q_[d] * scale;
    chunk_mass_.assign(selected_.size(), 0.0f);
    KV_ASSIGN_OR_RETURN(*attended, kv.AttendDecode({.layer = layer,
                                                    .chunks = selected_,
                                                    .context_tokens = end_pos,
                                                    .n_heads = c.n_heads,
                                                    .n_kv_heads = c.n_kv_heads,
                                                    .head_dim = c.head_dim,
                                                    .q = q_scaled_.data(),
                                                    .kernels = &kernels,
                                                    .out = att_.data(),
                                                    .chunk_mass = chunk_mass_.data()}));
    if (*attended) return Status::Ok();
  } else {
    selected_.resize(chunks);
    std::iota(selected_.begin(), selected_.end(), 0u);
  }
  blocks_.resize(selected_.size());
  for (size_t i = 0; i < selected_.size(); ++i) {
    KV_ASSIGN_OR_RETURN(blocks_[i], kv.Block(layer, selected_[i]));
    KV_CHECK(blocks_[i].size() == 2 * size_t{block_tokens} * config().kv_dim());
  }
  block_tokens_ = block_tokens;
  return Status::Ok();
}

void Model::Attend(uint32_t n_tokens, uint32_t start_pos, const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  const uint64_t row_bytes = uint64_t{4} * c.kv_dim();  // K and V, FP16.
  chunk_mass_.assign(selected_.size(), 0.0f);
  if (n_tokens == 1) {
    // The token attends to every selected chunk, so the runs match selected_ one to one and the
    // kernel's run masses are the per-chunk feedback.
    PrepareToken(0, start_pos, &shares_[0].runs);
    const std::vector<KvRun>& runs = shares_[0].runs;
    KV_CHECK(runs.size() == selected_.size());
    uint64_t rows = 0;
    for (const KvRun& run : runs) rows += run.rows;
    if (attention_threads_ > 1 && runs.size() > 1 && rows * row_bytes >= kAttentionSplitBytesMin) {
      AttendDecodeSplit(kernels);
      return;
    }
    AttendRuns(0, runs, shares_[0], att_.data(), chunk_mass_.data(), nullptr, nullptr, kernels);
    return;
  }
  // Prefill (full attention): with a helper, it takes the odd tokens and this thread the even.
  const uint64_t bytes = row_bytes * n_tokens * (start_pos + (n_tokens + 1) / 2);
  const bool split = attention_threads_ > 1 && bytes >= kAttentionSplitBytesMin;
  const uint32_t step = split ? 2 : 1;
  if (split) {
    helper_job_ = {.n_tokens = n_tokens, .start_pos = start_pos, .kernels = &kernels};
    KV_CHECK_OK(helper_->Submit([this] { RunHelperJob(); }));
  }
  for (uint32_t t = 0; t < n_tokens && !Cancelled(); t += step) {
    PrepareToken(t, start_pos + t, &shares_[0].runs);
    AttendRuns(t, shares_[0].runs, shares_[0], att_.data() + size_t{t} * c.q_dim(), nullptr,
               nullptr, nullptr, kernels);
  }
  if (split) helper_->WaitIdle();
}

void Model::PrepareToken(uint32_t t, uint32_t pos, std::vector<KvRun>* runs) {
  const ModelConfig& c = config();
  float* q = q_.data() + size_t{t} * c.q_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (size_t d = 0; d < c.q_dim(); ++d) q[d] *= scale;
  // The attended chunks' rows up to and including `pos`, in selection order; with every chunk
  // selected this is exactly the full-attention computation.
  const size_t n_ctx = size_t{pos} + 1;
  const size_t v_offset = size_t{block_tokens_} * c.kv_dim();
  runs->clear();
  for (size_t i = 0; i < selected_.size() && selected_[i] * size_t{block_tokens_} < n_ctx; ++i) {
    const size_t rows = std::min<size_t>(block_tokens_, n_ctx - selected_[i] * block_tokens_);
    runs->push_back({.k = blocks_[i].data(),
                     .v = blocks_[i].data() + v_offset,
                     .rows = static_cast<uint32_t>(rows)});
  }
}

void Model::AttendRuns(uint32_t t, std::span<const KvRun> runs, AttendShare& share, float* out,
                       float* run_mass, float* head_lse, float* run_lse,
                       const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  kernels.attend_f16({.n_heads = c.n_heads,
                      .n_kv_heads = c.n_kv_heads,
                      .head_dim = c.head_dim,
                      .q = q_.data() + size_t{t} * c.q_dim(),
                      .runs = runs.data(),
                      .n_runs = runs.size(),
                      .out = out,
                      .run_mass = run_mass,
                      .head_lse = head_lse,
                      .run_lse = run_lse,
                      .scratch = share.scratch.data()});
}

// Decode, runs prepared: the helper attends to the runs from about half the rows on, this
// thread to those before; the parts' log-sum-exps merge them into the same attention and
// per-chunk masses.
void Model::AttendDecodeSplit(const AttentionKernels& kernels) {
  const ModelConfig& c = config();
  const std::vector<KvRun>& runs = shares_[0].runs;
  size_t total_rows = 0;
  for (const KvRun& run : runs) total_rows += run.rows;
  size_t split = 0;  // In [1, runs - 1]: the first run after half of the rows.
  for (size_t rows = 0; split + 1 < runs.size() && 2 * rows < total_rows; ++split) {
    rows += runs[split].rows;
  }
  helper_job_ = {.n_tokens = 1, .split = split, .kernels = &kernels};
  KV_CHECK_OK(helper_->Submit([this] { RunHelperJob(); }));
  AttendRuns(0, std::span<const KvRun>(runs).first(split), shares_[0], att_.data(), nullptr,
             shares_[0].head_lse.data(), run_lse_.data(), kernels);
  helper_->WaitIdle();
  MergeAttendParts(c.n_heads, c.head_dim, shares_[1].out.data(), shares_[1].head_lse.data(),
                   att_.data(), shares_[0].head_lse.data());
  RunMassFromLse(c.n_heads, runs.size(), run_lse_.data(), shares_[0].head_lse.data(),
                 chunk_mass_.data());
}

// On the helper thread: its part of the job in helper_job_ (decode: the runs from `split` on,
// prepared by the calling thread; prefill: the odd tokens).
void Model::RunHelperJob() {
  const HelperJob& job = helper_job_;
  const ModelConfig& c = config();
  AttendShare& share = shares_[1];
  if (job.n_tokens == 1) {
    const std::span<const KvRun> runs(shares_[0].runs);
    AttendRuns(0, runs.subspan(job.split), share, share.out.data(), nullptr, share.head_lse.data(),
               run_lse_.data() + job.split * c.n_heads, *job.kernels);
    return;
  }
  for (uint32_t t = 1; t < job.n_tokens && !Cancelled(); t += 2) {
    PrepareToken(t, job.start_pos + t, &share.runs);
    AttendRuns(t, share.runs, share, att_.data() + size_t{t} * c.q_dim(), nullptr, nullptr, nullptr,
               *job.kernels);
  }
}

void Model::FfnBlock(uint32_t layer, uint32_t n_tokens) {
  const ModelConfig& c = config();
  const float* rms = weights_.Get(WeightKind::kRmsFfn, layer).data();
  for (uint32_t t = 0; t < n_tokens; ++t) {
    RmsNorm(x_.data() + size_t{t} * c.dim, rms, c.dim, c.rms_eps, xb_.data() + size_t{t} * c.dim);
  }
  MatMulTransposed(xb_.data(), n_tokens, c.dim, weights_.Get(WeightKind::kW1, layer).data(),
                   c.hidden_dim, 0.0f, hb_.data());
  MatMulTransposed(xb_.data(), n_tokens, c.dim, weights_.Get(WeightKind::kW3, layer).data(),
                   c.hidden_dim, 0.0f, hb2_.data());
  SwiGluInPlace(hb_.data(), hb2_.data(), size_t{n_tokens} * c.hidden_dim);
  MatMulTransposed(hb_.data(), n_tokens, c.hidden_dim, weights_.Get(WeightKind::kW2, layer).data(),
                   c.dim, 1.0f, x_.data());
}

void Model::Logits(const float* x_rows, uint32_t n_rows, float* out) {
  const ModelConfig& c = config();
  const float* rms = weights_.Get(WeightKind::kRmsFinal).data();
  for (uint32_t t = 0; t < n_rows; ++t) {
    RmsNorm(x_rows + size_t{t} * c.dim, rms, c.dim, c.rms_eps, xb_.data() + size_t{t} * c.dim);
  }
  MatMulTransposed(xb_.data(), n_rows, c.dim, weights_.Get(WeightKind::kClassifier).data(),
                   c.vocab_size, 0.0f, out);
}

}  // namespace kvtier::runtime
