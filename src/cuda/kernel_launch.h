// Internal to the cuda layer: the plain-data arguments and launchers of the kernels in
// paged_kernels.cu and codec_kernels.cu. They take no kvtier types beyond paged_layout.h so the
// .cu files stay small to compile; cuda_kernels.cc validates arguments, derives the payload layout
// from the codecs layer and turns launch errors into Status (the public API is cuda_kernels.h).
//
// Thread safety: launchers may be called from any thread; they only enqueue work on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/paged_layout.h"

namespace kvtier::cuda::internal {

// Flags a quantize/dequantize kernel ORs into flags[block] (0 = OK).
inline constexpr uint32_t kFlagNotQuantizable = 1;  // NaN, Inf or beyond +-65504 in the input.
inline constexpr uint32_t kFlagBadParams = 2;       // Stored scale/zero not finite or scale < 0.

// Element types, numbered as core's DType.
inline constexpr uint32_t kElemF16 = 1;
inline constexpr uint32_t kElemBF16 = 2;
inline constexpr uint32_t kElemF32 = 3;

struct QuantArgs {
  uint32_t tokens = 0;
  uint32_t channels = 0;  // kv_heads * head_dim.
  uint32_t group_size = 0;
  uint32_t bits = 8;  // 8 or 4.
  uint32_t elem = kElemF16;
  uint32_t key_groups = 0;
  uint32_t value_groups = 0;
  uint64_t k_scale_offset = 0;  // Byte offsets in the stage payload (codecs' QuantLayout).
  uint64_t k_zero_offset = 0;
  uint64_t v_scale_offset = 0;
  uint64_t v_zero_offset = 0;
  uint64_t k_codes_offset = 0;
  uint64_t v_codes_offset = 0;
  std::byte* const* raw = nullptr;  // [count] raw blocks (input of quantize, output of dequantize).
  std::byte* const* stage = nullptr;  // [count] stage payloads.
  uint32_t count = 0;
  uint32_t* flags = nullptr;  // [count]; the caller zeroes them before quantize/dequantize.
};

// One run of the quantized attention kernels (quant_attention_kernels.cu): the first `rows`
// tokens of a block's int8/int4 stage payload (2-byte aligned; the offsets, in bytes from
// `payload`, are codecs' QuantLayout for the block's token count).
struct QuantAttendRun {
  const std::byte* payload = nullptr;
  uint32_t rows = 0;
  uint64_t k_scale_offset = 0;
  uint64_t k_zero_offset = 0;
  uint64_t v_scale_offset = 0;
  uint64_t v_zero_offset = 0;
  uint64_t k_codes_offset = 0;
  uint64_t v_codes_offset = 0;
};

// The quantized attention of one query token (quant_attention_math.h), every array in the
// memory the kernels run on.
struct QuantAttendLaunch {
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t bits = 8;
  uint32_t group_size = 0;
  uint32_t channels = 0;      // n_kv_heads * head_dim.
  uint32_t value_groups = 0;  // ceil(channels / group_size): value parameters per token.
  uint32_t n_runs = 0;
  uint32_t max_rows = 0;  // The longest run: the row stride of `scores`.
  const float* q = nullptr;               // [n_heads][head_dim]
  const QuantAttendRun* runs = nullptr;   // [n_runs]
  float* scores = nullptr;    // [n_runs][n_heads][max_rows]
  float* partial = nullptr;   // [n_runs][n_heads][head_dim]
  float* run_lse = nullptr;   // [n_runs][n_heads]
  float* head_lse = nullptr;  // [n_heads]
  float* out = nullptr;       // [n_heads][head_dim]
  float* run_mass = nullptr;  // [n_runs], or nullptr.
};

cudaError_t LaunchPagedTransfer(const PagedTransfer& transfer, TransferDirection direction,
                                cudaStream_t stream);
// Byte planes of `n` elements of `elem_bytes` (2 or 4); `inverse` undoes them.
cudaError_t LaunchShuffle(const std::byte* src, std::byte* dst, uint64_t n, uint32_t elem_bytes,
                          bool inverse, cudaStream_t stream);
cudaError_t LaunchQuantize(const QuantArgs& args, cudaStream_t stream);
cudaError_t LaunchDequantize(const QuantArgs& args, cudaStream_t stream);
cudaError_t LaunchQuantAttend(const QuantAttendLaunch& args, cudaStream_t stream);

}  // namespace kvtier::cuda::internal
