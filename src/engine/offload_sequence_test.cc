// Goal: an offloaded sequence keeps a correct block table across device, host and SSD while
// never exceeding its device budget, hands out a block only after its copy completed, and its
// prefetch pipeline loads ahead (depth > 0) or not at all (depth 0) without changing any byte.
// Method: write every block of a small layout with a per-block pattern through MutableBlock,
// with a device budget of about one layer and a host tier too small for the rest (so blocks
// are demoted to host and SSD), then walk the layer schedule for several "tokens" with
// AcquireLayer, checking every byte, CheckInvariants() and the budget after every step. A
// decorator device tier poisons copy destinations and completes copies late.
#include "engine/offload_sequence.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "engine/offload_test_util.h"

namespace kvtier {
namespace {

using offload_test::OffloadTestTiers;
using offload_test::OpenTestTiers;

constexpr uint32_t kLayers = 4;
constexpr uint32_t kChunks = 8;

KvLayout TestLayout() { return offload_test::SmallTestLayout(kLayers); }

uint8_t PatternByte(uint32_t layer, uint32_t chunk, uint32_t version, size_t b) {
  return static_cast<uint8_t>(layer * 31 + chunk * 7 + version * 13 + b * 3);
}

void Fill(std::span<std::byte> block, uint32_t layer, uint32_t chunk, uint32_t version) {
  for (size_t b = 0; b < block.size(); ++b) {
    block[b] = static_cast<std::byte>(PatternByte(layer, chunk, version, b));
  }
}

bool Matches(std::span<const std::byte> block, uint32_t layer, uint32_t chunk, uint32_t version) {
  for (size_t b = 0; b < block.size(); ++b) {
    if (block[b] != static_cast<std::byte>(PatternByte(layer, chunk, version, b))) return false;
  }
  return true;
}

struct Harness {
  OffloadTestTiers tiers;
  std::unique_ptr<OffloadedSequence> seq;
};

Harness Make(uint32_t budget, uint32_t host_slots, uint32_t depth, size_t delay_bytes = 0,
             bool adaptive = false) {
  Harness h;
  const KvLayout layout = TestLayout();
  h.tiers = OpenTestTiers(layout, budget + 4, host_slots, true, delay_bytes);
  OffloadSequenceOptions o;
  o.layout = layout;
  o.chunks_max = kChunks;
  o.device_blocks_max = budget;
  o.sequence_id = 7;
  o.depth = {.depth_min = adaptive ? 1 : depth,
             .depth_max = adaptive ? 3 : depth,
             .depth_initial = adaptive ? 1 : depth};
  Result<std::unique_ptr<OffloadedSequence>> seq = OffloadedSequence::Create(
      o, {.device = h.tiers.device.get(), .host = h.tiers.host.get(), .ssd = h.tiers.ssd.get()});
  KV_CHECK_OK(seq.status());
  h.seq = std::move(seq).value();
  return h;
}

// Writes every block in the model's order (chunk by chunk, each layer).
void WriteAll(OffloadedSequence& seq, uint32_t version) {
  for (uint32_t c = 0; c < kChunks; ++c) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      Result<std::span<std::byte>> block = seq.MutableBlock(layer, c);
      ASSERT_TRUE(block.ok()) << block.status().ToString();
      Fill(*block, layer, c, version);
      ASSERT_TRUE(seq.CheckInvariants().ok()) << seq.CheckInvariants().ToString();
    }
  }
}

void WalkLayers(OffloadedSequence& seq, uint32_t tokens, uint32_t budget) {
  std::vector<uint32_t> all(kChunks);
  std::iota(all.begin(), all.end(), 0u);
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const Status s = seq.AcquireLayer(layer, all);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (uint32_t c = 0; c < kChunks; ++c) {
        ASSERT_TRUE(Matches(seq.DeviceBlock(layer, c), layer, c, 0)) << layer << "/" << c;
      }
      ASSERT_TRUE(seq.CheckInvariants().ok()) << seq.CheckInvariants().ToString();
      ASSERT_LE(seq.Stats().device_blocks, budget);
    }
  }
}

