// Goal: the offloaded sequence's policies do what docs/offload.md says, on real tiers:
// - the precision ladder stores old blocks as int8/int4 and the sink and recent chunks losslessly
//   (a layer of its finer_layers one rung finer), loads them back within the codec's error,
//   re-encodes blocks to a coarser rung as the sequence grows, and never makes a stored block
//   finer;
// - with quantized attention (the ladder's default) an int8/int4 block reaches the device still
//   encoded: the device slot holds exactly the bytes the ladder stored (the host copy's and the
//   SSD record's payload, i.e. the block encoded with its rung), nothing is decoded, its FP16
//   equals what the dequantize mode puts on the device, the budget holds, and a block whose
//   header is damaged on the device fails closed (Corruption naming it) instead of being read;
// - heat (attention mass) decides which of the blocks needed equally soon leaves the device;
// - a host tier smaller than one layer still streams the layer through (bytes exact), and blocks
//   the host cannot take spill from the device straight to the SSD;
// - a lossless block is written to the SSD at most once, however long the walk (prefetch takes
//   clean victims only);
// - stall accounting adds up (the per-layer stalls sum to the total, within the wall time), and
//   every acquired block was either already on the device or counted as a demand load;
// - a corrupted SSD read fails closed: the AcquireLayer of the layer that needs the block reports
//   it (a damaged prefetch does not fail an unrelated layer), never hands out wrong bytes.
// Method: small FP16 layouts (4 layers x 8-12 chunks of 16 tokens) with deterministic values,
// written through MutableBlock and walked through AcquireLayer like a forward pass; bytes are
// compared exactly (lossless) or by relative RMSE (lossy); a FaultInjectionEnv under the SSD tier
// flips bits of reads.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "codecs/codec.h"
#include "engine/offload_sequence.h"
#include "engine/offload_test_util.h"

namespace kvtier {
namespace {

using offload_test::OffloadTestTiers;
using offload_test::OpenTestTiers;

constexpr uint32_t kLayers = 4;

KvLayout Layout() { return offload_test::SmallTestLayout(kLayers); }

// IEEE half from a float in [-8, 8] (normal range; round toward zero is fine for test data).
uint16_t Half(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((bits >> 13) & 0x3ffu));
}
float Float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  if (exp == 0) return sign != 0 ? -0.0f : 0.0f;
  const uint32_t bits = sign | ((exp - 15 + 127) << 23) | ((h & 0x3ffu) << 13);
  float f = 0;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Value(uint32_t layer, uint32_t chunk, size_t i, uint32_t version) {
  const uint64_t x = (uint64_t{layer} * 1315423911u) ^ (uint64_t{chunk} * 2654435761u) ^
                     (uint64_t{i} * 40503u) ^ (uint64_t{version} * 97u);
  return static_cast<float>((x * 2862933555777941757ull) >> 40) / float(1 << 24) * 6.0f - 3.0f;
}

void Fill(std::span<std::byte> block, uint32_t layer, uint32_t chunk, uint32_t version = 0) {
  auto* h = reinterpret_cast<uint16_t*>(block.data());
  for (size_t i = 0; i < block.size() / 2; ++i) h[i] = Half(Value(layer, chunk, i, version));
}

// Relative RMSE of a block against its written values (0 = exact).
double Error(std::span<const std::byte> block, uint32_t layer, uint32_t chunk,
             uint32_t version = 0) {
  const auto* h = reinterpret_cast<const uint16_t*>(block.data());
  double err = 0, norm = 0;
  for (size_t i = 0; i < block.size() / 2; ++i) {
    const double want = Float(Half(Value(layer, chunk, i, version)));
    const double got = Float(h[i]);
    err += (got - want) * (got - want);
    norm += want * want;
  }
  return std::sqrt(err / norm);
}

struct Harness {
  OffloadTestTiers tiers;
  std::unique_ptr<OffloadedSequence> seq;
};

struct Config {
  uint32_t chunks_max = 8;
  uint32_t budget = 10;
  uint32_t host_slots = 12;
  uint32_t depth = 1;
  std::optional<codecs::PrecisionLadderOptions> ladder;
  LadderAttention attention = LadderAttention::kQuantized;
  bool fault_env = false;
};

Harness Make(const Config& c) {
  Harness h;
  const KvLayout layout = Layout();
  const uint32_t host_slot = offload_test::SsdHostSlotBytes(layout, c.ladder);
  h.tiers = OpenTestTiers(layout, c.budget, c.host_slots, true, 0, host_slot, c.fault_env);
  OffloadSequenceOptions o;
  o.layout = layout;
  o.chunks_max = c.chunks_max;
  o.device_blocks_max = c.budget;
  o.sequence_id = 3;
  o.depth = {.depth_min = c.depth, .depth_max = c.depth, .depth_initial = c.depth};
  o.ladder = c.ladder;
  o.ladder_attention = c.attention;
  Result<std::unique_ptr<OffloadedSequence>> seq = OffloadedSequence::Create(
      o, {.device = h.tiers.device.get(), .host = h.tiers.host.get(), .ssd = h.tiers.ssd.get()});
  KV_CHECK_OK(seq.status());
  h.seq = std::move(seq).value();
  return h;
}

void Write(OffloadedSequence& seq, uint32_t first, uint32_t end) {
  for (uint32_t c = first; c < end; ++c) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      Result<std::span<std::byte>> b = seq.MutableBlock(layer, c);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      Fill(*b, layer, c);
    }
  }
}

