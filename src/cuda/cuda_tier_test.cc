// Goal: the CUDA device tier and the pinned host tier keep the memory_tier.h contracts on a real
// GPU, and the fences order copies across streams. Method: round trips host -> device -> device ->
// host with each hop fenced on the GPU only (CopyAsync's `after`) and a single host wait at the
// end; back-pressure with a one-copy ring; budget refusal beyond free memory; argument errors.
// Every test that needs a GPU skips with the reason when none is usable (no driver, no device);
// option validation runs everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_buffer.h"
#include "cuda/cuda_device_tier.h"
#include "cuda/cuda_status.h"
#include "cuda/pinned_host_tier.h"
#include "testing/test_util.h"

namespace kvtier::cuda {
namespace {

#define KV_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                           \
    const Result<int> kv_devices_ = CudaDeviceCount();                           \
    if (!kv_devices_.ok())                                                       \
      GTEST_SKIP() << "no usable CUDA GPU: " << kv_devices_.status().ToString(); \
  } while (false)

constexpr uint32_t kSlotBytes = 64 << 10;

CudaDeviceTierOptions DeviceOptions(uint64_t slots, Logger* logger = nullptr) {
  return {.tier = {.capacity_bytes = slots * kSlotBytes,
                   .slot_bytes = kSlotBytes,
                   .copy_queue_max = 8,
                   .logger = logger}};
}

TEST(CudaTierTest, OptionsValidation) {
  EXPECT_TRUE(DeviceOptions(4).Validate().ok());
  CudaDeviceTierOptions o = DeviceOptions(4);
  o.tier.capacity_bytes = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = DeviceOptions(4);
  o.tier.copy_queue_max = kCudaCopiesInFlightMax + 1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = DeviceOptions(4);
  o.device = -1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(CudaTierTest, NoGpuIsReportedAsAStatusNotACrash) {
  const Result<int> devices = CudaDeviceCount();
  if (devices.ok()) {
    EXPECT_GT(*devices, 0);
    return;
  }
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable) << devices.status().ToString();
  Result<std::unique_ptr<CudaDeviceTier>> tier = CudaDeviceTier::Open(DeviceOptions(4));
  EXPECT_FALSE(tier.ok());
}

TEST(CudaTierTest, AllocateFreeAndBusy) {
  KV_SKIP_WITHOUT_GPU();
  CapturingLogger logger;
  Result<std::unique_ptr<CudaDeviceTier>> tier = CudaDeviceTier::Open(DeviceOptions(2, &logger));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(logger.CountContaining("device tier (CUDA) open"), 1u);
  Result<uint32_t> a = (*tier)->Allocate();
  Result<uint32_t> b = (*tier)->Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*tier)->Allocate().status().code(), StatusCode::kBusy);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*tier)->SlotData(*a)) % kSlotAlignmentBytes, 0u);
  EXPECT_EQ((*tier)->Stats().slots_free, 0u);
  (*tier)->Free(*a);
  EXPECT_EQ((*tier)->Stats().slots_free, 1u);
}

TEST(CudaTierTest, BudgetBeyondFreeMemoryIsRefused) {
  KV_SKIP_WITHOUT_GPU();
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  CudaDeviceTierOptions o = DeviceOptions(1);
  o.tier.slot_bytes = static_cast<uint32_t>(kBlockBytesMax);
  o.tier.capacity_bytes = (free_bytes / kBlockBytesMax + 1) * kBlockBytesMax;
  Result<std::unique_ptr<CudaDeviceTier>> tier = CudaDeviceTier::Open(o);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kNoSpace) << tier.status().ToString();
}

TEST(CudaTierTest, FencedRoundTripThroughPinnedHostTier) {
  KV_SKIP_WITHOUT_GPU();
  Result<std::unique_ptr<CudaDeviceTier>> device = CudaDeviceTier::Open(DeviceOptions(4));
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Result<std::unique_ptr<PinnedHostTier>> host =
      OpenPinnedHostTier({.host = {.capacity_bytes = 4 * kSlotBytes, .slot_bytes = kSlotBytes}});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_TRUE((*host)->Stats().locked);
  EXPECT_EQ((*host)->DeviceSlotData(0), nullptr);  // Not mapped unless asked.
  std::byte* in = (*host)->SlotData(0);
  std::byte* out = (*host)->SlotData(1);
  for (uint32_t i = 0; i < kSlotBytes; ++i) in[i] = static_cast<std::byte>(i * 7 + 1);
  std::memset(out, 0, kSlotBytes);
  CudaDeviceTier& d = **device;
  std::byte* a = d.SlotData(0);
  std::byte* b = d.SlotData(1);
  // Each hop waits for the previous one on the GPU only; the host waits once, at the end.
  const CopyRegion up{.dst = a, .src = in, .bytes = kSlotBytes};
  CudaCopy h2d = d.CopyAsync(CopyKind::kHostToDevice, {&up, 1});
  ASSERT_NE(h2d.cuda_event, nullptr);
  const CopyRegion across{.dst = b, .src = a, .bytes = kSlotBytes};
  CudaCopy d2d = d.CopyAsync(CopyKind::kDeviceToDevice, {&across, 1}, h2d.cuda_event);
  const CopyRegion down{.dst = out, .src = b, .bytes = kSlotBytes};
  CudaCopy d2h = d.CopyAsync(CopyKind::kDeviceToHost, {&down, 1}, d2d.cuda_event);
  ASSERT_TRUE(d2h.event.Wait().ok());
  EXPECT_EQ(std::memcmp(in, out, kSlotBytes), 0);
  EXPECT_TRUE(h2d.event.Wait().ok());
  EXPECT_TRUE(d2d.event.Wait().ok());
}