TEST(OffloadSequenceTest, BlocksSpreadOverTiersAndReadBackExactly) {
  const uint32_t budget = kChunks + 2;
  Harness h = Make(budget, 10, 1);
  WriteAll(*h.seq, 0);
  uint32_t on_device = 0, ssd_only = 0;
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    for (uint32_t c = 0; c < kChunks; ++c) {
      const BlockPlacement p = h.seq->Placement(layer, c);
      EXPECT_TRUE(p.written);
      EXPECT_TRUE(p.device || p.host || p.ssd);
      on_device += p.device ? 1 : 0;
      ssd_only += (p.ssd && !p.host && !p.device) ? 1 : 0;
    }
  }
  EXPECT_LE(on_device, budget);
  EXPECT_GT(ssd_only, 0u);
  WalkLayers(*h.seq, 3, budget);
  const OffloadStats s = h.seq->Stats();
  EXPECT_LE(s.device_blocks_peak, budget);
  EXPECT_GT(s.bytes_ssd_read, 0u);
  EXPECT_GT(s.bytes_ssd_written, 0u);
  EXPECT_GT(s.blocks_prefetched, 0u);
}

// After prefill the device and host tiers hold written blocks the SSD does not have yet;
// WriteBack writes exactly those, keeps every copy where it was, and the bytes still read back
// exactly. The SSD tier writes every record from its host slot or the spill buffer, where the
// payload already is (TierStoreStats::staged_write_bytes stays 0).
TEST(OffloadSequenceTest, WriteBackLeavesEveryBlockOnTheSsd) {
  const uint32_t budget = kChunks + 2;
  Harness h = Make(budget, 10, 1);
  WriteAll(*h.seq, 0);
  struct Count {
    uint32_t device = 0, host = 0, not_on_ssd = 0;
  };
  const auto count = [&h] {
    Count n;
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      for (uint32_t c = 0; c < kChunks; ++c) {
        const BlockPlacement p = h.seq->Placement(layer, c);
        n.device += p.device ? 1 : 0;
        n.host += p.host ? 1 : 0;
        n.not_on_ssd += p.ssd ? 0 : 1;
      }
    }
    return n;
  };
  const Count before = count();
  ASSERT_GT(before.not_on_ssd, 0u);
  ASSERT_GT(before.device, 0u);
  const OffloadStats stats = h.seq->Stats();
  ASSERT_TRUE(h.seq->WriteBack().ok());
  const Count after = count();
  EXPECT_EQ(after.device, before.device);
  EXPECT_EQ(after.host, before.host);
  EXPECT_EQ(after.not_on_ssd, 0u);
  EXPECT_EQ(h.seq->Stats().ssd_writes - stats.ssd_writes, before.not_on_ssd);
  EXPECT_GT(h.tiers.ssd->Stats().write_bytes, 0u);
  EXPECT_EQ(h.tiers.ssd->Stats().staged_write_bytes, 0u);
  ASSERT_TRUE(h.seq->CheckInvariants().ok()) << h.seq->CheckInvariants().ToString();
  // Nothing left to write: a second call writes nothing.
  ASSERT_TRUE(h.seq->WriteBack().ok());
  EXPECT_EQ(h.seq->Stats().ssd_writes - stats.ssd_writes, before.not_on_ssd);
  WalkLayers(*h.seq, 2, budget);
  // The walk only reads: no block needed writing again.
  EXPECT_EQ(h.seq->Stats().ssd_writes - stats.ssd_writes, before.not_on_ssd);
}

TEST(OffloadSequenceTest, DepthZeroLoadsOnDemandOnly) {
  const uint32_t budget = kChunks + 2;
  Harness h = Make(budget, 10, 0);
  WriteAll(*h.seq, 0);
  WalkLayers(*h.seq, 2, budget);
  EXPECT_EQ(h.seq->Stats().blocks_prefetched, 0u);
  EXPECT_GT(h.seq->Stats().blocks_demand, 0u);
}

TEST(OffloadSequenceTest, LargerBudgetPrefetchesWholeNextLayer) {
  const uint32_t budget = 2 * kChunks;
  Harness h = Make(budget, 32, 1);
  WriteAll(*h.seq, 0);
  WalkLayers(*h.seq, 3, budget);
  // Once the pipeline runs, layer N+1 is on the device before AcquireLayer(N+1) asks.
  const OffloadStats s = h.seq->Stats();
  EXPECT_GT(s.blocks_prefetched, s.blocks_demand);
}

TEST(OffloadSequenceTest, SlowCopiesAreWaitedFor) {
  const uint32_t budget = kChunks + 2;
  Harness h = Make(budget, 10, 2, 16u << 20);
  WriteAll(*h.seq, 0);
  WalkLayers(*h.seq, 2, budget);
  auto* slow = static_cast<offload_test::SlowCopyDeviceTier*>(h.tiers.device.get());
  EXPECT_GT(slow->slow_copies(), 0u);
}

TEST(OffloadSequenceTest, AdaptiveDepthStaysInBoundsAndCorrect) {
  const uint32_t budget = kChunks + 3;
  Harness h = Make(budget, 10, 0, 8u << 20, true);
  WriteAll(*h.seq, 0);
  WalkLayers(*h.seq, 4, budget);
  const OffloadStats s = h.seq->Stats();
  EXPECT_GE(s.depth, 1u);
  EXPECT_LE(s.depth, 3u);
}