std::vector<uint32_t> All(uint32_t chunks) {
  std::vector<uint32_t> v(chunks);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

// Walks `tokens` forward passes over `chunks` of every layer, calling check(layer, chunk) for
// each acquired block.
template <typename Check>
void Walk(OffloadedSequence& seq, const std::vector<uint32_t>& chunks, uint32_t tokens,
          const Check& check) {
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const Status acquired = seq.AcquireLayer(layer, chunks);
      ASSERT_TRUE(acquired.ok()) << acquired.ToString();
      for (const uint32_t c : chunks) check(layer, c);
    }
  }
}

codecs::PrecisionLadderOptions TestLadder() {
  codecs::PrecisionLadderOptions l;
  l.recent_window_tokens = 32;  // Chunks within 2 of the newest: lossless.
  l.int4_age_tokens = 80;       // 5 chunks old or more: int4; in between: int8.
  l.full_precision_memory = codecs::CodecParams::Identity();
  l.int8 = codecs::CodecParams::Int8(16);
  l.int4 = codecs::CodecParams::Int4(16);
  return l;
}

uint32_t Rank(uint8_t codec) {
  if (codec == static_cast<uint8_t>(codecs::CodecId::kInt8)) return 1;
  if (codec == static_cast<uint8_t>(codecs::CodecId::kInt4)) return 2;
  return 0;
}

