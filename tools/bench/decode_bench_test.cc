// Goal: the decode benchmark's configurations are correct, not only timed: the offloaded
// lossless run gives logits identical to all-resident (and to the regenerated reference when no
// resident run is asked for), the ladder and top-k runs stay close to full attention (the ladder
// attending its int8/int4 blocks from their codes, as the report's quantized_attention says, and
// ladder-dequant decoding them to FP16 first, not attending quantized), top-k
// selection keeps >= 99 % of greedy tokens on the real stories260K model, the report's accounting
// is consistent (budgets, roofline from the probe, stall within the token time), and a device
// budget below one layer's working set is a clear NoSpace error, not a hang; so is a context
// whose KV the SSD directory's filesystem cannot hold, before anything is written. The progress
// hook counts the run's blocks up to its announced total; a cancelled run stops with Aborted and
// leaves no SSD files.
// Method: RunDecodeBench on small synthetic models (blocks of 16 tokens, 1-2k tokens of context,
// SSD tier in a temporary directory, a fixed-bandwidth probe) and on the shared stories260K model
// (skipped with a message when absent), teacher-forced against the reference configuration.
#include "bench/decode_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "runtime/test_util.h"

namespace kvtier::runtime {
namespace {

DecodeBenchOptions Small(const testing::TempDir& dir) {
  DecodeBenchOptions o;
  o.model = "synthetic:tinyllama-1.1b";
  o.layers = 3;
  o.dim = 128;
  o.hidden_dim = 256;
  o.vocab_size = 256;
  o.context_tokens = 1000;
  o.block_tokens = 16;
  o.tokens = 4;
  o.warmup_tokens = 1;
  o.top_k = 8;
  o.dir = dir.Path("bench");
  o.context.salient_scale = 160;
  o.ladder.recent_window_tokens = 128;
  o.ladder.int4_age_tokens = 512;
  o.ssd_probe = [](const std::string& tier_dir, uint64_t) -> Result<double> {
    if (tier_dir.empty()) return Status::InvalidArgument("probe without a tier directory");
    return 1e9;
  };
  return o;
}

TEST(DecodeBenchTest, ConfigurationsAreCorrectAndAccounted) {
  testing::TempDir dir;
  DecodeBenchOptions o = Small(dir);
  o.configs = {DecodeConfig::kResident, DecodeConfig::kResidentTopk, DecodeConfig::kOffload,
               DecodeConfig::kLadder,   DecodeConfig::kLadderDequant, DecodeConfig::kTopk};
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->configs.size(), 6u);
  EXPECT_EQ(r->reference, DecodeConfig::kResident);
  const DecodeConfigReport* resident = r->Find(DecodeConfig::kResident);
  const DecodeConfigReport* offload = r->Find(DecodeConfig::kOffload);
  const DecodeConfigReport* ladder = r->Find(DecodeConfig::kLadder);
  const DecodeConfigReport* topk = r->Find(DecodeConfig::kTopk);
  const DecodeConfigReport* resident_topk = r->Find(DecodeConfig::kResidentTopk);
  ASSERT_TRUE(resident && offload && ladder && topk && resident_topk);
  EXPECT_TRUE(offload->logits_identical);
  EXPECT_EQ(offload->greedy_agreement, 1.0);
  EXPECT_GT(ladder->attention_cosine_mean, 0.99);
  EXPECT_GE(ladder->greedy_agreement, 0.8);
  const DecodeConfigReport* dequant = r->Find(DecodeConfig::kLadderDequant);
  ASSERT_NE(dequant, nullptr);
  EXPECT_GT(dequant->attention_cosine_mean, 0.99);
  EXPECT_GE(dequant->greedy_agreement, 0.8);
  // Only the ladder attends quantized blocks, and they are fewer bytes than FP16 would be.
  EXPECT_TRUE(ladder->quantized_attention);
  EXPECT_GT(ladder->quantized_attention_bytes_per_token, 0.0);
  EXPECT_GT(ladder->fp16_attention_bytes_per_token, 0.0);  // Sink and recent window.
  EXPECT_FALSE(dequant->quantized_attention);
  EXPECT_EQ(dequant->quantized_attention_bytes_per_token, 0.0);
  for (const DecodeConfigReport* c : {resident, offload, topk}) {
    EXPECT_FALSE(c->quantized_attention) << DecodeConfigName(c->config);
  }
  const double kv_per_token = static_cast<double>(r->kv_bytes);
  EXPECT_LT(ladder->quantized_attention_bytes_per_token + ladder->fp16_attention_bytes_per_token,
            0.75 * kv_per_token);
  EXPECT_LT(topk->chunks_attended, 0.5);
  // Selection is the same computation resident or offloaded.
  EXPECT_EQ(topk->greedy_agreement, resident_topk->greedy_agreement);
  EXPECT_EQ(topk->attention_cosine_min, resident_topk->attention_cosine_min);
  for (const DecodeConfigReport* c : {offload, ladder, dequant, topk}) {
    EXPECT_EQ(c->ms_per_token.size(), o.tokens);
    EXPECT_LE(c->stall_ms_per_token, c->ms_per_token_max);
    EXPECT_GT(c->ssd_read_bytes_per_token, 0.0) << DecodeConfigName(c->config);
    EXPECT_EQ(c->ssd_read_bytes_per_s, 1e9);
    EXPECT_GE(c->roofline_ms_per_token, resident->ms_per_token_median);
    EXPECT_GE(c->roofline_ms_per_token * 1e6, c->ssd_read_bytes_per_token * 0.5);
    EXPECT_GT(c->over_roofline, 0.0);
    EXPECT_GT(c->device_budget_bytes, 0u);
  }
  EXPECT_LT(ladder->ssd_read_bytes_per_token, offload->ssd_read_bytes_per_token);
  EXPECT_LE(topk->device_budget_bytes * 8, r->kv_bytes + r->layout.BlockBytes() * 8);
}

TEST(DecodeBenchTest, WithoutResidentTheRegeneratedReferenceChecksOffload) {
  testing::TempDir dir;
  DecodeBenchOptions o = Small(dir);
  o.configs = {DecodeConfig::kOffload};
  o.dram_budget_bytes = 8u << 20;
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reference, DecodeConfig::kReference);
  const DecodeConfigReport* offload = r->Find(DecodeConfig::kOffload);
  ASSERT_NE(offload, nullptr);
  EXPECT_TRUE(offload->logits_identical);
  EXPECT_LE(offload->device_budget_bytes + offload->host_budget_bytes, o.dram_budget_bytes);
}