TEST(OffloadSequenceTest, RewritingADemotedBlockKeepsOldBytesAndSeesNewOnes) {
  const uint32_t budget = kChunks + 2;
  Harness h = Make(budget, 10, 1);
  WriteAll(*h.seq, 0);
  // Layer 0 chunk 0 has been demoted by now; rewrite it (as a tail chunk would be).
  Result<std::span<std::byte>> block = h.seq->MutableBlock(0, 0);
  ASSERT_TRUE(block.ok());
  EXPECT_TRUE(Matches(*block, 0, 0, 0));
  Fill(*block, 0, 0, 5);
  std::vector<uint32_t> all(kChunks);
  std::iota(all.begin(), all.end(), 0u);
  for (uint32_t t = 0; t < 2; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const Status s = h.seq->AcquireLayer(layer, all);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (layer == 0) {
        EXPECT_TRUE(Matches(h.seq->DeviceBlock(0, 0), 0, 0, 5));
        EXPECT_TRUE(Matches(h.seq->DeviceBlock(0, 1), 0, 1, 0));
      }
    }
  }
  ASSERT_TRUE(h.seq->CheckInvariants().ok());
}

TEST(OffloadSequenceTest, BudgetBelowOneLayerIsNoSpace) {
  Harness h = Make(kChunks / 2, 40, 1);
  WriteAll(*h.seq, 0);
  std::vector<uint32_t> all(kChunks);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(h.seq->AcquireLayer(1, all).code(), StatusCode::kNoSpace);
  EXPECT_LE(h.seq->Stats().device_blocks_peak, kChunks / 2);
}

// Random subsets (as Quest selections are), random plans and occasional rewrites of the tail
// chunk, with budgets from one layer up; every byte and invariant checked. Seed printed.
TEST(OffloadSequenceTest, RandomizedSelectionsKeepBytesAndInvariants) {
  const uint32_t seed = 20261129;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (uint32_t round = 0; round < 4; ++round) {
    const uint32_t budget = kChunks + round * 3;
    Harness h = Make(budget, 8 + round * 4, round % 3, 0, round == 3);
    WriteAll(*h.seq, 0);
    std::vector<uint32_t> versions(kLayers, 0);  // Version of chunk kChunks - 1 per layer.
    for (uint32_t step = 0; step < 60; ++step) {
      const uint32_t layer = step % kLayers;
      if (rng() % 5 == 0) {
        Result<std::span<std::byte>> tail = h.seq->MutableBlock(layer, kChunks - 1);
        ASSERT_TRUE(tail.ok()) << tail.status().ToString();
        Fill(*tail, layer, kChunks - 1, ++versions[layer]);
      }
      std::vector<uint32_t> pick;
      for (uint32_t c = 0; c < kChunks; ++c) {
        if (rng() % 2 == 0 || c == kChunks - 1) pick.push_back(c);
      }
      h.seq->PlanLayer((layer + 1) % kLayers, pick);
      const Status s = h.seq->AcquireLayer(layer, pick);
      ASSERT_TRUE(s.ok()) << s.ToString() << " round " << round << " step " << step;
      for (const uint32_t c : pick) {
        const uint32_t version = c == kChunks - 1 ? versions[layer] : 0;
        ASSERT_TRUE(Matches(h.seq->DeviceBlock(layer, c), layer, c, version)) << layer << "/" << c;
      }
      ASSERT_TRUE(h.seq->CheckInvariants().ok()) << h.seq->CheckInvariants().ToString();
      ASSERT_LE(h.seq->Stats().device_blocks, budget);
    }
  }
}

TEST(OffloadSequenceTest, CreateValidates) {
  OffloadTestTiers t = OpenTestTiers(TestLayout(), 4, 4, false, 0,
                                     OffloadedSequence::HostSlotBytes(TestLayout(), nullptr));
  OffloadSequenceOptions o;
  o.layout = TestLayout();
  o.chunks_max = kChunks;
  o.device_blocks_max = 0;
  const OffloadTiers tiers{.device = t.device.get(), .host = t.host.get()};
  EXPECT_FALSE(OffloadedSequence::Create(o, tiers).ok());
  o.device_blocks_max = 100;  // More than the tier's slots.
  EXPECT_FALSE(OffloadedSequence::Create(o, tiers).ok());
  o.device_blocks_max = 4;
  EXPECT_TRUE(OffloadedSequence::Create(o, tiers).ok());
}

}  // namespace
}  // namespace kvtier