TEST(OffloadPolicyTest, LadderStoresByAgeAndLoadsWithinCodecError) {
  Harness h = Make({.chunks_max = 12,
                    .budget = 14,
                    .host_slots = 12,
                    .ladder = TestLadder(),
                    .attention = LadderAttention::kDequantize});
  Write(*h.seq, 0, 8);  // Newest chunk 7.
  const std::vector<uint32_t> all = All(8);
  std::vector<uint32_t> rank(kLayers * 12, 0);
  for (uint32_t t = 0; t < 2; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      ASSERT_TRUE(h.seq->AcquireLayer(layer, all).ok());
      for (const uint32_t c : all) {
        const double err = Error(h.seq->DeviceBlock(layer, c), layer, c);
        const uint32_t age = (7 - c) * 16;
        if (c == 0 || age < 32) {
          EXPECT_EQ(err, 0.0) << layer << "/" << c;  // Sink and recent window: lossless.
        } else {
          EXPECT_LT(err, age >= 80 ? 0.12 : 0.01) << layer << "/" << c;
        }
      }
      ASSERT_TRUE(h.seq->CheckInvariants().ok()) << h.seq->CheckInvariants().ToString();
    }
  }
  // Stored rungs follow the age of each block.
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    for (const uint32_t c : all) {
      const BlockPlacement p = h.seq->Placement(layer, c);
      if (!p.ssd) continue;
      const uint32_t age = (7 - c) * 16;
      const uint32_t want = (c == 0 || age < 32) ? 0 : (age >= 80 ? 2 : 1);
      EXPECT_EQ(Rank(p.ssd_codec), want) << layer << "/" << c;
      rank[layer * 12 + c] = Rank(p.ssd_codec);
    }
  }
  const OffloadStats s = h.seq->Stats();
  EXPECT_GT(s.encoded_int8, 0u);
  EXPECT_GT(s.encoded_int4, 0u);
  EXPECT_GT(s.blocks_decoded, 0u);
  // The sequence grows by 3 chunks: blocks age into coarser rungs and are re-encoded when they
  // leave the device; none gets finer.
  Write(*h.seq, 8, 11);
  Walk(*h.seq, All(11), 2, [&](uint32_t layer, uint32_t c) {
    const uint32_t age = (10 - c) * 16;
    const double bound = (c == 0 || age < 32) ? 0.0 : 0.12;
    EXPECT_LE(Error(h.seq->DeviceBlock(layer, c), layer, c), bound) << layer << "/" << c;
  });
  EXPECT_GT(h.seq->Stats().blocks_reencoded, 0u);
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    for (uint32_t c = 0; c < 8; ++c) {
      const BlockPlacement p = h.seq->Placement(layer, c);
      const uint8_t codec = p.ssd ? p.ssd_codec : (p.host ? p.host_codec : 0);
      if (p.ssd || p.host) {
        EXPECT_GE(Rank(codec), rank[layer * 12 + c]) << layer << "/" << c;
      }
    }
  }
}

// A layer of the ladder's finer_layers is stored one rung finer than its age gives (int4 age:
// int8; int8 age: lossless), every other layer by age, and its blocks load back within their
// rung's error.
TEST(OffloadPolicyTest, LadderStoresAFinerLayerOneRungFiner) {
  codecs::PrecisionLadderOptions ladder = TestLadder();
  ladder.finer_layers = {2};
  Harness h = Make({.chunks_max = 12,
                    .budget = 14,
                    .host_slots = 12,
                    .ladder = ladder,
                    .attention = LadderAttention::kDequantize});
  Write(*h.seq, 0, 8);  // Newest chunk 7.
  const std::vector<uint32_t> all = All(8);
  Walk(*h.seq, all, 2, [&](uint32_t layer, uint32_t c) {
    const uint32_t age = (7 - c) * 16;
    const bool exact = c == 0 || age < 32 || (layer == 2 && age < 80);
    EXPECT_LE(Error(h.seq->DeviceBlock(layer, c), layer, c),
              exact ? 0.0 : (age >= 80 && layer != 2 ? 0.12 : 0.01))
        << layer << "/" << c;
  });
  uint32_t stored = 0;
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    for (const uint32_t c : all) {
      const BlockPlacement p = h.seq->Placement(layer, c);
      if (!p.ssd) continue;
      ++stored;
      const uint32_t age = (7 - c) * 16;
      const uint32_t by_age = (c == 0 || age < 32) ? 0 : (age >= 80 ? 2 : 1);
      const uint32_t want = layer == 2 && by_age > 0 ? by_age - 1 : by_age;
      EXPECT_EQ(Rank(p.ssd_codec), want) << layer << "/" << c;
    }
  }
  EXPECT_GT(stored, 0u);
}

// The rung the test ladder stores chunk c at when the newest chunk is `newest` (0 raw).
uint32_t RankByAge(uint32_t c, uint32_t newest) {
  const uint32_t age = (newest - c) * 16;
  return (c == 0 || age < 32) ? 0 : (age >= 80 ? 2 : 1);
}

