// cuda_bench: bandwidth of the CUDA device tier's Copy() against plain cudaMemcpyAsync between
// pinned host memory and the device, and throughput of the kernels (quantize, dequantize, shuffle,
// gather, scatter), printed as one JSON object on stdout. GB/s = 10^9 bytes/s of raw (FP16)
// bytes. Sized to finish in well under a minute on an H100/H200; tests/cuda/device_checks.sh
// runs it. Exits 2 when no GPU is usable.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "codecs/block_format.h"
#include "cuda/cuda_buffer.h"
#include "cuda/cuda_device_tier.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_status.h"
#include "cuda/pinned_host_tier.h"

namespace kvtier::cuda {
namespace {

constexpr uint32_t kSlotBytes = 1u << 20;  // One block: 256 tokens x 8 heads x 128 dims x K,V f16.
constexpr uint32_t kSlots = 512;           // 512 MiB per pass.
constexpr uint32_t kRegionsPerCopy = 32;
constexpr int kPasses = 5;

#define KV_BENCH_CHECK(expr)                                                         \
  do {                                                                               \
    const Status kv_s_ = (expr);                                                     \
    if (!kv_s_.ok()) {                                                               \
      std::fprintf(stderr, "cuda_bench: %s: %s\n", #expr, kv_s_.ToString().c_str()); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (false)

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GB/s of moving every slot once per pass through the tier's Copy(), best of kPasses.
double TierCopyGbps(CudaDeviceTier& device, PinnedHostTier& host, CopyKind kind) {
  double best = 0;
  std::vector<CopyRegion> regions(kRegionsPerCopy);
  std::vector<CopyEvent> events;
  for (int pass = 0; pass < kPasses; ++pass) {
    events.clear();
    const auto t0 = std::chrono::steady_clock::now();
    for (uint32_t first = 0; first < kSlots; first += kRegionsPerCopy) {
      for (uint32_t i = 0; i < kRegionsPerCopy; ++i) {
        std::byte* h = host.SlotData(first + i);
        std::byte* d = device.SlotData(first + i);
        regions[i] = kind == CopyKind::kHostToDevice
                         ? CopyRegion{.dst = d, .src = h, .bytes = kSlotBytes}
                         : CopyRegion{.dst = h, .src = d, .bytes = kSlotBytes};
      }
      events.push_back(device.Copy(kind, regions));
    }
    for (const CopyEvent& e : events) KV_BENCH_CHECK(e.Wait());
    best = std::max(best, double{kSlots} * kSlotBytes / Seconds(t0) / 1e9);
  }
  return best;
}

// The same bytes with one cudaMemcpyAsync per slot on one stream and one synchronize.
double PlainCopyGbps(PinnedBuffer& host, DeviceBuffer& device, bool to_device) {
  Result<CudaStream> stream = CudaStream::Create();
  KV_BENCH_CHECK(stream.status());
  double best = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < kSlots; ++i) {
      std::byte* h = host.data() + size_t{i} * kSlotBytes;
      std::byte* d = device.data() + size_t{i} * kSlotBytes;
      KV_BENCH_CHECK(CudaStatus(cudaMemcpyAsync(to_device ? d : h, to_device ? h : d, kSlotBytes,
                                                cudaMemcpyDefault, stream->get()),
                                "cudaMemcpyAsync"));
    }
    KV_BENCH_CHECK(CudaStatus(cudaStreamSynchronize(stream->get()), "cudaStreamSynchronize"));
    best = std::max(best, double{kSlots} * kSlotBytes / Seconds(t0) / 1e9);
  }
  return best;
}

// Best GB/s of `launch` over kPasses, timed with CUDA events on `stream`.
template <typename Launch>
double KernelGbps(cudaStream_t stream, double bytes, Launch launch) {
  Result<CudaEvent> start = CudaEvent::Create(EventTiming::kEnabled);
  Result<CudaEvent> stop = CudaEvent::Create(EventTiming::kEnabled);
  KV_BENCH_CHECK(start.status());
  KV_BENCH_CHECK(stop.status());
  KV_BENCH_CHECK(launch());  // Warm-up.
  double best = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    KV_BENCH_CHECK(CudaStatus(cudaEventRecord(start->get(), stream), "cudaEventRecord"));
    KV_BENCH_CHECK(launch());
    KV_BENCH_CHECK(CudaStatus(cudaEventRecord(stop->get(), stream), "cudaEventRecord"));
    KV_BENCH_CHECK(CudaStatus(cudaEventSynchronize(stop->get()), "cudaEventSynchronize"));
    float ms = 0;
    KV_BENCH_CHECK(
        CudaStatus(cudaEventElapsedTime(&ms, start->get(), stop->get()), "cudaEventElapsedTime"));
    best = std::max(best, bytes / (double{ms} / 1e3) / 1e9);
  }
  return best;
}

DeviceBuffer MustAllocate(size_t bytes) {
  Result<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  KV_BENCH_CHECK(b.status());
  return std::move(*b);
}

// Uploads a host array of T and returns the device copy.
template <typename T>
DeviceBuffer UploadArray(const std::vector<T>& values) {
  DeviceBuffer d = MustAllocate(values.size() * sizeof(T));
  KV_BENCH_CHECK(CudaStatus(cudaMemcpy(d.data(), values.data(), d.size(), cudaMemcpyHostToDevice),
                            "cudaMemcpy"));
  return d;
}

std::string Field(const char* name, double value) {
  char buffer[96];
  std::snprintf(buffer, sizeof(buffer), "\"%s\": %.2f", name, value);
  return buffer;
}

}  // namespace
}  // namespace kvtier::cuda