TEST(CudaTierTest, StreamWaitCopyFencesAConsumerStream) {
  KV_SKIP_WITHOUT_GPU();
  Result<std::unique_ptr<CudaDeviceTier>> device = CudaDeviceTier::Open(DeviceOptions(2));
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Result<PinnedBuffer> in = PinnedBuffer::Allocate(kSlotBytes);
  Result<PinnedBuffer> out = PinnedBuffer::Allocate(kSlotBytes);
  Result<CudaStream> consumer = CudaStream::Create();
  ASSERT_TRUE(in.ok() && out.ok() && consumer.ok());
  std::memset(in->data(), 0x5a, kSlotBytes);
  std::memset(out->data(), 0, kSlotBytes);
  std::byte* slot = (*device)->SlotData(0);
  const CopyRegion up{.dst = slot, .src = in->data(), .bytes = kSlotBytes};
  CudaCopy h2d = (*device)->CopyAsync(CopyKind::kHostToDevice, {&up, 1});
  ASSERT_TRUE(CudaDeviceTier::StreamWaitCopy(consumer->get(), h2d).ok());
  ASSERT_EQ(cudaMemcpyAsync(out->data(), slot, kSlotBytes, cudaMemcpyDefault, consumer->get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer->get()), cudaSuccess);
  EXPECT_EQ(std::memcmp(in->data(), out->data(), kSlotBytes), 0);
  EXPECT_TRUE(h2d.event.Wait().ok());
}

TEST(CudaTierTest, ManyCopiesThroughAOneCopyRing) {
  KV_SKIP_WITHOUT_GPU();
  CudaDeviceTierOptions o = DeviceOptions(4);
  o.tier.copy_queue_max = 1;  // Every Copy waits for the previous one: back-pressure.
  Result<std::unique_ptr<CudaDeviceTier>> device = CudaDeviceTier::Open(o);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Result<PinnedBuffer> host = PinnedBuffer::Allocate(4 * kSlotBytes);
  ASSERT_TRUE(host.ok());
  std::vector<CopyEvent> events;
  for (uint32_t round = 0; round < 64; ++round) {
    std::memset(host->data() + (round % 2) * kSlotBytes, static_cast<int>(round), kSlotBytes);
    const CopyRegion r{.dst = (*device)->SlotData(round % 4),
                       .src = host->data() + (round % 2) * kSlotBytes,
                       .bytes = kSlotBytes};
    events.push_back((*device)->Copy(CopyKind::kHostToDevice, {&r, 1}));
    ASSERT_TRUE(events.back().Wait().ok());  // The source is rewritten two rounds later.
  }
  for (const CopyEvent& e : events) EXPECT_TRUE(e.Ready());
}

TEST(CudaTierTest, BadRegionsFailTheWholeCall) {
  KV_SKIP_WITHOUT_GPU();
  Result<std::unique_ptr<CudaDeviceTier>> device = CudaDeviceTier::Open(DeviceOptions(2));
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  std::byte* slot = (*device)->SlotData(0);
  const CopyRegion null_src{.dst = slot, .src = nullptr, .bytes = 16};
  CudaCopy c = (*device)->CopyAsync(CopyKind::kHostToDevice, {&null_src, 1});
  EXPECT_EQ(c.cuda_event, nullptr);
  EXPECT_EQ(c.event.Wait().code(), StatusCode::kInvalidArgument);
  const CopyRegion overlap{.dst = slot + 8, .src = slot, .bytes = 16};
  EXPECT_EQ((*device)->Copy(CopyKind::kDeviceToDevice, {&overlap, 1}).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*device)->Copy(CopyKind::kDeviceToDevice, {}).Wait().ok());
}

TEST(CudaTierTest, MappedPinnedTierIsReadableFromTheDevice) {
  KV_SKIP_WITHOUT_GPU();
  Result<std::unique_ptr<PinnedHostTier>> host =
      OpenPinnedHostTier({.host = {.capacity_bytes = 2 * kSlotBytes, .slot_bytes = kSlotBytes},
                          .mapping = PinnedMapping::kMapped});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  std::byte* device_view = (*host)->DeviceSlotData(1);
  ASSERT_NE(device_view, nullptr);
  std::memset((*host)->SlotData(1), 0x3c, kSlotBytes);
  Result<DeviceBuffer> copy = DeviceBuffer::Allocate(kSlotBytes);
  ASSERT_TRUE(copy.ok());
  // A device-to-device copy from the mapped address reads the host memory over PCIe.
  ASSERT_EQ(cudaMemcpy(copy->data(), device_view, kSlotBytes, cudaMemcpyDeviceToDevice),
            cudaSuccess);
  std::vector<std::byte> back(kSlotBytes);
  ASSERT_EQ(cudaMemcpy(back.data(), copy->data(), kSlotBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), (*host)->SlotData(1), kSlotBytes), 0);
}

}  // namespace
}  // namespace kvtier::cuda