TEST(OffloadPolicyTest, LadderKeepsQuantizedBlocksEncodedOnTheDevice) {
  // Budget below the blocks written, so that blocks go down and come back; the same walk in the
  // dequantize mode gives the FP16 the quantized blocks must decode to.
  const Config base{.chunks_max = 12, .budget = 12, .host_slots = 12, .ladder = TestLadder()};
  Config dequant_config = base;
  dequant_config.attention = LadderAttention::kDequantize;
  Harness h = Make(base);
  Harness dequant = Make(dequant_config);
  Write(*h.seq, 0, 8);
  Write(*dequant.seq, 0, 8);
  const codecs::BlockGeometry g{.tokens = 16, .kv_heads = 2, .head_dim = 16, .dtype = DType::kF16};
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  ASSERT_TRUE(ctx.ok());
  std::vector<std::byte> raw(Layout().BlockBytes()), encoded(4096), decoded(raw.size());
  const std::vector<uint32_t> all = All(8);
  uint32_t quantized = 0;
  for (uint32_t t = 0; t < 2; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      ASSERT_TRUE(h.seq->AcquireLayer(layer, all).ok());
      ASSERT_TRUE(dequant.seq->AcquireLayer(layer, all).ok());
      for (const uint32_t c : all) {
        Result<DeviceBlockView> v = h.seq->DeviceView(layer, c);
        ASSERT_TRUE(v.ok()) << v.status().ToString();
        // Never coarser than its age calls for; a block not yet stored lossy is exact.
        const uint32_t rank = Rank(v->codec);
        ASSERT_LE(rank, RankByAge(c, 7)) << layer << "/" << c;
        if (rank == 0) {
          EXPECT_EQ(Error(v->bytes, layer, c), 0.0) << layer << "/" << c;
          continue;
        }
        ++quantized;
        // The stored bytes: the written block encoded with its rung (int4: from the block or from
        // its int8 copy, when it aged through int8), header included.
        Fill(raw, layer, c);
        Result<size_t> n = codecs::EncodeBlock(TestLadder().int8, g, raw, encoded, &*ctx);
        ASSERT_TRUE(n.ok());
        const auto same = [&](size_t bytes) {
          return v->bytes.size() == bytes &&
                 std::memcmp(v->bytes.data(), encoded.data(), bytes) == 0;
        };
        bool stored = rank == 1 && same(*n);
        if (rank == 2) {
          ASSERT_TRUE(codecs::DecodeBlock(std::span(encoded).first(*n), g, decoded, &*ctx).ok());
          for (const std::span<const std::byte> from : {std::span<const std::byte>(raw),
                                                        std::span<const std::byte>(decoded)}) {
            n = codecs::EncodeBlock(TestLadder().int4, g, from, encoded, &*ctx);
            ASSERT_TRUE(n.ok());
            stored = stored || same(*n);
          }
        }
        EXPECT_TRUE(stored) << layer << "/" << c;
        EXPECT_EQ(v->params.bits(), rank == 1 ? 8u : 4u);
        const BlockPlacement p = h.seq->Placement(layer, c);
        if (p.ssd) {
          EXPECT_EQ(p.ssd_codec, v->codec);
        }
        // Decoded, it is what the dequantize mode holds.
        ASSERT_TRUE(codecs::DecodeBlock(v->bytes, g, decoded, &*ctx).ok());
        const std::span<const std::byte> fp16 = dequant.seq->DeviceBlock(layer, c);
        EXPECT_EQ(std::memcmp(decoded.data(), fp16.data(), fp16.size()), 0) << layer << "/" << c;
      }
      ASSERT_TRUE(h.seq->CheckInvariants().ok()) << h.seq->CheckInvariants().ToString();
      ASSERT_LE(h.seq->Stats().device_blocks, 12u);
    }
  }
  EXPECT_GT(quantized, 0u);
  const OffloadStats s = h.seq->Stats();
  EXPECT_GT(s.blocks_promoted_encoded, 0u);
  EXPECT_EQ(s.blocks_decoded, 0u);
  EXPECT_LT(s.bytes_host_to_device, dequant.seq->Stats().bytes_host_to_device);
  // The sequence grows: blocks age into int4 and are re-encoded from their encoded device copies;
  // a rewritten old chunk comes back raw for its writer.
  Write(*h.seq, 8, 11);
  Result<std::span<std::byte>> rewritten = h.seq->MutableBlock(1, 3);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().ToString();
  EXPECT_LT(Error(*rewritten, 1, 3), 0.12);
  Fill(*rewritten, 1, 3, 1);
  Walk(*h.seq, All(11), 2, [&](uint32_t layer, uint32_t c) {
    Result<DeviceBlockView> v = h.seq->DeviceView(layer, c);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    const bool rewrite = layer == 1 && c == 3;
    std::span<const std::byte> block = v->bytes;
    if (v->codec != 0) {
      ASSERT_TRUE(codecs::DecodeBlock(v->bytes, g, decoded, &*ctx).ok());
      block = decoded;
    }
    const double bound = RankByAge(c, 10) == 0 ? 0.0 : 0.12;
    EXPECT_LE(Error(block, layer, c, rewrite ? 1 : 0), bound) << layer << "/" << c;
  });
  EXPECT_GT(h.seq->Stats().blocks_reencoded, 0u);
}

