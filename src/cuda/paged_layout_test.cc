// Goal: the index math of the gather/scatter kernels (paged_layout.h) matches the engines' paged
// layouts as they define them. Method: build each paged cache by walking its tensor shape in
// row-major order (vLLM legacy key [P][H][D/x][S][x], value [P][H][D][S]; FlashAttention
// [P][S][H][D]) and storing a value that encodes the element's coordinates; gather through a
// block table with the host reference (the same index functions the kernels call) and check every
// canonical element; scatter back into empty caches and check they match where pages are mapped.
// Runs without a GPU.
#include "cuda/paged_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvtier::cuda {
namespace {

// A unique 32-bit code of (kv, page, slot, head, dim).
uint32_t Code(uint32_t kv, uint32_t page, uint32_t slot, uint32_t head, uint32_t dim) {
  return (kv << 31) | (page << 24) | (slot << 16) | (head << 10) | dim;
}

struct Caches {
  std::vector<uint32_t> k;
  std::vector<uint32_t> v;
};

// Fills the caches in their own row-major order: the layouts as the engines define them.
Caches BuildCaches(const PagedGeometry& g, uint32_t pages) {
  Caches c;
  const uint32_t S = g.page_tokens, H = g.kv_heads, D = g.head_dim;
  for (uint32_t p = 0; p < pages; ++p) {
    if (g.kind == PagedLayoutKind::kFlash) {
      for (uint32_t s = 0; s < S; ++s)
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t d = 0; d < D; ++d) {
            c.k.push_back(Code(0, p, s, h, d));
            c.v.push_back(Code(1, p, s, h, d));
          }
      continue;
    }
    const uint32_t x = g.x();
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t dx = 0; dx < D / x; ++dx)
        for (uint32_t s = 0; s < S; ++s)
          for (uint32_t xi = 0; xi < x; ++xi) c.k.push_back(Code(0, p, s, h, dx * x + xi));
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t d = 0; d < D; ++d)
        for (uint32_t s = 0; s < S; ++s) c.v.push_back(Code(1, p, s, h, d));
  }
  return c;
}

struct Case {
  PagedLayoutKind kind;
  uint32_t page_tokens;
  uint32_t block_tokens;
};

void CheckRoundTrip(const Case& tc) {
  SCOPED_TRACE(::testing::Message() << "kind=" << static_cast<int>(tc.kind) << " page_tokens="
                                    << tc.page_tokens << " block_tokens=" << tc.block_tokens);
  // elem_bytes 4 keeps codes unique; x is then 4 (16 bytes of f32).
  const PagedGeometry g{.kind = tc.kind,
                        .page_tokens = tc.page_tokens,
                        .kv_heads = 3,
                        .head_dim = 8,
                        .elem_bytes = 4};
  constexpr uint32_t kPages = 11;
  Caches caches = BuildCaches(g, kPages);
  const uint32_t pages_per_block = (tc.block_tokens + g.page_tokens - 1) / g.page_tokens;
  // Two blocks with scattered pages; block 1's second page is unmapped (-1).
  std::vector<int32_t> table;
  for (uint32_t i = 0; i < 2 * pages_per_block; ++i) {
    table.push_back(static_cast<int32_t>((7 * i + 3) % kPages));
  }
  if (pages_per_block > 1) table[pages_per_block + 1] = -1;
  const size_t block_elements = 2ull * tc.block_tokens * g.kv_heads * g.head_dim;
  std::vector<uint32_t> block0(block_elements, 0xffffffffu), block1(block_elements, 0xffffffffu);
  std::byte* blocks[2] = {reinterpret_cast<std::byte*>(block0.data()),
                          reinterpret_cast<std::byte*>(block1.data())};
  PagedTransfer t{.geometry = g,
                  .k_cache = reinterpret_cast<std::byte*>(caches.k.data()),
                  .v_cache = reinterpret_cast<std::byte*>(caches.v.data()),
                  .pages_total = kPages,
                  .block_table = table.data(),
                  .blocks = blocks,
                  .block_count = 2,
                  .block_tokens = tc.block_tokens};
  ASSERT_EQ(CheckPagedTransfer(t), nullptr);
  PagedTransferHost(t, TransferDirection::kGather);
  for (uint32_t b = 0; b < 2; ++b) {
    const std::vector<uint32_t>& block = b == 0 ? block0 : block1;
    size_t e = 0;
    for (uint32_t kv = 0; kv < 2; ++kv)
      for (uint32_t tok = 0; tok < tc.block_tokens; ++tok)
        for (uint32_t h = 0; h < g.kv_heads; ++h)
          for (uint32_t d = 0; d < g.head_dim; ++d, ++e) {
            const int32_t page = table[b * pages_per_block + tok / g.page_tokens];
            const uint32_t want =
                page < 0 ? 0xffffffffu
                         : Code(kv, static_cast<uint32_t>(page), tok % g.page_tokens, h, d);
            ASSERT_EQ(block[e], want) << "block " << b << " kv " << kv << " token " << tok
                                      << " head " << h << " dim " << d;
          }
  }
  // Scatter into empty caches: every mapped element comes back to where it was.
  Caches empty{std::vector<uint32_t>(caches.k.size(), 0),
               std::vector<uint32_t>(caches.v.size(), 0)};
  t.k_cache = reinterpret_cast<std::byte*>(empty.k.data());
  t.v_cache = reinterpret_cast<std::byte*>(empty.v.data());
  PagedTransferHost(t, TransferDirection::kScatter);
  size_t restored = 0;
  for (size_t i = 0; i < caches.k.size(); ++i) {
    if (empty.k[i] != 0) {
      ASSERT_EQ(empty.k[i], caches.k[i]) << "key element " << i;
      ++restored;
    }
    if (empty.v[i] != 0) {
      ASSERT_EQ(empty.v[i], caches.v[i]) << "value element " << i;
      ++restored;
    }
  }
  // Each mapped token of each block restores 2 * H * D elements (distinct pages per block).
  EXPECT_GT(restored, 0u);
}

