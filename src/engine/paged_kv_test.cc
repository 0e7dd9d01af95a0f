// Goal: the CPU gather/scatter (paged_kv.h) reads and writes every paged layout kvtier knows as
// the engines define it, refuses layouts it does not know, and never touches memory outside the
// pages it is given.
// Method: each layer tensor is built by walking its physical order as the engine defines it (for
// example vLLM's CPU backend [P][H][2][N][C], and with its "vec" ISA K's N and C swapped) and
// storing a code of (kv, page, slot, head, dim) in each element; the tensor is then described the
// way the engine shows it (shape and strides, as vLLM's register_kv_caches sees them) and gathered
// through a block table. Every canonical element must hold the code of the token it maps to; a
// scatter into a zeroed tensor must rebuild exactly the mapped pages and leave every other element
// zero. The latent (MLA) pages of vLLM's CPU_MLA backend, [P][N][C] with one latent vector per
// token, get the same gather and scatter checks on their one plane.
#include "engine/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier {
namespace {

constexpr uint32_t kH = 3, kC = 8, kPages = 6;

uint32_t Code(uint32_t kv, uint32_t page, uint32_t slot, uint32_t head, uint32_t dim) {
  return 1u + ((kv << 30) | (page << 22) | (slot << 14) | (head << 8) | dim);
}

// Axis names of a physical order; kLayer is a second layer interleaved inside each page.
enum Axis { kPage, kKv, kSlot, kHead, kDim, kLayer };

struct Case {
  std::string name;
  std::string backend;
  std::vector<Axis> physical;  // Outermost first.
  PagedLayoutKind kind;
  uint32_t page_tokens;
  // K's slot and dim axes swapped (vLLM's CPU "vec" pages: per head K [C][N], V [N][C]).
  bool keys_dim_major = false;
};

uint32_t Size(Axis a, uint32_t n) {
  switch (a) {
    case kPage:
      return kPages;
    case kKv:
      return 2;
    case kSlot:
      return n;
    case kHead:
      return kH;
    case kDim:
      return kC;
    case kLayer:
      return 2;
  }
  return 0;
}

// Element strides of each axis in the physical order (of plane kv: K's may differ).
std::array<uint64_t, 6> Strides(const Case& c, uint32_t kv = 1) {
  std::array<uint64_t, 6> st{};
  uint64_t s = 1;
  for (auto it = c.physical.rbegin(); it != c.physical.rend(); ++it) {
    st[*it] = s;
    s *= Size(*it, c.page_tokens);
  }
  if (c.keys_dim_major && kv == 0) {  // Slot and dim are the two innermost axes: swap them.
    st[kSlot] = 1;
    st[kDim] = c.page_tokens;
  }
  return st;
}

// The tensor: every element of layer 0 holds its code (layer 1, when present, holds 0xdead).
std::vector<uint32_t> Build(const Case& c) {
  uint64_t total = 1;
  for (Axis a : c.physical) total *= Size(a, c.page_tokens);
  std::vector<uint32_t> t(total, 0xdead);
  for (uint32_t kv = 0; kv < 2; ++kv) {
    const std::array<uint64_t, 6> st = Strides(c, kv);
    for (uint32_t p = 0; p < kPages; ++p)
      for (uint32_t s = 0; s < c.page_tokens; ++s)
        for (uint32_t h = 0; h < kH; ++h)
          for (uint32_t d = 0; d < kC; ++d)
            t[p * st[kPage] + kv * st[kKv] + s * st[kSlot] + h * st[kHead] + d * st[kDim]] =
                Code(kv, p, s, h, d);
  }
  return t;
}

// The tensor as the engine shows it (shape and strides of layer 0).
PagedTensor Shown(const Case& c, std::vector<uint32_t>& t) {
  std::array<int64_t, 6> st{};
  for (size_t i = 0; i < st.size(); ++i) st[i] = static_cast<int64_t>(Strides(c)[i]);
  const int64_t N = c.page_tokens, H = kH, C = kC;
  PagedTensor pt;
  pt.data = reinterpret_cast<std::byte*>(t.data());
  pt.bytes = t.size() * sizeof(uint32_t);
  pt.elem_bytes = 4;
  if (c.backend == "vllm_cpu" || c.backend == "vllm_cpu_vec" || c.backend == "vllm_packed") {
    // [P, H, N, 2C]: the content axis spans K and V (cpu: N rows of K then of V per head).
    pt.shape = {kPages, H, N, 2 * C};
    const int64_t slot = c.backend == "vllm_packed" ? st[kSlot] : 2 * C;
    pt.strides = {st[kPage], st[kHead], slot, 1};
  } else if (c.backend == "flash") {
    pt.shape = {2, kPages, N, H, C};
    pt.strides = {st[kKv], st[kPage], st[kSlot], st[kHead], st[kDim]};
  } else {
    pt.shape = {kPages, 2, N, H, C};
    pt.strides = {st[kPage], st[kKv], st[kSlot], st[kHead], st[kDim]};
  }
  return pt;
}

std::vector<Case> Cases() {
  // clang-format off
  return {
      {"vllm_cpu", "vllm_cpu", {kPage, kHead, kKv, kSlot, kDim}, PagedLayoutKind::kVllmCpu, 4},
      {"vllm_cpu_layers", "vllm_cpu", {kPage, kLayer, kHead, kKv, kSlot, kDim},
       PagedLayoutKind::kVllmCpu, 4},
      {"vllm_cpu_vec", "vllm_cpu_vec", {kPage, kHead, kKv, kSlot, kDim},
       PagedLayoutKind::kVllmCpuVec, 4, true},
      {"vllm_cpu_vec_layers", "vllm_cpu_vec", {kPage, kLayer, kHead, kKv, kSlot, kDim},
       PagedLayoutKind::kVllmCpuVec, 4, true},
      {"packed_hnd", "vllm_packed", {kPage, kHead, kSlot, kKv, kDim}, PagedLayoutKind::kPackedHnd,
       4},
      {"packed_nhd", "vllm_packed", {kPage, kSlot, kHead, kKv, kDim}, PagedLayoutKind::kPackedNhd,
       4},
      {"packed_nhd_layers", "vllm_packed", {kPage, kLayer, kSlot, kHead, kKv, kDim},
       PagedLayoutKind::kPackedNhd, 2},
      {"flash", "flash", {kKv, kPage, kSlot, kHead, kDim}, PagedLayoutKind::kFlash, 4},
      {"flash_hnd", "flash", {kKv, kPage, kHead, kSlot, kDim}, PagedLayoutKind::kFlashHnd, 4},
      {"flash_kv_in_page", "flash", {kPage, kKv, kSlot, kHead, kDim}, PagedLayoutKind::kFlash, 4},
      {"flashinfer_nhd", "flashinfer", {kPage, kKv, kSlot, kHead, kDim},
       PagedLayoutKind::kFlashInferNhd, 4},
      {"flashinfer_hnd", "flashinfer", {kPage, kKv, kHead, kSlot, kDim},
       PagedLayoutKind::kFlashInferHnd, 4},
  };
  // clang-format on
}

class PagedKvTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedKvTest, GatherMatchesTheEngineLayoutAndScatterRebuildsIt) {
  const Case& c = GetParam();
  std::vector<uint32_t> tensor = Build(c);
  Result<PagedLayer> layer = DescribePagedLayer(c.backend, Shown(c, tensor), kH, kC);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  EXPECT_EQ(layer->geometry.kind, c.kind);
  EXPECT_EQ(layer->pages, kPages);