TEST(OffloadPolicyTest, DamagedEncodedDeviceBlockFailsClosed) {
  Harness h = Make({.chunks_max = 8, .budget = 10, .host_slots = 12, .ladder = TestLadder()});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  ASSERT_TRUE(h.seq->AcquireLayer(0, all).ok());
  ASSERT_TRUE(h.seq->AcquireLayer(1, all).ok());  // Layer 1's old chunks come back encoded.
  Result<DeviceBlockView> v = h.seq->DeviceView(1, 2);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_NE(v->codec, 0u);
  // A flipped bit in the device copy's header (the group size field).
  const_cast<std::byte*>(v->bytes.data())[10] ^= std::byte{0x01};
  const Result<DeviceBlockView> damaged = h.seq->DeviceView(1, 2);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption) << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find("(layer 1, chunk 2)"), std::string::npos)
      << damaged.status().ToString();
}

TEST(OffloadPolicyTest, HotChunksStayOnTheDevice) {
  // One layer's 8 chunks plus 3 slots: acquiring layer 1 evicts blocks of layer 0 (the layer
  // just computed, needed last): the cold ones go before any hot one, the sink chunk last.
  Harness h = Make({.chunks_max = 8, .budget = 11, .host_slots = 40, .depth = 0});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  ASSERT_TRUE(h.seq->AcquireLayer(0, all).ok());
  const std::vector<uint32_t> hot = {2, 3, 5, 6};
  const std::vector<uint32_t> cold = {1, 4, 7};
  for (const uint32_t c : hot) h.seq->ObserveHeat(0, c, 0.25f);
  EXPECT_GT(h.seq->Heat(0, 2), h.seq->Heat(0, 1));
  ASSERT_TRUE(h.seq->AcquireLayer(1, all).ok());
  uint32_t cold_evicted = 0, hot_evicted = 0;
  for (const uint32_t c : cold) cold_evicted += h.seq->Placement(0, c).device ? 0u : 1u;
  for (const uint32_t c : hot) hot_evicted += h.seq->Placement(0, c).device ? 0u : 1u;
  EXPECT_GT(cold_evicted, 0u);
  if (hot_evicted > 0) {
    EXPECT_EQ(cold_evicted, cold.size());
  }
  if (!h.seq->Placement(0, 0).device) {
    EXPECT_EQ(hot_evicted, hot.size());
  }
  // Heat decays: without new observations it halves every half-life (4 tokens by default).
  const float before = h.seq->Heat(0, 2);
  for (uint32_t step = 0; step < 4 * kLayers; ++step) {
    ASSERT_TRUE(h.seq->AcquireLayer((2 + step) % kLayers, all).ok());
  }
  EXPECT_NEAR(h.seq->Heat(0, 2), before / 2, before * 0.01);
}

TEST(OffloadPolicyTest, HostSmallerThanALayerStreamsAndSpills) {
  // Host of 3 slots for layers of 8 chunks: every acquire streams through it, and dirty device
  // blocks that the full host cannot take go straight to the SSD.
  Harness h = Make({.chunks_max = 8, .budget = 10, .host_slots = 3, .depth = 1});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  for (uint32_t t = 0; t < 3; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const Status s = h.seq->AcquireLayer(layer, all);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (const uint32_t c : all) {
        ASSERT_EQ(Error(h.seq->DeviceBlock(layer, c), layer, c), 0.0) << layer << "/" << c;
      }
      ASSERT_TRUE(h.seq->CheckInvariants().ok()) << h.seq->CheckInvariants().ToString();
      ASSERT_LE(h.seq->Stats().device_blocks, 10u);
      ASSERT_LE(h.seq->Stats().host_blocks, 3u);
    }
  }
  EXPECT_GT(h.seq->Stats().blocks_spilled + h.seq->Stats().ssd_writes, 0u);
}