TEST(PagedLayoutTest, FlashLayoutRoundTrips) {
  CheckRoundTrip({PagedLayoutKind::kFlash, 16, 32});
  CheckRoundTrip({PagedLayoutKind::kFlash, 16, 16});
}

TEST(PagedLayoutTest, VllmLegacyLayoutRoundTrips) {
  CheckRoundTrip({PagedLayoutKind::kVllmLegacy, 16, 32});
  CheckRoundTrip({PagedLayoutKind::kVllmLegacy, 8, 32});
}

TEST(PagedLayoutTest, BlockNotAMultipleOfThePageUsesAPartialLastPage) {
  CheckRoundTrip({PagedLayoutKind::kFlash, 16, 24});
  CheckRoundTrip({PagedLayoutKind::kVllmLegacy, 16, 40});
}

TEST(PagedLayoutTest, LegacyKeyIndexMatchesVllmStrides) {
  // vLLM: key_cache[P][H][D/x][S][x]; for f16 x = 8.
  const PagedGeometry g{.kind = PagedLayoutKind::kVllmLegacy,
                        .page_tokens = 16,
                        .kv_heads = 4,
                        .head_dim = 64,
                        .elem_bytes = 2};
  ASSERT_EQ(g.x(), 8u);
  // (page 2, slot 5, head 3, dim 17): dim 17 = group 2, lane 1.
  const uint64_t want = (((2ull * 4 + 3) * 8 + 2) * 16 + 5) * 8 + 1;
  EXPECT_EQ(PagedKeyIndex(g, 2, 5, 3, 17), want);
  EXPECT_EQ(PagedValueIndex(g, 2, 5, 3, 17), ((2ull * 4 + 3) * 64 + 17) * 16 + 5);
  EXPECT_EQ(CanonicalIndex(32, 4, 64, 1, 7, 3, 17), ((1ull * 32 + 7) * 4 + 3) * 64 + 17);
}

TEST(PagedLayoutTest, CheckRejectsInconsistentTransfers) {
  PagedTransfer t{.geometry = {.kind = PagedLayoutKind::kVllmLegacy,
                               .page_tokens = 16,
                               .kv_heads = 2,
                               .head_dim = 12,
                               .elem_bytes = 2},
                  .block_tokens = 16};
  EXPECT_NE(CheckPagedTransfer(t), nullptr);  // 12 is not a multiple of x = 8.
  t.geometry.head_dim = 16;
  EXPECT_EQ(CheckPagedTransfer(t), nullptr);  // No blocks: nothing to check further.
  t.block_count = 1;
  EXPECT_NE(CheckPagedTransfer(t), nullptr);  // Null pointers.
  t.geometry.elem_bytes = 3;
  EXPECT_NE(CheckPagedTransfer(t), nullptr);
}

}  // namespace
}  // namespace kvtier::cuda
