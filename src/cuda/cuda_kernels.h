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
#include <vector>

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

// Decode attention over INT8/INT4 blocks read in place on the GPU (quant_attention_kernels.cu):
// the contract of runtime/quant_attention.h's AttendQuant (its reference semantics: each code
// dequantized as code * scale + zero in float, in registers, never written out). One query
// token, GQA, outputs defined exactly as there:
//   out[h * head_dim + d], run_mass[i], head_lse[h], run_lse[i * n_heads + h].
// q, out, the optional outputs and every payload are device addresses; `runs` is a host array,
// copied into the scratch by the call (which returns once it is copied). A first version: one
// thread per index and pass, as the codec kernels, unmeasured on a GPU so far (docs/cuda.md).
// Preconditions (not checkable on the host): each payload holds its block's whole stage payload
// (QuantLayout for block_tokens tokens; runtime's QuantRunFromEncodedBlock checks an encoded
// block's header on the CPU). Scales and zero points are trusted, as on the CPU: a corrupt one
// gives NaN or wrong outputs, never an access outside the payload (the codes index nothing).
struct QuantAttendRunRef {
  const std::byte* payload = nullptr;  // An encoded int8/int4 block's stage payload (the bytes
                                       // after its header; codecs' QuantLayout), no zstd;
                                       // 2-byte aligned.
  uint32_t block_tokens = 0;           // Tokens the block was encoded with.
  uint32_t rows = 0;                   // 1..block_tokens: the run is the first `rows` tokens.
};

struct QuantAttendBatch {
  uint32_t n_heads = 0;     // Query heads; a multiple of n_kv_heads.
  uint32_t n_kv_heads = 0;  // >= 1.
  uint32_t head_dim = 0;    // >= 1; n_kv_heads * head_dim even for INT4.
  uint32_t bits = 8;        // 8 or 4.
  uint32_t group_size = 32;  // The codec's group size (codecs::kQuantGroupSizeMin..Max).
  const float* q = nullptr;  // [n_heads][head_dim], scaled by the caller.
  std::span<const QuantAttendRunRef> runs;  // >= 1 run.
  float* out = nullptr;       // [n_heads][head_dim]
  float* run_mass = nullptr;  // [n_runs], or nullptr.
  float* head_lse = nullptr;  // [n_heads], or nullptr.
  float* run_lse = nullptr;   // [n_runs][n_heads], or nullptr.
  // At least QuantAttendScratchBytes(*this) bytes of device memory, 8-byte aligned (cudaMalloc's
  // 256 is), used by nothing else until the stream has passed this call.
  std::byte* scratch = nullptr;
  size_t scratch_bytes = 0;  // Its size: a smaller scratch is refused.
};

// Scratch bytes AttendQuantRuns needs for `batch` (its shape and its runs' rows).
size_t QuantAttendScratchBytes(const QuantAttendBatch& batch);

// InvalidArgument (before anything is queued) for a bad shape, bits, group size or run, a null
// or misaligned pointer, or a scratch smaller than QuantAttendScratchBytes; a CUDA error names
// the call.
Status AttendQuantRuns(const QuantAttendBatch& batch, cudaStream_t stream);

// The Status the CPU codec would have returned for a block, from its flag (copied to the host
// after the stream finished): InvalidArgument for input the quantizer refuses, Corruption for
// an invalid stored scale or zero point.
Status QuantFlagsStatus(uint32_t flag);

namespace internal {
// The kernels' arguments for `batch` (offsets from codecs' ComputeQuantLayout); InvalidArgument
// for a bad geometry, bits, group size or block count. Exposed for the host-run tests.
Result<QuantArgs> MakeQuantArgs(const QuantBatch& batch);

// AttendQuantRuns' validated arguments: the launch (its arrays carved from batch.scratch, the
// run table at its start) and the run table to copy there. Exposed for the host-run tests.
struct QuantAttendPlan {
  QuantAttendLaunch launch;
  std::vector<QuantAttendRun> runs;
};
Result<QuantAttendPlan> PlanQuantAttend(const QuantAttendBatch& batch);
}  // namespace internal

}  // namespace kvtier::cuda