TEST(OffloadPolicyTest, LosslessBlocksAreWrittenToTheSsdAtMostOnce) {
  // A lossless block reaches the SSD when demand first pushes its only copy out of memory and
  // stays current there; prefetch takes clean victims only, so walking on with prefetch never
  // writes a block again.
  Harness h = Make({.chunks_max = 8, .budget = 16, .host_slots = 10, .depth = 2});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  for (uint32_t t = 0; t < 12; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      ASSERT_TRUE(h.seq->AcquireLayer(layer, all).ok());
    }
  }
  const OffloadStats s = h.seq->Stats();
  EXPECT_LE(s.ssd_writes, uint64_t{kLayers} * 8);  // Spills included.
  EXPECT_GT(s.blocks_prefetched, 0u);
  EXPECT_GT(s.ssd_reads, 0u);
}

TEST(OffloadPolicyTest, StallAccountingAddsUp) {
  Harness h = Make({.chunks_max = 8, .budget = 10, .host_slots = 12, .depth = 1});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  const OffloadStats before = h.seq->Stats();
  uint64_t stall_sum = 0;
  uint64_t acquired = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t t = 0; t < 4; ++t) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const uint64_t demand_before = h.seq->Stats().blocks_demand;
      uint32_t on_device = 0;
      for (const uint32_t c : all) on_device += h.seq->Placement(layer, c).device ? 1u : 0u;
      ASSERT_TRUE(h.seq->AcquireLayer(layer, all).ok());
      const OffloadStats s = h.seq->Stats();
      stall_sum += s.last_stall_us;
      acquired += all.size();
      // Each block was on the device already or is one demand load.
      EXPECT_EQ(s.blocks_demand - demand_before, all.size() - on_device);
    }
  }
  const auto wall_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - start)
                                                 .count());
  const OffloadStats after = h.seq->Stats();
  EXPECT_EQ(after.stall_us - before.stall_us, stall_sum);
  EXPECT_LE(stall_sum, wall_us);
  EXPECT_EQ(after.layers_acquired - before.layers_acquired, 4u * kLayers);
  EXPECT_LE(after.blocks_demand - before.blocks_demand, acquired);
}

TEST(OffloadPolicyTest, CorruptSsdReadsFailClosed) {
  Harness h = Make({.chunks_max = 8, .budget = 10, .host_slots = 4, .depth = 0, .fault_env = true});
  Write(*h.seq, 0, 8);
  const std::vector<uint32_t> all = All(8);
  ASSERT_TRUE(h.seq->AcquireLayer(0, all).ok());
  // From now on every read from the SSD returns a flipped bit.
  ASSERT_TRUE(h.tiers.faults
                  ->ArmFault({.kind = FaultKind::kBitFlip,
                              .op = FaultOp::kRead,
                              .repeat = FaultRepeat::kEveryAfter,
                              .seed = 9})
                  .ok());
  bool failed = false;
  for (uint32_t layer = 1; layer < kLayers; ++layer) {
    const Status s = h.seq->AcquireLayer(layer, all);
    if (!s.ok()) {
      // Reported by the layer that needs the damaged block, naming it.
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
      EXPECT_NE(s.message().find("(layer " + std::to_string(layer) + ","), std::string::npos)
          << s.ToString();
      failed = true;
      break;
    }
    // What is handed out is still exact (blocks that came from memory, not the SSD).
    for (const uint32_t c : all) EXPECT_EQ(Error(h.seq->DeviceBlock(layer, c), layer, c), 0.0);
  }
  EXPECT_TRUE(failed);
}

}  // namespace
}  // namespace kvtier
