// Goal: the GPU kernels produce exactly what the CPU produces. Method: random blocks (fixed seeds,
// printed on failure) with awkward shapes (a partial last quantization group, -0.0, rounding
// ties) go through the GPU kernels and through the CPU references (codecs::QuantizeBlock /
// DequantizeBlock, codecs::ref::Shuffle16/32, PagedTransferHost), and the bytes must be equal.
// Skips with the reason when no GPU is usable.
#include "cuda/cuda_kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codecs/block_format.h"
#include "codecs/codec.h"
#include "codecs/kernels.h"
#include "codecs/quantize.h"
#include "core/assert.h"
#include "cuda/cuda_buffer.h"
#include "cuda/cuda_status.h"

namespace kvtier::cuda {
namespace {

#define KV_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                           \
    const Result<int> kv_devices_ = CudaDeviceCount();                           \
    if (!kv_devices_.ok())                                                       \
      GTEST_SKIP() << "no usable CUDA GPU: " << kv_devices_.status().ToString(); \
  } while (false)

constexpr uint32_t kSeed = 20260129;

DeviceBuffer Upload(const std::vector<std::byte>& host) {
  Result<DeviceBuffer> d = DeviceBuffer::Allocate(host.size());
  KV_CHECK(d.ok());
  KV_CHECK(cudaMemcpy(d->data(), host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  return std::move(*d);
}

std::vector<std::byte> Download(const DeviceBuffer& d, size_t bytes) {
  std::vector<std::byte> host(bytes);
  KV_CHECK(cudaMemcpy(host.data(), d.data(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

template <typename T>
DeviceBuffer UploadArray(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return Upload(bytes);
}

// A raw block of `g` with Gaussian values, some exact ties and negative zeros.
std::vector<std::byte> RandomBlock(const codecs::BlockGeometry& g, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> f(g.elements());
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = normal(*rng);
    if (i % 97 == 0) f[i] = -0.0f;
    if (i % 89 == 0) f[i] = 0.5f * static_cast<float>(i % 7);
  }
  std::vector<std::byte> raw(g.raw_bytes());
  codecs::FromF32(codecs::GetKernels(codecs::KernelIsa::kScalar), g.dtype, f.data(), f.size(),
                  raw.data());
  return raw;
}

struct QuantCase {
  DType dtype;
  uint32_t bits;
};

void CheckQuantizeMatchesCpu(const QuantCase& qc) {
  SCOPED_TRACE(::testing::Message()
               << "seed=" << kSeed << " dtype=" << DTypeName(qc.dtype) << " bits=" << qc.bits);
  // 48 tokens in groups of 32 (a partial key group); 2 x 24 = 48 channels (a partial value group).
  const codecs::BlockGeometry g{.tokens = 48, .kv_heads = 2, .head_dim = 24, .dtype = qc.dtype};
  constexpr uint32_t kGroup = 32;
  constexpr uint32_t kBlocks = 3;
  const size_t stage_bytes = codecs::ComputeQuantLayout(g, qc.bits, kGroup).total_bytes;
  std::mt19937 rng(kSeed);
  Result<codecs::CodecContext> ctx = codecs::CodecContext::Create();
  ASSERT_TRUE(ctx.ok());
  std::vector<std::vector<std::byte>> raw(kBlocks), cpu_stage(kBlocks), cpu_back(kBlocks);
  std::vector<DeviceBuffer> d_raw, d_stage;
  std::vector<std::byte*> raw_ptrs, stage_ptrs;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    raw[b] = RandomBlock(g, &rng);
    cpu_stage[b].resize(stage_bytes);
    ASSERT_TRUE(codecs::QuantizeBlock(g, qc.bits, kGroup, raw[b], cpu_stage[b], &*ctx).ok());
    cpu_back[b].resize(g.raw_bytes());
    ASSERT_TRUE(codecs::DequantizeBlock(g, qc.bits, kGroup, cpu_stage[b], cpu_back[b], &*ctx).ok());
    d_raw.push_back(Upload(raw[b]));
    d_stage.push_back(Upload(std::vector<std::byte>(stage_bytes)));
    raw_ptrs.push_back(d_raw.back().data());
    stage_ptrs.push_back(d_stage.back().data());
  }
  DeviceBuffer raw_list = UploadArray(raw_ptrs);
  DeviceBuffer stage_list = UploadArray(stage_ptrs);
  DeviceBuffer flags = UploadArray(std::vector<uint32_t>(kBlocks, 7));
  const QuantBatch batch{.geometry = g,
                         .bits = qc.bits,
                         .group_size = kGroup,
                         .raw = reinterpret_cast<std::byte* const*>(raw_list.data()),
                         .stage = reinterpret_cast<std::byte* const*>(stage_list.data()),
                         .count = kBlocks,
                         .flags = reinterpret_cast<uint32_t*>(flags.data())};
  ASSERT_TRUE(QuantizeBlocks(batch, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> flag_bytes = Download(flags, 4 * kBlocks);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    uint32_t flag = 0;
    std::memcpy(&flag, flag_bytes.data() + 4 * b, 4);
    EXPECT_TRUE(QuantFlagsStatus(flag).ok());
    ASSERT_EQ(Download(d_stage[b], stage_bytes), cpu_stage[b]) << "stage of block " << b;
  }
  // Dequantize the GPU's stage into the raw buffers and compare with the CPU reconstruction.
  ASSERT_TRUE(DequantizeBlocks(batch, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(Download(d_raw[b], g.raw_bytes()), cpu_back[b]) << "reconstruction of block " << b;
  }
}

TEST(CudaKernelsTest, QuantizeAndDequantizeMatchTheCpuCodecBitForBit) {
  KV_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (uint32_t bits : {8u, 4u}) CheckQuantizeMatchesCpu({dtype, bits});
  }
}

TEST(CudaKernelsTest, NonFiniteInputAndCorruptParamsAreFlagged) {
  KV_SKIP_WITHOUT_GPU();
  const codecs::BlockGeometry g{.tokens = 16, .kv_heads = 1, .head_dim = 16, .dtype = DType::kF32};
  std::vector<float> f(g.elements(), 1.0f);
  f[300] = std::numeric_limits<float>::quiet_NaN();  // In the V half.
  std::vector<std::byte> raw(g.raw_bytes());
  std::memcpy(raw.data(), f.data(), raw.size());
  const codecs::QuantLayout l = codecs::ComputeQuantLayout(g, 8, 8);
  DeviceBuffer d_raw = Upload(raw);
  DeviceBuffer d_stage = Upload(std::vector<std::byte>(l.total_bytes));
  DeviceBuffer raw_list = UploadArray(std::vector<std::byte*>{d_raw.data()});
  DeviceBuffer stage_list = UploadArray(std::vector<std::byte*>{d_stage.data()});
  DeviceBuffer flags = UploadArray(std::vector<uint32_t>{0});
  const QuantBatch batch{.geometry = g,
                         .bits = 8,
                         .group_size = 8,
                         .raw = reinterpret_cast<std::byte* const*>(raw_list.data()),
                         .stage = reinterpret_cast<std::byte* const*>(stage_list.data()),
                         .count = 1,
                         .flags = reinterpret_cast<uint32_t*>(flags.data())};
  ASSERT_TRUE(QuantizeBlocks(batch, nullptr).ok());
  uint32_t flag = 0;
  ASSERT_EQ(cudaMemcpy(&flag, flags.data(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(QuantFlagsStatus(flag).code(), StatusCode::kInvalidArgument);
  // A NaN FP16 scale (0x7e00) in the key parameters must read back as Corruption.
  const uint16_t nan_f16 = 0x7e00;
  ASSERT_EQ(cudaMemcpy(d_stage.data() + l.k_scale_offset, &nan_f16, 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(DequantizeBlocks(batch, nullptr).ok());
  ASSERT_EQ(cudaMemcpy(&flag, flags.data(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(QuantFlagsStatus(flag).code(), StatusCode::kCorruption);
}

TEST(CudaKernelsTest, ShuffleMatchesTheCpuReference) {
  KV_SKIP_WITHOUT_GPU();
  std::mt19937 rng(kSeed);
  for (DType dtype : {DType::kF16, DType::kF32}) {
    SCOPED_TRACE(::testing::Message() << "seed=" << kSeed << " dtype=" << DTypeName(dtype));
    std::vector<std::byte> raw(4 * 1001);
    for (std::byte& b : raw) b = static_cast<std::byte>(rng());
    const size_t elem = DTypeSizeBytes(dtype);
    std::vector<std::byte> want(raw.size());
    const auto* src = reinterpret_cast<const uint8_t*>(raw.data());
    auto* dst = reinterpret_cast<uint8_t*>(want.data());
    if (elem == 2) codecs::ref::Shuffle16(src, raw.size() / 2, dst);
    if (elem == 4) codecs::ref::Shuffle32(src, raw.size() / 4, dst);
    DeviceBuffer d_raw = Upload(raw);
    DeviceBuffer d_planes = Upload(std::vector<std::byte>(raw.size()));
    DeviceBuffer d_back = Upload(std::vector<std::byte>(raw.size()));
    ASSERT_TRUE(ShufflePlanes(dtype, d_raw.data(), raw.size(), d_planes.data(), nullptr).ok());
    ASSERT_TRUE(UnshufflePlanes(dtype, d_planes.data(), raw.size(), d_back.data(), nullptr).ok());
    EXPECT_EQ(Download(d_planes, raw.size()), want);
    EXPECT_EQ(Download(d_back, raw.size()), raw);
  }
}

void CheckPagedMatchesHost(PagedLayoutKind kind) {
  SCOPED_TRACE(::testing::Message() << "seed=" << kSeed << " kind=" << static_cast<int>(kind));
  const PagedGeometry g{
      .kind = kind, .page_tokens = 16, .kv_heads = 4, .head_dim = 64, .elem_bytes = 2};
  constexpr uint32_t kPages = 37;
  constexpr uint32_t kBlockTokens = 48;
  constexpr uint32_t kBlocks = 5;
  const size_t cache_bytes = kPages * g.page_elements() * 2;
  const size_t block_bytes = 2ull * kBlockTokens * g.kv_heads * g.head_dim * 2;
  std::mt19937 rng(kSeed);
  std::vector<std::byte> k(cache_bytes), v(cache_bytes);
  for (std::byte& b : k) b = static_cast<std::byte>(rng());
  for (std::byte& b : v) b = static_cast<std::byte>(rng());
  std::vector<int32_t> table(kBlocks * 3);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 13 + 5) % kPages);
  table[4] = -1;  // One unmapped page.
  // Host reference.
  std::vector<std::vector<std::byte>> host_blocks(kBlocks, std::vector<std::byte>(block_bytes));
  std::vector<std::byte*> host_ptrs;
  for (auto& b : host_blocks) host_ptrs.push_back(b.data());
  PagedTransfer t{.geometry = g,
                  .k_cache = k.data(),
                  .v_cache = v.data(),
                  .pages_total = kPages,
                  .block_table = table.data(),
                  .blocks = host_ptrs.data(),
                  .block_count = kBlocks,
                  .block_tokens = kBlockTokens};
  PagedTransferHost(t, TransferDirection::kGather);
  // GPU.
  DeviceBuffer dk = Upload(k), dv = Upload(v), dtable = UploadArray(table);
  std::vector<DeviceBuffer> d_blocks;
  std::vector<std::byte*> d_ptrs;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    d_blocks.push_back(Upload(std::vector<std::byte>(block_bytes)));
    d_ptrs.push_back(d_blocks.back().data());
  }
  DeviceBuffer d_list = UploadArray(d_ptrs);
  t.k_cache = dk.data();
  t.v_cache = dv.data();
  t.block_table = reinterpret_cast<const int32_t*>(dtable.data());
  t.blocks = reinterpret_cast<std::byte* const*>(d_list.data());
  ASSERT_TRUE(GatherPagedBlocks(t, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(Download(d_blocks[b], block_bytes), host_blocks[b]) << "block " << b;
  }
  // Scatter into zeroed caches on both sides and compare the caches.
  std::vector<std::byte> hk(cache_bytes), hv(cache_bytes);
  DeviceBuffer zk = Upload(hk), zv = Upload(hv);
  PagedTransfer host_t = t;
  host_t.k_cache = hk.data();
  host_t.v_cache = hv.data();
  host_t.block_table = table.data();
  host_t.blocks = host_ptrs.data();
  PagedTransferHost(host_t, TransferDirection::kScatter);
  t.k_cache = zk.data();
  t.v_cache = zv.data();
  ASSERT_TRUE(ScatterPagedBlocks(t, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(Download(zk, cache_bytes), hk);
  EXPECT_EQ(Download(zv, cache_bytes), hv);
}

TEST(CudaKernelsTest, GatherAndScatterMatchTheHostReference) {
  KV_SKIP_WITHOUT_GPU();
  CheckPagedMatchesHost(PagedLayoutKind::kFlash);
  CheckPagedMatchesHost(PagedLayoutKind::kVllmLegacy);
}

TEST(CudaKernelsTest, ArgumentErrorsAreRefusedBeforeLaunch) {
  // No GPU needed: validation happens before any CUDA call.
  const QuantBatch bad_bits{.geometry = {.tokens = 16, .kv_heads = 1, .head_dim = 16}, .bits = 3};
  EXPECT_EQ(QuantizeBlocks(bad_bits, nullptr).code(), StatusCode::kInvalidArgument);
  const QuantBatch bad_group{
      .geometry = {.tokens = 16, .kv_heads = 1, .head_dim = 16}, .bits = 8, .group_size = 4};
  EXPECT_EQ(QuantizeBlocks(bad_group, nullptr).code(), StatusCode::kInvalidArgument);
  PagedTransfer t{.geometry = {.kind = PagedLayoutKind::kVllmLegacy,
                               .page_tokens = 16,
                               .kv_heads = 1,
                               .head_dim = 12,
                               .elem_bytes = 2},
                  .block_count = 1,
                  .block_tokens = 16};
  EXPECT_EQ(GatherPagedBlocks(t, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShufflePlanes(DType::kF16, nullptr, 3, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::cuda