TEST(DecodeBenchTest, DeviceBudgetBelowOneLayerIsAClearError) {
  testing::TempDir dir;
  DecodeBenchOptions o = Small(dir);
  o.configs = {DecodeConfig::kResident, DecodeConfig::kOffload};
  o.device_budget_bytes = 4 * (16 * 4 * 64 * 2 * 2);  // Four blocks; a layer has 63 chunks.
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace) << r.status().ToString();
  EXPECT_NE(r.status().message().find("device budget"), std::string::npos) << r.status().ToString();
}

TEST(DecodeBenchTest, ProgressCountsTheRunAndCancellationStopsIt) {
  testing::TempDir dir;
  DecodeBenchOptions o = Small(dir);
  o.configs = {DecodeConfig::kResident, DecodeConfig::kOffload};
  o.tokens = 2;
  uint64_t last = 0, total = 0;
  bool monotone = true;
  std::string phase;
  o.progress_blocks = [&](uint64_t done, uint64_t all, std::string_view p) {
    monotone = monotone && done >= last && (total == 0 || all == total);
    last = done;
    total = all;
    phase = p;
  };
  ASSERT_TRUE(RunDecodeBench(o).ok());
  EXPECT_TRUE(monotone);
  // 3 layers x 63 chunks, filled twice and passed over by 3 tokens in each configuration.
  EXPECT_EQ(total, 2u * (1 + 3) * 3 * 63);
  EXPECT_EQ(last, total);
  EXPECT_EQ(phase, "offload: decoding");

  // Cancelled during the offloaded configuration's fill: Aborted, and its SSD files are gone.
  last = 0;
  o.cancelled = [&] { return last > 4 * 3 * 63 + 10; };
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  EXPECT_TRUE(r.status().IsAborted()) << r.status().ToString();
  EXPECT_LT(last, total);
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(o.dir, ec)) {
    EXPECT_FALSE(entry.is_regular_file()) << entry.path();
  }
}

TEST(DecodeBenchTest, ContextLargerThanTheDiskIsRefusedBeforeWriting) {
  testing::TempDir dir;
  DecodeBenchOptions o = Small(dir);
  o.configs = {DecodeConfig::kResident, DecodeConfig::kOffload};
  o.context_tokens = 4'000'000'000u;  // About 11 TiB of KV.
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace) << r.status().ToString();
  EXPECT_NE(r.status().message().find(" free; the offloaded configurations need about "),
            std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(o.dir));
}

TEST(DecodeBenchTest, TopKKeepsGreedyTokensOnTheRealModel) {
  KV_SKIP_WITHOUT_MODEL("stories260K.bin");
  testing::TempDir dir;
  DecodeBenchOptions o;
  o.model = testing::SharedModelPath("stories260K.bin");
  o.context_tokens = 256;  // Generated greedily by the model itself: real attention.
  o.block_tokens = 16;
  o.tokens = 244;  // Up to the model's 512-token training context.
  o.warmup_tokens = 0;
  o.top_k = 8;
  o.dir = dir.Path("bench");
  o.configs = {DecodeConfig::kResident, DecodeConfig::kOffload, DecodeConfig::kTopk};
  Result<DecodeBenchReport> r = RunDecodeBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DecodeConfigReport* offload = r->Find(DecodeConfig::kOffload);
  const DecodeConfigReport* topk = r->Find(DecodeConfig::kTopk);
  ASSERT_TRUE(offload && topk);
  EXPECT_TRUE(offload->logits_identical);
  std::printf("stories260K top-%u: %.1f %% of chunks, greedy agreement %.4f, cosine mean %.5f\n",
              o.top_k, 100 * topk->chunks_attended, topk->greedy_agreement,
              topk->attention_cosine_mean);
  EXPECT_LT(topk->chunks_attended, 0.6);
  EXPECT_GE(topk->greedy_agreement, 0.99);
  EXPECT_GT(topk->attention_cosine_mean, 0.99);
}

}  // namespace
}  // namespace kvtier::runtime