namespace kvtier::cuda {
namespace {

std::string CopyBench() {
  Result<std::unique_ptr<CudaDeviceTier>> device =
      CudaDeviceTier::Open({.tier = {.capacity_bytes = uint64_t{kSlots} * kSlotBytes,
                                     .slot_bytes = kSlotBytes,
                                     .copy_queue_max = 64}});
  KV_BENCH_CHECK(device.status());
  Result<std::unique_ptr<PinnedHostTier>> host = OpenPinnedHostTier(
      {.host = {.capacity_bytes = uint64_t{kSlots} * kSlotBytes, .slot_bytes = kSlotBytes}});
  KV_BENCH_CHECK(host.status());
  for (uint32_t i = 0; i < kSlots; ++i) std::memset((*host)->SlotData(i), int(i), kSlotBytes);
  Result<PinnedBuffer> pinned = PinnedBuffer::Allocate(size_t{kSlots} * kSlotBytes);
  KV_BENCH_CHECK(pinned.status());
  std::memset(pinned->data(), 1, pinned->size());
  DeviceBuffer plain_device = MustAllocate(size_t{kSlots} * kSlotBytes);
  std::string out =
      "\"copy\": {\"bytes_per_pass\": " + std::to_string(uint64_t{kSlots} * kSlotBytes) +
      ", \"region_bytes\": " + std::to_string(kSlotBytes) + ", ";
  out += Field("tier_h2d_gbps", TierCopyGbps(**device, **host, CopyKind::kHostToDevice)) + ", ";
  out += Field("tier_d2h_gbps", TierCopyGbps(**device, **host, CopyKind::kDeviceToHost)) + ", ";
  out += Field("plain_h2d_gbps", PlainCopyGbps(*pinned, plain_device, true)) + ", ";
  out += Field("plain_d2h_gbps", PlainCopyGbps(*pinned, plain_device, false)) + "}";
  return out;
}

struct KernelBench {
  static constexpr uint32_t kBlocks = 256;
  codecs::BlockGeometry g{.tokens = 256, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF16};
  size_t raw_bytes = g.raw_bytes();
  size_t stage_bytes = codecs::ComputeQuantLayout(g, 8, 32).total_bytes;
  DeviceBuffer raw;
  DeviceBuffer out;
  DeviceBuffer stage;
  DeviceBuffer raw_list, out_list, stage_list, flags;
  Result<CudaStream> stream = CudaStream::Create();