  // Blocks of 2 pages and a partial one (block_tokens not a multiple of page_tokens), out of
  // order, one entry "no page".
  for (uint32_t block_tokens : {c.page_tokens, 2 * c.page_tokens, c.page_tokens + 1}) {
    const uint32_t ppb = (block_tokens + c.page_tokens - 1) / c.page_tokens;
    std::vector<int32_t> table(2 * ppb);
    for (uint32_t i = 0; i < 2 * ppb; ++i) {
      table[i] = i == 1 ? -1 : static_cast<int32_t>((5 + 3 * i) % 6);
    }
    const size_t block_elems = 2ull * block_tokens * kH * kC;
    std::vector<uint32_t> flat(2 * block_elems, 0);
    const std::span<uint32_t> blocks[2] = {std::span(flat).first(block_elems),
                                           std::span(flat).subspan(block_elems)};
    std::vector<std::span<std::byte>> spans;
    for (auto& b : blocks) spans.push_back(std::as_writable_bytes(b));
    ASSERT_TRUE(GatherPages(*layer, block_tokens, table, spans).ok());
    for (uint32_t b = 0; b < 2; ++b)
      for (uint32_t kv = 0; kv < 2; ++kv)
        for (uint32_t t = 0; t < block_tokens; ++t)
          for (uint32_t h = 0; h < kH; ++h)
            for (uint32_t d = 0; d < kC; ++d) {
              const int32_t page = table[b * ppb + t / c.page_tokens];
              const uint32_t want =
                  page < 0 ? 0 : Code(kv, static_cast<uint32_t>(page), t % c.page_tokens, h, d);
              ASSERT_EQ(blocks[b][((kv * block_tokens + t) * kH + h) * kC + d], want)
                  << c.name << " block_tokens " << block_tokens << " b" << b << " kv" << kv << " t"
                  << t << " h" << h << " d" << d;
            }

    // Scatter into a zeroed tensor: the mapped pages come back, nothing else is written.
    std::vector<uint32_t> out(tensor.size(), 0);
    PagedTensor shown = Shown(c, out);
    Result<PagedLayer> out_layer = DescribePagedLayer(c.backend, shown, kH, kC);
    ASSERT_TRUE(out_layer.ok());
    std::vector<std::span<const std::byte>> cspans;
    for (auto& b : blocks) cspans.push_back(std::as_bytes(b));
    ASSERT_TRUE(ScatterPages(*out_layer, block_tokens, table, cspans).ok());
    std::vector<bool> mapped(out.size(), false);
    for (uint32_t b = 0; b < 2; ++b)
      for (uint32_t t = 0; t < block_tokens; ++t) {
        const int32_t page = table[b * ppb + t / c.page_tokens];
        if (page < 0) continue;
        for (uint32_t kv = 0; kv < 2; ++kv) {
          const std::array<uint64_t, 6> st = Strides(c, kv);
          for (uint32_t h = 0; h < kH; ++h)
            for (uint32_t d = 0; d < kC; ++d)
              mapped[static_cast<uint64_t>(page) * st[kPage] + kv * st[kKv] +
                     (t % c.page_tokens) * st[kSlot] + h * st[kHead] + d * st[kDim]] = true;
        }
      }
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], mapped[i] ? tensor[i] : 0u) << c.name << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, PagedKvTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

