// GPU kernels of the CUDA backend, as asynchronous launches on a caller's stream:
//   - GatherPagedBlocks / ScatterPagedBlocks: an engine's paged KV cache (vLLM legacy or
//     FlashAttention layout, paged_layout.h) <-> kvtier's canonical blocks, through a block table;
//   - QuantizeBlocks / DequantizeBlocks: the int8/int4 codecs' stage payload (codecs'
//     QuantLayout) computed on the GPU, byte-identical to the CPU codec (codecs/quantize.h), so
//     only compressed bytes cross PCIe;
//   - ShufflePlanes / UnshufflePlanes: the byte planes of shuffle-zstd (zstd itself stays on the
//     CPU).
// Every pointer argument is a device address (device memory, or mapped pinned memory) and every
// array of block pointers is itself in device memory. The functions return once the work is
// queued; results are valid when `stream` reaches that point (synchronize, or fence another
// stream with cudaStreamWaitEvent). Argument errors are InvalidArgument before anything is
// queued; launch errors name the CUDA call. Data errors of the codecs (a NaN to quantize, a
// corrupt scale to dequantize) are reported per block in `flags`, read with QuantFlagsStatus().
//
// Thread safety: any thread may launch; launches on one stream run in order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "codecs/block_geometry.h"
#include "cuda/kernel_launch.h"
#include "cuda/paged_layout.h"
#include "kvtier/result.h"

namespace kvtier::cuda {

// Blocks per batched launch (the grid's y dimension).
inline constexpr uint32_t kKernelBatchBlocksMax = 65535;

Status GatherPagedBlocks(const PagedTransfer& transfer, cudaStream_t stream);
Status ScatterPagedBlocks(const PagedTransfer& transfer, cudaStream_t stream);

// `bytes` of 16-bit (kF16, kBF16) or 32-bit (kF32) elements into byte planes, and back, exactly
// as codecs' Shuffle16/Shuffle32 over the whole raw block. `src` and `dst` must not overlap.
Status ShufflePlanes(DType dtype, const std::byte* src, size_t bytes, std::byte* dst,
                     cudaStream_t stream);
Status UnshufflePlanes(DType dtype, const std::byte* src, size_t bytes, std::byte* dst,
                       cudaStream_t stream);

struct QuantBatch {
  codecs::BlockGeometry geometry;
  uint32_t bits = 8;         // 8 (int8) or 4 (int4).
  uint32_t group_size = 32;  // codecs::kQuantGroupSizeMin..kQuantGroupSizeMax.
  // [count] raw blocks (geometry.raw_bytes() each, 4-byte aligned): input of QuantizeBlocks,
  // output of DequantizeBlocks.
  std::byte* const* raw = nullptr;
  // [count] stage payloads (ComputeQuantLayout(...).total_bytes each, 2-byte aligned).
  std::byte* const* stage = nullptr;
  uint32_t count = 0;  // At most kKernelBatchBlocksMax.
  // [count] device flags, zeroed by the launch (cudaMemsetAsync) and OR-ed by the kernels.
  uint32_t* flags = nullptr;
};

Status QuantizeBlocks(const QuantBatch& batch, cudaStream_t stream);
Status DequantizeBlocks(const QuantBatch& batch, cudaStream_t stream);

// The Status the CPU codec would have returned for a block, from its flag (copied to the host
// after the stream finished): InvalidArgument for input the quantizer refuses, Corruption for
// an invalid stored scale or zero point.
Status QuantFlagsStatus(uint32_t flag);

namespace internal {
// The kernels' arguments for `batch` (offsets from codecs' ComputeQuantLayout); InvalidArgument
// for a bad geometry, bits, group size or block count. Exposed for the host-run tests.
Result<QuantArgs> MakeQuantArgs(const QuantBatch& batch);
}  // namespace internal

}  // namespace kvtier::cuda
