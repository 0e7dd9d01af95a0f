// Goal: the CPU device tier moves the right bytes in each direction, completes each copy's event
// only after its bytes are in place, stays correct with many submitters pushing through a tiny
// queue (back-pressure), rejects bad regions without copying anything, and finishes copies
// still queued when it is destroyed. The non-temporal copy kernel must equal memcpy.
//
// Method: slots and host buffers filled with per-position patterns (byte = f(seed, offset)),
// copied through Copy() and compared after Wait(); threads submit hundreds of copies through
// queues of 1-2 regions; destruction right after submitting 64 MiB of copies; the kernels are
// compared with memcpy over sizes and misalignments around the 64-byte line. A CopyEventSource
// (events completed by the caller's own work) is completed from another thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "tiers/copy_kernels.h"
#include "tiers/memory_tier.h"

namespace kvtier {
namespace {

constexpr uint32_t kSlotBytes = 64 * 1024;

std::byte Pattern(uint32_t seed, size_t i) {
  return static_cast<std::byte>((seed * 131u + i * 7u + (i >> 9)) & 0xff);
}
void Fill(std::byte* p, size_t bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes; ++i) p[i] = Pattern(seed, i);
}
// The first offset that differs from the pattern, or `bytes`.
size_t FirstMismatch(const std::byte* p, size_t bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != Pattern(seed, i)) return i;
  }
  return bytes;
}

std::unique_ptr<DeviceTier> OpenTier(uint32_t slots, uint32_t queue_max = 1024,
                                     uint32_t threads = 1) {
  auto tier = DeviceTier::OpenCpu({.capacity_bytes = uint64_t{slots} * kSlotBytes,
                                   .slot_bytes = kSlotBytes,
                                   .copy_threads = threads,
                                   .copy_queue_max = queue_max});
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// Validate() of options built from designated initializers (which cannot go inside a macro).
Status ValidateDevice(uint64_t capacity_bytes, uint32_t slot_bytes, uint32_t copy_threads = 1,
                      uint32_t copy_queue_max = 16) {
  const DeviceTierOptions options = {.capacity_bytes = capacity_bytes,
                                     .slot_bytes = slot_bytes,
                                     .copy_threads = copy_threads,
                                     .copy_queue_max = copy_queue_max};
  return options.Validate();
}

TEST(DeviceTierTest, OptionsAreValidated) {
  EXPECT_TRUE(DeviceTierOptions{}.Validate().ok());  // Disabled.
  EXPECT_TRUE(DeviceTier::OpenCpu({}).status().IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(4096, 4096).ok());
  EXPECT_TRUE(ValidateDevice(100, 0).IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(100, 200).IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(4096, 4096, 0).IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(4096, 4096, kCopyThreadsMax + 1).IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(4096, 4096, 1, 0).IsInvalidArgument());
  EXPECT_TRUE(ValidateDevice(4096, 4096, 1, kCopyQueueMax + 1).IsInvalidArgument());
}

TEST(DeviceTierTest, AllocatesTheBudgetThenBusy) {
  auto tier = OpenTier(8);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->slots(), 8u);
  EXPECT_EQ(tier->slot_bytes(), kSlotBytes);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(tier->Allocate().ok());
  EXPECT_TRUE(tier->Allocate().status().IsBusy());
  tier->Free(3);
  EXPECT_EQ(tier->Stats().slots_free, 1u);
  EXPECT_FALSE(tier->Stats().locked);
}

TEST(DeviceTierTest, CopiesMoveBytesInEveryDirection) {
  auto tier = OpenTier(4);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> host_in(2 * kSlotBytes), host_out(2 * kSlotBytes);
  Fill(host_in.data(), host_in.size(), 1);
  // H2D: two host halves into slots 0 and 1, one event for both.
  const CopyRegion h2d[] = {{tier->SlotData(0), host_in.data(), kSlotBytes},
                            {tier->SlotData(1), host_in.data() + kSlotBytes, kSlotBytes}};
  ASSERT_TRUE(tier->Copy(CopyKind::kHostToDevice, h2d).Wait().ok());
  // D2D: slots 0,1 into 2,3.
  const CopyRegion d2d[] = {{tier->SlotData(2), tier->SlotData(0), kSlotBytes},
                            {tier->SlotData(3), tier->SlotData(1), kSlotBytes}};
  ASSERT_TRUE(tier->Copy(CopyKind::kDeviceToDevice, d2d).Wait().ok());
  // D2H: slots 2,3 back to the host.
  const CopyRegion d2h[] = {{host_out.data(), tier->SlotData(2), kSlotBytes},
                            {host_out.data() + kSlotBytes, tier->SlotData(3), kSlotBytes}};
  CopyEvent event = tier->Copy(CopyKind::kDeviceToHost, d2h);
  ASSERT_TRUE(event.Wait().ok());
  EXPECT_TRUE(event.Ready());
  EXPECT_EQ(FirstMismatch(host_out.data(), host_out.size(), 1), host_out.size());
}