Case CpuCase() { return Cases()[0]; }

TEST(PagedKvDescribe, RefusesLayoutsItDoesNotKnow) {
  std::vector<uint32_t> t = Build(CpuCase());
  PagedTensor good = Shown(CpuCase(), t);
  ASSERT_TRUE(DescribePagedLayer("vllm_cpu", good, kH, kC).ok());

  PagedTensor wrong_heads = good;
  Result<PagedLayer> r = DescribePagedLayer("vllm_cpu", wrong_heads, kH + 1, kC);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("expected"), std::string::npos) << r.status().ToString();

  PagedTensor transposed = good;  // Tokens and heads swapped: not the CPU backend's order.
  std::swap(transposed.strides[1], transposed.strides[2]);
  EXPECT_FALSE(DescribePagedLayer("vllm_cpu", transposed, kH, kC).ok());

  PagedTensor rank = good;
  rank.shape.pop_back();
  rank.strides.pop_back();
  EXPECT_FALSE(DescribePagedLayer("vllm_cpu", rank, kH, kC).ok());

  PagedTensor small = good;  // Storage shorter than the pages it claims.
  small.bytes -= 4;
  EXPECT_FALSE(DescribePagedLayer("vllm_cpu", small, kH, kC).ok());

  PagedTensor half_bytes = good;
  half_bytes.elem_bytes = 1;
  EXPECT_FALSE(DescribePagedLayer("vllm_cpu", half_bytes, kH, kC).ok());

  r = DescribePagedLayer("triton_mla", good, kH, kC);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("triton_mla"), std::string::npos);

  // A CPU tensor read as a FlashAttention one has the wrong rank.
  EXPECT_FALSE(DescribePagedLayer("flash", good, kH, kC).ok());
}

