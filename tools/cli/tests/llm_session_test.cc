// Goal: what `kvtier run` and `kvtier chat` reserve for KV does not follow the context a model
// file declares: a model declaring 1M tokens opens with the default context capped at
// kDefaultContextTokensMax and holds exactly as much KV memory as one declaring 2048, before and
// after a prompt; --context beyond the trained context prints one warning line and still works;
// CacheChunks fills the cache with a prompt's chunks once, resumably, with the KV Prefill computes.
// Method: tiny llama2.c checkpoints (and a tokenizer) that differ only in their declared context
// are written to a temporary directory and opened as sessions; KvMemoryBytes() (host tier
// capacity plus the sequence's KV blocks) is compared, stderr is captured around Open, and
// positions past the trained context are prefilled and decoded. CacheChunks (what `kvtier
// preload` runs) is checked on an SSD cache in a temporary directory: stored once, found again,
// resumed after a stop, and loaded by a later Prefill with logits equal, to float rounding, to
// those of an uncached prefill.
#include "llm_session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/limits.h"
#include "runtime/llama2c_test_image.h"
#include "runtime/runtime_limits.h"
#include "runtime/test_util.h"

namespace kvtier::cli {
namespace {

constexpr uint32_t kVocab = 40;

runtime::ModelConfig TinyConfig(uint32_t seq_len) {
  return runtime::ModelConfig{.dim = 16,
                              .hidden_dim = 24,
                              .n_layers = 2,
                              .n_heads = 4,
                              .n_kv_heads = 2,
                              .head_dim = 4,
                              .vocab_size = kVocab,
                              .seq_len = seq_len,
                              .classifier = runtime::ClassifierMode::kShared};
}

class LlmSessionTest : public ::testing::Test {
 protected:
  // Writes a checkpoint declaring `seq_len` tokens and opens a session on it.
  std::unique_ptr<LlmSession> Open(uint32_t seq_len, uint32_t context_tokens = 0) {
    const std::string name = "m" + std::to_string(seq_len) + ".bin";
    const std::string model = dir_.Write(name, runtime::testing::Llama2cCheckpointImage(
                                                   TinyConfig(seq_len)));
    auto session = LlmSession::Open({.model_path = model,
                                     .tokenizer_path = tokenizer_,
                                     .context_tokens = context_tokens});
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return session.ok() ? std::move(*session) : nullptr;
  }

  static std::vector<uint32_t> Tokens(size_t n) {
    std::vector<uint32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(3 + (i * 7) % (kVocab - 3));
    return tokens;
  }

  // A session with an SSD tier under `cache_dir`.
  std::unique_ptr<LlmSession> OpenCached(const std::string& cache_dir) {
    const std::string model =
        dir_.Write("m1024.bin", runtime::testing::Llama2cCheckpointImage(TinyConfig(1024)));
    auto session = LlmSession::Open(
        {.model_path = model, .tokenizer_path = tokenizer_, .cache_dir = cache_dir});
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return session.ok() ? std::move(*session) : nullptr;
  }

  runtime::testing::TempDir dir_;
  const std::string tokenizer_ =
      dir_.Write("tok.bin", runtime::testing::Llama2cTokenizerImage(kVocab));
};

TEST_F(LlmSessionTest, DeclaredMillionTokenContextCostsNoMoreThan2k) {
  std::unique_ptr<LlmSession> long_session = Open(runtime::kContextTokensMax);
  std::unique_ptr<LlmSession> short_session = Open(2048);
  ASSERT_NE(long_session, nullptr);
  ASSERT_NE(short_session, nullptr);
  EXPECT_EQ(long_session->config().seq_len, runtime::kContextTokensMax);
  EXPECT_EQ(long_session->context_tokens(), kDefaultContextTokensMax);
  EXPECT_EQ(short_session->context_tokens(), 2048u);
  // Both reserve the host tier's floor (16 MiB): twice 4096 tokens of this model is 512 KiB.
  // Sized from the declared context it would be twice 1M tokens' KV, 128 MiB.
  EXPECT_EQ(long_session->KvMemoryBytes(), short_session->KvMemoryBytes());
  EXPECT_LE(long_session->KvMemoryBytes(), 16 * kMiB);
  const uint64_t reserved_bytes = long_session->KvMemoryBytes();
  const std::vector<uint32_t> prompt = Tokens(40);
  std::vector<float> long_logits, short_logits;
  ASSERT_TRUE(long_session->Prefill(prompt, &long_logits).ok());
  ASSERT_TRUE(short_session->Prefill(prompt, &short_logits).ok());
  EXPECT_EQ(long_logits, short_logits);
  EXPECT_EQ(long_session->KvMemoryBytes(), short_session->KvMemoryBytes());
  EXPECT_GT(long_session->KvMemoryBytes(), reserved_bytes);  // The prompt's blocks.
}

TEST_F(LlmSessionTest, ExplicitContextIsHonoured) {
  std::unique_ptr<LlmSession> session = Open(runtime::kContextTokensMax, 10000);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->context_tokens(), 10000u);
  std::unique_ptr<LlmSession> small = Open(64);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->context_tokens(), 64u);
}

