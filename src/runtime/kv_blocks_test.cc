// Goal: InMemoryKvBlocks costs memory only for the chunks a sequence has written, whatever its
// capacity, so a model file declaring a 1M-token context costs no more to set up than one
// declaring 2k; blocks handed out stay where they are while the table grows; positions beyond
// the capacity are refused.
// Method: AllocatedBytes() (blocks plus the table) is checked after Create, after writes and
// after Clear, and the process heap in use (glibc mallinfo2: small and mmap'd chunks) is
// compared across Create so that memory the object does not report would still be caught.
// Two llama2.c checkpoints that differ only in their declared context (1M and 2048 tokens) are
// written to a temporary directory, loaded, and run over KV sources created for their whole
// declared context: same logits, same allocated bytes.
#include "runtime/kv_blocks.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/llama2c_test_image.h"
#include "runtime/model.h"
#include "runtime/model_loader.h"
#include "runtime/runtime_limits.h"
#include "runtime/test_util.h"

namespace kvtier::runtime {
namespace {

// Heap bytes in use by this process's main arena and its mmap'd chunks.
uint64_t HeapBytesInUse() {
  const struct mallinfo2 m = mallinfo2();
  return uint64_t{m.uordblks} + uint64_t{m.hblkhd};
}

// Llama-2-7B's KV geometry: 32 layers, 8 KiB per token per layer and K or V.
KvLayout LargeLayout() {
  return KvLayout{
      .layers = 32, .kv_heads = 32, .head_dim = 128, .dtype = DType::kF16, .block_tokens = 16};
}

KvLayout SmallLayout() {
  return KvLayout{
      .layers = 3, .kv_heads = 2, .head_dim = 4, .dtype = DType::kF16, .block_tokens = 16};
}

uint64_t BlockAllocationBytes(const KvLayout& layout) {
  return AlignUp(static_cast<size_t>(layout.BlockBytes()), 64);
}

TEST(KvBlocksTest, CreateAllocatesNothingWhateverTheCapacity) {
  for (uint32_t capacity : {uint32_t{2048}, kContextTokensMax}) {
    const uint64_t heap_before = HeapBytesInUse();
    auto kv = InMemoryKvBlocks::Create(LargeLayout(), capacity);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    const uint64_t heap_after = HeapBytesInUse();
    EXPECT_EQ((*kv)->CapacityTokens(), capacity);
    EXPECT_EQ((*kv)->AllocatedBytes(), 0u) << capacity;
    // A table of every (layer, chunk) of 1M tokens would take 32 * 65536 entries (48 MiB).
    EXPECT_LT(heap_after - std::min(heap_after, heap_before), uint64_t{64} << 10) << capacity;
  }
}

TEST(KvBlocksTest, GrowsWithTheHighestChunkWritten) {
  const KvLayout layout = SmallLayout();
  auto kv = InMemoryKvBlocks::Create(layout, kContextTokensMax);
  ASSERT_TRUE(kv.ok());
  const uint64_t block_bytes = BlockAllocationBytes(layout);
  const uint64_t entry_bytes = sizeof(AlignedBuffer);
  for (uint32_t l = 0; l < layout.layers; ++l) ASSERT_TRUE((*kv)->MutableBlock(l, 0).ok());
  EXPECT_GE((*kv)->AllocatedBytes(), layout.layers * block_bytes);
  EXPECT_LE((*kv)->AllocatedBytes(), layout.layers * (block_bytes + 2 * entry_bytes));
  // Chunk 99 of one layer: one more block, and a table of 100 chunks (not of the capacity).
  ASSERT_TRUE((*kv)->MutableBlock(1, 99).ok());
  EXPECT_GE((*kv)->AllocatedBytes(), (layout.layers + 1) * block_bytes + 100 * 3 * entry_bytes);
  EXPECT_LE((*kv)->AllocatedBytes(), (layout.layers + 1) * block_bytes + 200 * 3 * entry_bytes);
  EXPECT_TRUE((*kv)->Block(1, 99).ok());
  EXPECT_TRUE((*kv)->Block(0, 99).status().IsNotFound());
  EXPECT_TRUE((*kv)->Block(1, 50).status().IsNotFound());
  EXPECT_TRUE((*kv)->Block(1, 100).status().IsNotFound());
  (*kv)->Clear();
  EXPECT_EQ((*kv)->AllocatedBytes(), 0u);
  EXPECT_TRUE((*kv)->Block(1, 99).status().IsNotFound());
}

TEST(KvBlocksTest, BlocksStayInPlaceWhileTheTableGrows) {
  const KvLayout layout = SmallLayout();
  auto kv = InMemoryKvBlocks::Create(layout, 4096);
  ASSERT_TRUE(kv.ok());
  auto first = (*kv)->MutableBlock(2, 0);
  ASSERT_TRUE(first.ok());
  for (size_t i = 0; i < first->size(); ++i) (*first)[i] = static_cast<uint16_t>(i * 7 + 1);
  // Chunk by chunk up to the capacity: the table is reallocated many times.
  for (uint32_t c = 1; c < 4096 / layout.block_tokens; ++c) {
    ASSERT_TRUE((*kv)->MutableBlock(c % layout.layers, c).ok()) << c;
  }
  auto again = (*kv)->Block(2, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first->data());
  for (size_t i = 0; i < again->size(); ++i) {
    ASSERT_EQ((*again)[i], static_cast<uint16_t>(i * 7 + 1)) << i;
  }
}

TEST(KvBlocksTest, RefusesPositionsBeyondTheCapacity) {
  const KvLayout layout = SmallLayout();
  auto kv = InMemoryKvBlocks::Create(layout, 40);  // Rounded up to 3 chunks of 16.
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)->CapacityTokens(), 48u);
  EXPECT_TRUE((*kv)->MutableBlock(0, 2).ok());
  EXPECT_TRUE((*kv)->MutableBlock(0, 3).status().IsNoSpace());
  EXPECT_TRUE((*kv)->Block(0, 3).status().IsNoSpace());
  EXPECT_TRUE((*kv)->MutableBlock(3, 0).status().IsInvalidArgument());
  EXPECT_TRUE(InMemoryKvBlocks::Create(layout, 0).status().IsInvalidArgument());
  EXPECT_TRUE(InMemoryKvBlocks::Create(layout, kContextTokensMax + 1).status().IsInvalidArgument());
}