TEST(DeviceTierTest, LargeUnalignedRegionTakesTheStreamingPath) {
  auto tier = OpenTier(64);  // 4 MiB of slots, contiguous.
  ASSERT_NE(tier, nullptr);
  const size_t bytes = 3 * kMiB + 77;
  std::vector<std::byte> src(bytes + 13), dst(bytes + 13);
  Fill(src.data() + 13, bytes, 9);
  const CopyRegion in[] = {{tier->SlotData(0) + 5, src.data() + 13, bytes}};
  ASSERT_TRUE(tier->Copy(CopyKind::kHostToDevice, in).Wait().ok());
  const CopyRegion out[] = {{dst.data() + 1, tier->SlotData(0) + 5, bytes}};
  ASSERT_TRUE(tier->Copy(CopyKind::kDeviceToHost, out).Wait().ok());
  EXPECT_EQ(FirstMismatch(dst.data() + 1, bytes, 9), bytes);
}

TEST(DeviceTierTest, TrivialEventsAreCompleteAndOk) {
  CopyEvent none;
  EXPECT_TRUE(none.Ready());
  EXPECT_TRUE(none.Wait().ok());
  auto tier = OpenTier(1);
  ASSERT_NE(tier, nullptr);
  CopyEvent empty = tier->Copy(CopyKind::kHostToDevice, {});
  EXPECT_TRUE(empty.Ready());
  EXPECT_TRUE(empty.Wait().ok());
  std::byte b{};
  const CopyRegion zero[] = {{nullptr, nullptr, 0}, {&b, &b, 0}};
  EXPECT_TRUE(tier->Copy(CopyKind::kDeviceToHost, zero).Wait().ok());
}

// A CopyEventSource completes its events after its last pending unit, from another thread, with
// the first error reported.
TEST(DeviceTierTest, EventSourceCompletesAfterItsLastUnit) {
  const CopyEventSource source(2);
  const CopyEvent event = source.event();
  EXPECT_FALSE(event.Ready());
  std::thread worker([source] {
    source.Complete(Status::Corruption("first"));
    source.Complete(Status::IoError("second"));
  });
  const Status s = event.Wait();
  worker.join();
  EXPECT_TRUE(event.Ready());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  const CopyEventSource ok;
  ok.Complete(Status::Ok());
  EXPECT_TRUE(ok.event().Wait().ok());
}

TEST(DeviceTierTest, BadRegionFailsTheWholeCallBeforeCopying) {
  auto tier = OpenTier(2);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> host(kSlotBytes);
  Fill(host.data(), host.size(), 3);
  std::memset(tier->SlotData(0), 0, kSlotBytes);
  const CopyRegion with_null[] = {{tier->SlotData(0), host.data(), kSlotBytes},
                                  {nullptr, host.data(), 10}};
  CopyEvent e = tier->Copy(CopyKind::kHostToDevice, with_null);
  EXPECT_TRUE(e.Ready());
  Status s = e.Wait();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("region 1"), std::string::npos) << s.ToString();
  EXPECT_EQ(tier->SlotData(0)[0], std::byte{0});  // Region 0 was not copied either.

  const CopyRegion overlap[] = {{tier->SlotData(0) + 100, tier->SlotData(0), 200}};
  EXPECT_TRUE(tier->Copy(CopyKind::kDeviceToDevice, overlap).Wait().IsInvalidArgument());
  const CopyRegion huge[] = {{tier->SlotData(0), host.data(), kCopyRegionBytesMax + 1}};
  EXPECT_TRUE(tier->Copy(CopyKind::kHostToDevice, huge).Wait().IsInvalidArgument());
}