TEST(PagedKvTransfer, RefusesPagesOutOfRangeAndWrongSizesWithNothingCopied) {
  std::vector<uint32_t> t = Build(CpuCase());
  Result<PagedLayer> layer = DescribePagedLayer("vllm_cpu", Shown(CpuCase(), t), kH, kC);
  ASSERT_TRUE(layer.ok());
  const uint32_t block_tokens = 4;
  std::vector<uint32_t> block(2 * block_tokens * kH * kC, 7);
  std::vector<std::span<std::byte>> spans{std::as_writable_bytes(std::span(block))};

  const std::vector<int32_t> out_of_range{static_cast<int32_t>(kPages)};
  Status s = GatherPages(*layer, block_tokens, out_of_range, spans);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("out of range"), std::string::npos) << s.ToString();
  EXPECT_EQ(block[0], 7u);

  const std::vector<int32_t> two{0, 1};  // Two entries for one block of one page.
  EXPECT_FALSE(GatherPages(*layer, block_tokens, two, spans).ok());

  std::vector<std::span<std::byte>> short_span{spans[0].first(spans[0].size() - 4)};
  EXPECT_FALSE(GatherPages(*layer, block_tokens, std::vector<int32_t>{0}, short_span).ok());
  const std::vector<uint32_t> before = t;
  std::vector<std::span<const std::byte>> cshort{std::as_bytes(std::span(block)).first(8)};
  EXPECT_FALSE(ScatterPages(*layer, block_tokens, std::vector<int32_t>{0}, cshort).ok());
  EXPECT_EQ(t, before);
}

// vLLM's MLA layer tensor [pages, page_tokens, latent]: element (page, slot, dim) holds a code
// of its position; one plane per block, no V.
TEST(PagedKvLatent, GatherScatterOnePlanePerBlock) {
  constexpr uint32_t kP = 5, kN = 16, kL = 40, kBlockTokens = 32;
  auto code = [](uint32_t page, uint32_t slot, uint32_t dim) {
    return static_cast<uint16_t>(1 + (page * kN + slot) * kL + dim);
  };
  std::vector<uint16_t> t(kP * kN * kL);
  for (uint32_t p = 0; p < kP; ++p)
    for (uint32_t s = 0; s < kN; ++s)
      for (uint32_t d = 0; d < kL; ++d) t[(p * kN + s) * kL + d] = code(p, s, d);
  PagedTensor shown{.data = reinterpret_cast<std::byte*>(t.data()),
                    .bytes = t.size() * 2,
                    .shape = {kP, kN, kL},
                    .strides = {kN * kL, kL, 1},
                    .elem_bytes = 2};
  Result<PagedLayer> layer = DescribePagedLayer("vllm_mla", shown, 1, kL);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  EXPECT_EQ(layer->geometry.kind, PagedLayoutKind::kLatent);
  EXPECT_EQ(layer->pages, kP);
  EXPECT_EQ(layer->geometry.page_tokens, kN);

  // Two blocks of two pages; the second block's second page is missing (left untouched).
  const std::vector<int32_t> table{3, 1, 4, -1};
  std::vector<uint16_t> blocks(2 * kBlockTokens * kL, 0xabcd);  // One plane each: no V half.
  std::vector<std::span<std::byte>> spans{
      std::as_writable_bytes(std::span(blocks).first(kBlockTokens * kL)),
      std::as_writable_bytes(std::span(blocks).subspan(kBlockTokens * kL))};
  ASSERT_TRUE(GatherPages(*layer, kBlockTokens, table, spans).ok());
  for (uint32_t b = 0; b < 2; ++b) {
    for (uint32_t tok = 0; tok < kBlockTokens; ++tok) {
      const int32_t page = table[b * 2 + tok / kN];
      for (uint32_t d = 0; d < kL; ++d) {
        const uint16_t want = page < 0 ? 0xabcd : code(static_cast<uint32_t>(page), tok % kN, d);
        ASSERT_EQ(blocks[(b * kBlockTokens + tok) * kL + d], want) << b << " " << tok << " " << d;
      }
    }
  }

  // Scatter into zeroed pages rebuilds exactly the mapped pages (3, 1, 4) and nothing else.
  std::vector<uint16_t> back(t.size(), 0);
  PagedTensor shown_back = shown;
  shown_back.data = reinterpret_cast<std::byte*>(back.data());
  Result<PagedLayer> dst = DescribePagedLayer("vllm_mla", shown_back, 1, kL);
  ASSERT_TRUE(dst.ok());
  std::vector<std::span<const std::byte>> cspans{spans[0], spans[1]};
  ASSERT_TRUE(ScatterPages(*dst, kBlockTokens, table, cspans).ok());
  for (uint32_t p = 0; p < kP; ++p) {
    const bool mapped = p == 3 || p == 1 || p == 4;
    for (uint32_t i = 0; i < kN * kL; ++i) {
      ASSERT_EQ(back[p * kN * kL + i], mapped ? t[p * kN * kL + i] : 0) << p << " " << i;
    }
  }

  // A K/V-sized block (two planes) is the wrong size for latent pages.
  std::vector<uint16_t> kv_block(2 * kBlockTokens * kL);
  std::vector<std::span<std::byte>> kv_span{std::as_writable_bytes(std::span(kv_block))};
  EXPECT_FALSE(GatherPages(*layer, kBlockTokens, std::vector<int32_t>{0, 1}, kv_span).ok());
}