TEST_F(LlmSessionTest, ContextBeyondTrainingWarnsOnceAndWorks) {
  ::testing::internal::CaptureStderr();
  std::unique_ptr<LlmSession> session = Open(64, 100);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(session, nullptr);
  const std::string warning =
      "--context 100 exceeds the model's trained context of 64 tokens; quality may degrade\n";
  const size_t at = err.find(warning);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << err;
  // Positions 64..99 lie past the trained context and still run.
  const std::vector<uint32_t> prompt = Tokens(80);
  std::vector<float> logits;
  ASSERT_TRUE(session->Prefill(prompt, &logits).ok());
  EXPECT_EQ(logits.size(), kVocab);
  EXPECT_TRUE(session->Step(5, 80, &logits).ok());
  EXPECT_TRUE(session->Step(5, 100, &logits).IsNoSpace());
}

TEST_F(LlmSessionTest, NoWarningWithinTheTrainedContext) {
  for (uint32_t context : {0u, 32u, 64u}) {
    ::testing::internal::CaptureStderr();
    std::unique_ptr<LlmSession> session = Open(64, context);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_NE(session, nullptr);
    EXPECT_EQ(err.find("exceeds the model's trained context"), std::string::npos) << err;
  }
  ::testing::internal::CaptureStderr();
  std::unique_ptr<LlmSession> capped = Open(runtime::kContextTokensMax);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(capped, nullptr);
  EXPECT_EQ(err.find("exceeds the model's trained context"), std::string::npos) << err;
}

// CacheChunks stores every full chunk once, step by step; a second call finds them all and
// computes nothing; stopped after its first step and called again, it computes only the rest; the
// chunks it stored give a later Prefill the logits of a prefill without any cache.
TEST_F(LlmSessionTest, CacheChunksStoresOnceAndResumes) {
  const std::string cache = dir_.Path("cache");
  const std::vector<uint32_t> prompt = Tokens(40 * 16 + 5);  // 40 chunks and a tail.
  const size_t step_chunks = LlmSession::kCacheStepTokens / 16;
  ASSERT_LT(step_chunks, 40u);
  {
    std::unique_ptr<LlmSession> s = OpenCached(cache);
    ASSERT_NE(s, nullptr);
    std::vector<size_t> steps;
    Result<LlmSession::CacheChunksStats> st = s->CacheChunks(prompt, [&](size_t done) {
      steps.push_back(done);
      return steps.size() < 1;  // Stop after the first step.
    });
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(st->chunks, 40u);
    EXPECT_EQ(st->present_chunks, 0u);
    EXPECT_EQ(st->stored_chunks, step_chunks);
    EXPECT_EQ(st->computed_tokens, step_chunks * 16);
    EXPECT_TRUE(st->stopped);
    EXPECT_EQ(steps, std::vector<size_t>{step_chunks * 16});
    ASSERT_TRUE(s->Flush().ok());
    EXPECT_GT(s->SsdLiveBytes(), 0u);
  }
  {
    std::unique_ptr<LlmSession> s = OpenCached(cache);  // A new process, as far as caches go.
    ASSERT_NE(s, nullptr);
    std::vector<size_t> steps;
    Result<LlmSession::CacheChunksStats> st = s->CacheChunks(prompt, [&](size_t done) {
      steps.push_back(done);
      return true;
    });
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(st->present_chunks, step_chunks);
    EXPECT_EQ(st->stored_chunks, 40u - step_chunks);
    EXPECT_EQ(st->computed_tokens, (40u - step_chunks) * 16);
    EXPECT_FALSE(st->stopped);
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.back(), 40u * 16);
    st = s->CacheChunks(prompt, [](size_t) { return true; });
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->present_chunks, 40u);
    EXPECT_EQ(st->stored_chunks, 0u);
    EXPECT_EQ(st->computed_tokens, 0u);
    // Shorter than a chunk: nothing to do.
    st = s->CacheChunks(std::span(prompt).first(15), [](size_t) { return true; });
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->chunks, 0u);
  }
  std::vector<float> cached_logits, plain_logits;
  {
    std::unique_ptr<LlmSession> s = OpenCached(cache);
    ASSERT_NE(s, nullptr);
    Result<runtime::CachedPrefillStats> st = s->Prefill(prompt, &cached_logits);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(st->cached_tokens, 40u * 16);
    EXPECT_FALSE(st->fell_back);
  }
  std::unique_ptr<LlmSession> plain = OpenCached("");
  ASSERT_NE(plain, nullptr);
  ASSERT_TRUE(plain->Prefill(prompt, &plain_logits).ok());
  // The chunks were computed 256 tokens at a time and the plain prefill in one pass: BLAS blocks
  // the products differently, so the logits agree to float rounding, not bit for bit.
  ASSERT_EQ(cached_logits.size(), plain_logits.size());
  for (size_t i = 0; i < plain_logits.size(); ++i) {
    EXPECT_NEAR(cached_logits[i], plain_logits[i], 1e-4f * (1.0f + std::fabs(plain_logits[i])))
        << i;
  }
}

}  // namespace
}  // namespace kvtier::cli