  KernelBench() {
    KV_BENCH_CHECK(stream.status());
    raw = MustAllocate(kBlocks * raw_bytes);
    out = MustAllocate(kBlocks * raw_bytes);
    stage = MustAllocate(kBlocks * stage_bytes);
    std::vector<uint16_t> block(raw_bytes / 2);
    uint32_t x = 12345;
    for (uint16_t& h : block) {  // Small random FP16 values (exponent 12..15, random mantissa).
      x = x * 1664525u + 1013904223u;
      h = static_cast<uint16_t>(((x >> 16) & 0x83ffu) | (0x3000u + ((x >> 8) & 0x0c00u)));
    }
    std::vector<std::byte*> raws, outs, stages;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      KV_BENCH_CHECK(CudaStatus(
          cudaMemcpy(raw.data() + b * raw_bytes, block.data(), raw_bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy"));
      raws.push_back(raw.data() + b * raw_bytes);
      outs.push_back(out.data() + b * raw_bytes);
      stages.push_back(stage.data() + b * stage_bytes);
    }
    raw_list = UploadArray(raws);
    out_list = UploadArray(outs);
    stage_list = UploadArray(stages);
    flags = UploadArray(std::vector<uint32_t>(kBlocks, 0));
  }

  QuantBatch Batch(uint32_t bits, const DeviceBuffer& raws) const {
    return {.geometry = g,
            .bits = bits,
            .group_size = 32,
            .raw = reinterpret_cast<std::byte* const*>(raws.data()),
            .stage = reinterpret_cast<std::byte* const*>(stage_list.data()),
            .count = kBlocks,
            .flags = reinterpret_cast<uint32_t*>(flags.data())};
  }

  double Gather(PagedLayoutKind kind, TransferDirection direction) {
    const PagedGeometry pg{
        .kind = kind, .page_tokens = 16, .kv_heads = 8, .head_dim = 128, .elem_bytes = 2};
    const uint32_t pages = kBlocks * (g.tokens / pg.page_tokens);
    DeviceBuffer k = MustAllocate(pages * pg.page_elements() * 2);
    DeviceBuffer v = MustAllocate(pages * pg.page_elements() * 2);
    std::vector<int32_t> table(pages);
    for (uint32_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>((i * 7919u) % pages);
    DeviceBuffer d_table = UploadArray(table);
    const PagedTransfer t{.geometry = pg,
                          .k_cache = k.data(),
                          .v_cache = v.data(),
                          .pages_total = pages,
                          .block_table = reinterpret_cast<const int32_t*>(d_table.data()),
                          .blocks = reinterpret_cast<std::byte* const*>(out_list.data()),
                          .block_count = kBlocks,
                          .block_tokens = g.tokens};
    return KernelGbps(stream->get(), static_cast<double>(kBlocks * raw_bytes), [&] {
      return direction == TransferDirection::kGather ? GatherPagedBlocks(t, stream->get())
                                                     : ScatterPagedBlocks(t, stream->get());
    });
  }

  std::string Run() {
    const double bytes = static_cast<double>(kBlocks * raw_bytes);
    cudaStream_t s = stream->get();
    std::string r = "\"kernels\": {\"blocks\": " + std::to_string(kBlocks) + ", \"block\": \"" +
                    g.ToString() + "\", ";
    for (uint32_t bits : {8u, 4u}) {
      const std::string q = "int" + std::to_string(bits);
      r += Field((q + "_quantize_gbps").c_str(),
                 KernelGbps(s, bytes, [&] { return QuantizeBlocks(Batch(bits, raw_list), s); })) +
           ", ";
      r += Field((q + "_dequantize_gbps").c_str(),
                 KernelGbps(s, bytes, [&] { return DequantizeBlocks(Batch(bits, out_list), s); })) +
           ", ";
    }
    r +=
        Field("shuffle_gbps", KernelGbps(s, bytes,
                                         [&] {
                                           return ShufflePlanes(DType::kF16, raw.data(),
                                                                kBlocks * raw_bytes, out.data(), s);
                                         })) +
        ", ";
    r += Field("unshuffle_gbps", KernelGbps(s, bytes,
                                            [&] {
                                              return UnshufflePlanes(DType::kF16, raw.data(),
                                                                     kBlocks * raw_bytes,
                                                                     out.data(), s);
                                            })) +
         ", ";
    r += Field("gather_flash_gbps", Gather(PagedLayoutKind::kFlash, TransferDirection::kGather)) +
         ", ";
    r += Field("scatter_flash_gbps", Gather(PagedLayoutKind::kFlash, TransferDirection::kScatter)) +
         ", ";
    r += Field("gather_vllm_legacy_gbps",
               Gather(PagedLayoutKind::kVllmLegacy, TransferDirection::kGather)) +
         ", ";
    r += Field("scatter_vllm_legacy_gbps",
               Gather(PagedLayoutKind::kVllmLegacy, TransferDirection::kScatter)) +
         "}";
    return r;
  }
};

int Main() {
  const Result<int> devices = CudaDeviceCount();
  if (!devices.ok()) {
    std::fprintf(stderr, "cuda_bench: no usable GPU: %s\n", devices.status().ToString().c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  KV_BENCH_CHECK(CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  const std::string copy = CopyBench();
  KernelBench kernels;
  const std::string kernel_results = kernels.Run();
  std::printf("{\"device\": \"%s\", %s, %s}\n", prop.name, copy.c_str(), kernel_results.c_str());
  return 0;
}

}  // namespace
}  // namespace kvtier::cuda

int main() { return kvtier::cuda::Main(); }