TEST(PagedKvLatent, RefusesWhatIsNotALatentPage) {
  constexpr int64_t kP = 4, kN = 16, kL = 24;
  std::vector<uint16_t> t(kP * kN * kL);
  const PagedTensor good{.data = reinterpret_cast<std::byte*>(t.data()),
                         .bytes = t.size() * 2,
                         .shape = {kP, kN, kL},
                         .strides = {kN * kL, kL, 1},
                         .elem_bytes = 2};
  ASSERT_TRUE(DescribePagedLayer("vllm_mla", good, 1, kL).ok());
  Result<PagedLayer> r = DescribePagedLayer("vllm_mla", good, 2, kL / 2);  // Heads: none in MLA.
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("1 head"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(DescribePagedLayer("vllm_mla", good, 1, kL - 8).ok());  // Another latent size.
  PagedTensor transposed = good;  // Tokens not contiguous rows.
  transposed.strides = {kN * kL, 1, kN};
  EXPECT_FALSE(DescribePagedLayer("vllm_mla", transposed, 1, kL).ok());
  PagedTensor small = good;
  small.bytes -= 2;
  EXPECT_FALSE(DescribePagedLayer("vllm_mla", small, 1, kL).ok());
  // vLLM's CPU_MLA shows a head axis of size 1: [P, 1, N, C] is the same pages; two heads are not.
  PagedTensor four = good;
  four.shape = {kP, 1, kN, kL};
  four.strides = {kN * kL, kN * kL, kL, 1};
  Result<PagedLayer> r4 = DescribePagedLayer("vllm_mla", four, 1, kL);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_EQ(r4->geometry.page_tokens, kN);
  EXPECT_EQ(r4->pages, kP);
  four.shape = {kP / 2, 2, kN, kL};
  four.strides = {2 * kN * kL, kN * kL, kL, 1};
  EXPECT_FALSE(DescribePagedLayer("vllm_mla", four, 1, kL).ok());
  // Latent pages are not a K/V layout.
  EXPECT_FALSE(DescribePagedLayer("vllm_cpu", good, 1, kL / 2).ok());
}

// vLLM's "vec" pages with 2-byte elements (bf16/f16), shapes that take whole 8 x 8 transpose
// tiles and leave edges (head_dim 20, a last page of 5 tokens): every gathered element is the
// one its token and dimension name, and a scatter rebuilds the pages exactly.
TEST(PagedKvVllmCpuVec, TwoByteKeysTransposeExactlyWithEdges) {
  constexpr uint32_t H = 2, C = 20, N = 16, P = 3;
  const auto key_at = [](uint32_t p, uint32_t h, uint32_t d, uint32_t s) {
    return (p * H + h) * 2 * N * C + d * N + s;  // Per head K [C][N] ...
  };
  const auto value_at = [](uint32_t p, uint32_t h, uint32_t s, uint32_t d) {
    return (p * H + h) * 2 * N * C + N * C + s * C + d;  // ... then V [N][C].
  };
  std::vector<uint16_t> pages(uint64_t{P} * H * 2 * N * C);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<uint16_t>(i * 7 + 1);
  const auto shown = [&](std::vector<uint16_t>& t) {
    PagedTensor pt;
    pt.data = reinterpret_cast<std::byte*>(t.data());
    pt.bytes = t.size() * sizeof(uint16_t);
    pt.elem_bytes = 2;
    pt.shape = {P, H, N, 2 * C};
    pt.strides = {H * N * 2 * C, N * 2 * C, 2 * C, 1};
    return pt;
  };
  Result<PagedLayer> layer = DescribePagedLayer("vllm_cpu_vec", shown(pages), H, C);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  for (uint32_t block_tokens : {N, 2 * N, N + 5}) {
    const uint32_t ppb = (block_tokens + N - 1) / N;
    std::vector<int32_t> table = {2, 0};
    table.resize(ppb);
    std::vector<uint16_t> block(2ull * block_tokens * H * C, 0);
    const std::span<std::byte> spans[1] = {std::as_writable_bytes(std::span(block))};
    ASSERT_TRUE(GatherPages(*layer, block_tokens, table, spans).ok());
    for (uint32_t t = 0; t < block_tokens; ++t)
      for (uint32_t h = 0; h < H; ++h)
        for (uint32_t d = 0; d < C; ++d) {
          const uint32_t p = static_cast<uint32_t>(table[t / N]), s = t % N;
          ASSERT_EQ(block[(uint64_t{t} * H + h) * C + d], pages[key_at(p, h, d, s)])
              << "K t" << t << " h" << h << " d" << d << " block_tokens " << block_tokens;
          ASSERT_EQ(block[((uint64_t{block_tokens} + t) * H + h) * C + d],
                    pages[value_at(p, h, s, d)])
              << "V t" << t << " h" << h << " d" << d << " block_tokens " << block_tokens;
        }
    std::vector<uint16_t> out(pages.size(), 0);
    Result<PagedLayer> out_layer = DescribePagedLayer("vllm_cpu_vec", shown(out), H, C);
    ASSERT_TRUE(out_layer.ok());
    const std::span<const std::byte> cspans[1] = {std::as_bytes(std::span(block))};
    ASSERT_TRUE(ScatterPages(*out_layer, block_tokens, table, cspans).ok());
    for (uint32_t i = 0; i < ppb; ++i) {
      const uint32_t p = static_cast<uint32_t>(table[i]);
      const uint32_t slots = std::min(N, block_tokens - i * N);
      for (uint32_t h = 0; h < H; ++h)
        for (uint32_t s = 0; s < N; ++s)
          for (uint32_t d = 0; d < C; ++d) {
            const bool copied = s < slots;
            ASSERT_EQ(out[key_at(p, h, d, s)], copied ? pages[key_at(p, h, d, s)] : 0)
                << "scattered K p" << p << " h" << h << " d" << d << " s" << s;
            ASSERT_EQ(out[value_at(p, h, s, d)], copied ? pages[value_at(p, h, s, d)] : 0)
                << "scattered V p" << p << " h" << h << " d" << d << " s" << s;
          }
    }
    EXPECT_EQ(std::count(out.begin(), out.end(), 0),
              static_cast<std::ptrdiff_t>(out.size() - 2ull * block_tokens * H * C));
  }
}

}  // namespace
}  // namespace kvtier