// Four threads, each owning 4 slots and a host buffer, push copies of every kind through queues
// of two regions. Each thread checks its own bytes after every round trip.
TEST(DeviceTierTest, ManySubmittersThroughATinyQueue) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 150;
  auto tier = OpenTier(4 * kThreads, /*queue_max=*/2, /*threads=*/2);
  ASSERT_NE(tier, nullptr);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto first = static_cast<uint32_t>(4 * t);
      std::vector<std::byte> host(2 * kSlotBytes), back(2 * kSlotBytes);
      for (int r = 0; r < kRounds; ++r) {
        const auto seed = static_cast<uint32_t>(t * 1000 + r);
        Fill(host.data(), host.size(), seed);
        const CopyRegion in[] = {{tier->SlotData(first), host.data(), kSlotBytes},
                                 {tier->SlotData(first + 1), host.data() + kSlotBytes, kSlotBytes}};
        const CopyRegion dd[] = {
            {tier->SlotData(first + 2), tier->SlotData(first), kSlotBytes},
            {tier->SlotData(first + 3), tier->SlotData(first + 1), kSlotBytes}};
        const CopyRegion out[] = {
            {back.data(), tier->SlotData(first + 2), kSlotBytes},
            {back.data() + kSlotBytes, tier->SlotData(first + 3), kSlotBytes}};
        if (!tier->Copy(CopyKind::kHostToDevice, in).Wait().ok()) failures++;
        if (!tier->Copy(CopyKind::kDeviceToDevice, dd).Wait().ok()) failures++;
        if (!tier->Copy(CopyKind::kDeviceToHost, out).Wait().ok()) failures++;
        if (FirstMismatch(back.data(), back.size(), seed) != back.size()) failures++;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// Many regions in one call with a queue of one: Copy() must feed them through without
// deadlocking, and the one event completes after the last.
TEST(DeviceTierTest, MoreRegionsThanTheQueueHolds) {
  auto tier = OpenTier(32, /*queue_max=*/1);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> host(32 * kSlotBytes);
  Fill(host.data(), host.size(), 5);
  std::vector<CopyRegion> regions;
  for (uint32_t s = 0; s < 32; ++s) {
    regions.push_back({tier->SlotData(s), host.data() + s * kSlotBytes, kSlotBytes});
  }
  ASSERT_TRUE(tier->Copy(CopyKind::kHostToDevice, regions).Wait().ok());
  for (uint32_t s = 0; s < 32; ++s) {
    ASSERT_EQ(std::memcmp(tier->SlotData(s), host.data() + s * kSlotBytes, kSlotBytes), 0);
  }
}

// Two D2H copies of every slot are still queued when the tier is destroyed: the destructor must
// finish them (they only read the slots, so running concurrently on their stream is fine).
TEST(DeviceTierTest, DestructionFinishesQueuedCopies) {
  constexpr uint32_t kSlots = 512;  // 32 MiB.
  std::vector<std::byte> host(uint64_t{kSlots} * kSlotBytes), back(host.size()), back2(host.size());
  Fill(host.data(), host.size(), 11);
  std::vector<CopyEvent> events;
  {
    auto tier = OpenTier(kSlots, /*queue_max=*/kSlots);
    ASSERT_NE(tier, nullptr);
    std::vector<CopyRegion> in, out, out2;
    for (uint32_t s = 0; s < kSlots; ++s) {
      const uint64_t off = uint64_t{s} * kSlotBytes;
      in.push_back({tier->SlotData(s), host.data() + off, kSlotBytes});
      out.push_back({back.data() + off, tier->SlotData(s), kSlotBytes});
      out2.push_back({back2.data() + off, tier->SlotData(s), kSlotBytes});
    }
    ASSERT_TRUE(tier->Copy(CopyKind::kHostToDevice, in).Wait().ok());
    events.push_back(tier->Copy(CopyKind::kDeviceToHost, out));
    events.push_back(tier->Copy(CopyKind::kDeviceToHost, out2));
  }  // Destroyed with copies queued.
  for (const CopyEvent& e : events) {
    EXPECT_TRUE(e.Ready());
    EXPECT_TRUE(e.Wait().ok());
  }
  EXPECT_EQ(FirstMismatch(back.data(), back.size(), 11), back.size());
  EXPECT_EQ(FirstMismatch(back2.data(), back2.size(), 11), back2.size());
}

// Events are recycled from a pool once dropped; a held event must never be re-armed under its
// holder. Hold every 3rd event across many copies and check they all stay complete and OK.
TEST(DeviceTierTest, HeldEventsSurviveRecycling) {
  auto tier = OpenTier(2);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> host(kSlotBytes);
  const CopyRegion r[] = {{tier->SlotData(0), host.data(), kSlotBytes}};
  std::vector<CopyEvent> held;
  for (int i = 0; i < 1000; ++i) {
    CopyEvent e = tier->Copy(CopyKind::kHostToDevice, r);
    ASSERT_TRUE(e.Wait().ok());
    if (i % 3 == 0) held.push_back(e);
  }
  for (const CopyEvent& e : held) ASSERT_TRUE(e.Ready());
}

TEST(CopyKernelsTest, NonTemporalCopyEqualsMemcpy) {
  std::vector<std::byte> src(70000), dst(70000);
  Fill(src.data(), src.size(), 42);
  for (size_t bytes : {0ul, 1ul, 63ul, 64ul, 65ul, 127ul, 128ul, 200ul, 4096ul, 65536ul}) {
    for (size_t dst_off : {0ul, 1ul, 17ul, 63ul}) {
      for (size_t src_off : {0ul, 5ul}) {
        std::memset(dst.data(), 0xee, dst.size());
        tiers_internal::CopyBytesNonTemporal(dst.data() + dst_off, src.data() + src_off, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, bytes), 0)
            << bytes << " " << dst_off << " " << src_off;
        if (dst_off > 0) {
          ASSERT_EQ(dst[dst_off - 1], std::byte{0xee});
        }
        ASSERT_EQ(dst[dst_off + bytes], std::byte{0xee});
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