ModelConfig TinyConfig(uint32_t seq_len) {
  return ModelConfig{.dim = 16,
                     .hidden_dim = 24,
                     .n_layers = 2,
                     .n_heads = 4,
                     .n_kv_heads = 2,
                     .head_dim = 4,
                     .vocab_size = 40,
                     .seq_len = seq_len,
                     .classifier = ClassifierMode::kShared};
}

// What LoadAndRun saw: the declared context, the heap taken by Create, the source's allocated
// bytes right after Create and after the run, and the last token's logits.
struct RunResult {
  uint32_t seq_len = 0;
  uint64_t heap_at_create_bytes = 0;
  uint64_t allocated_at_create_bytes = 0;
  uint64_t allocated_after_run_bytes = 0;
  std::vector<float> logits;
};

// Loads the checkpoint at `path`, creates a KV source for its whole declared context (as a
// session without --context used to) and runs `tokens` from position 0.
RunResult LoadAndRun(const std::string& path, const std::vector<uint32_t>& tokens) {
  RunResult out;
  auto loaded = LoadModel(path, "");
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok()) return out;
  out.seq_len = loaded->weights.config().seq_len;
  auto model = Model::Create(std::move(loaded->weights));
  EXPECT_TRUE(model.ok());
  if (!model.ok()) return out;
  const uint64_t heap_before = HeapBytesInUse();
  auto kv = InMemoryKvBlocks::Create((*model)->config().KvLayoutFor(16), out.seq_len);
  EXPECT_TRUE(kv.ok());
  if (!kv.ok()) return out;
  const uint64_t heap_after = HeapBytesInUse();
  out.heap_at_create_bytes = heap_after - std::min(heap_after, heap_before);
  out.allocated_at_create_bytes = (*kv)->AllocatedBytes();
  EXPECT_TRUE((*model)->Forward(tokens, 0, **kv, {}, &out.logits).ok());
  out.allocated_after_run_bytes = (*kv)->AllocatedBytes();
  return out;
}

TEST(KvBlocksTest, AMillionTokenContextCostsNoMoreThanA2kOne) {
  testing::TempDir dir;
  const std::string long_path =
      dir.Write("long.bin", testing::Llama2cCheckpointImage(TinyConfig(kContextTokensMax)));
  const std::string short_path =
      dir.Write("short.bin", testing::Llama2cCheckpointImage(TinyConfig(2048)));
  std::vector<uint32_t> tokens(40);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 13 + 5) % 40;
  const RunResult long_run = LoadAndRun(long_path, tokens);
  const RunResult short_run = LoadAndRun(short_path, tokens);
  EXPECT_EQ(long_run.seq_len, kContextTokensMax);
  EXPECT_EQ(short_run.seq_len, 2048u);
  EXPECT_EQ(long_run.allocated_at_create_bytes, 0u);
  EXPECT_EQ(short_run.allocated_at_create_bytes, 0u);
  EXPECT_LT(long_run.heap_at_create_bytes, uint64_t{64} << 10);
  // 40 tokens = 3 chunks of 16 for each of 2 layers, whatever the declared context.
  EXPECT_EQ(long_run.allocated_after_run_bytes, short_run.allocated_after_run_bytes);
  const uint64_t block_bytes = BlockAllocationBytes(TinyConfig(2048).KvLayoutFor(16));
  EXPECT_GE(long_run.allocated_after_run_bytes, 6 * block_bytes);
  EXPECT_EQ(long_run.logits, short_run.logits);
}

}  // namespace
}  // namespace kvtier::runtime
