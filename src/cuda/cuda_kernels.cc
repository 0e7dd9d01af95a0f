#include "cuda/cuda_kernels.h"

#include <string>

#include "codecs/block_format.h"
#include "codecs/codec_params.h"
#include "cuda/cuda_status.h"
#include "cuda/kernel_launch.h"

namespace kvtier::cuda {
namespace {

Status CheckTransfer(const PagedTransfer& t) {
  if (const char* problem = CheckPagedTransfer(t)) {
    return Status::InvalidArgument(std::string("paged transfer: ") + problem);
  }
  if (t.block_count > kKernelBatchBlocksMax) {
    return Status::InvalidArgument("paged transfer: more than kKernelBatchBlocksMax blocks");
  }
  return Status::Ok();
}

}  // namespace

Result<internal::QuantArgs> internal::MakeQuantArgs(const QuantBatch& b) {
  KV_RETURN_IF_ERROR(b.geometry.Validate());
  if (b.bits != 8 && b.bits != 4) return Status::InvalidArgument("quantize: bits must be 8 or 4");
  if (b.group_size < codecs::kQuantGroupSizeMin || b.group_size > codecs::kQuantGroupSizeMax) {
    return Status::InvalidArgument("quantize: group_size " + std::to_string(b.group_size) +
                                   " out of range");
  }
  if (b.count > kKernelBatchBlocksMax) {
    return Status::InvalidArgument("quantize: more than kKernelBatchBlocksMax blocks");
  }
  if (b.count > 0 && (b.raw == nullptr || b.stage == nullptr || b.flags == nullptr)) {
    return Status::InvalidArgument("quantize: null raw, stage or flags array");
  }
  const codecs::QuantLayout l = codecs::ComputeQuantLayout(b.geometry, b.bits, b.group_size);
  return internal::QuantArgs{.tokens = b.geometry.tokens,
                             .channels = static_cast<uint32_t>(b.geometry.channels()),
                             .group_size = b.group_size,
                             .bits = b.bits,
                             .elem = static_cast<uint32_t>(b.geometry.dtype),
                             .key_groups = static_cast<uint32_t>(l.key_groups),
                             .value_groups = static_cast<uint32_t>(l.value_groups),
                             .k_scale_offset = l.k_scale_offset,
                             .k_zero_offset = l.k_zero_offset,
                             .v_scale_offset = l.v_scale_offset,
                             .v_zero_offset = l.v_zero_offset,
                             .k_codes_offset = l.k_codes_offset,
                             .v_codes_offset = l.v_codes_offset,
                             .raw = b.raw,
                             .stage = b.stage,
                             .count = b.count,
                             .flags = b.flags};
}

namespace {

Status Shuffle(DType dtype, const std::byte* src, size_t bytes, std::byte* dst, bool inverse,
               cudaStream_t stream) {
  const uint32_t elem = DTypeSizeBytes(dtype);
  if (elem == 0) return Status::InvalidArgument("shuffle: unknown dtype");
  if (bytes % elem != 0) return Status::InvalidArgument("shuffle: bytes not a multiple of dtype");
  if (bytes > 0 && (src == nullptr || dst == nullptr)) {
    return Status::InvalidArgument("shuffle: null pointer");
  }
  KV_CUDA_RETURN_IF_ERROR(internal::LaunchShuffle(src, dst, bytes / elem, elem, inverse, stream));
  return Status::Ok();
}

}  // namespace

Status GatherPagedBlocks(const PagedTransfer& transfer, cudaStream_t stream) {
  KV_RETURN_IF_ERROR(CheckTransfer(transfer));
  KV_CUDA_RETURN_IF_ERROR(
      internal::LaunchPagedTransfer(transfer, TransferDirection::kGather, stream));
  return Status::Ok();
}

Status ScatterPagedBlocks(const PagedTransfer& transfer, cudaStream_t stream) {
  KV_RETURN_IF_ERROR(CheckTransfer(transfer));
  KV_CUDA_RETURN_IF_ERROR(
      internal::LaunchPagedTransfer(transfer, TransferDirection::kScatter, stream));
  return Status::Ok();
}

Status ShufflePlanes(DType dtype, const std::byte* src, size_t bytes, std::byte* dst,
                     cudaStream_t stream) {
  return Shuffle(dtype, src, bytes, dst, /*inverse=*/false, stream);
}

Status UnshufflePlanes(DType dtype, const std::byte* src, size_t bytes, std::byte* dst,
                       cudaStream_t stream) {
  return Shuffle(dtype, src, bytes, dst, /*inverse=*/true, stream);
}

Status QuantizeBlocks(const QuantBatch& batch, cudaStream_t stream) {
  KV_ASSIGN_OR_RETURN(const internal::QuantArgs args, internal::MakeQuantArgs(batch));
  if (args.count == 0) return Status::Ok();
  KV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(args.flags, 0, sizeof(uint32_t) * args.count, stream));
  KV_CUDA_RETURN_IF_ERROR(internal::LaunchQuantize(args, stream));
  return Status::Ok();
}

Status DequantizeBlocks(const QuantBatch& batch, cudaStream_t stream) {
  KV_ASSIGN_OR_RETURN(const internal::QuantArgs args, internal::MakeQuantArgs(batch));
  if (args.count == 0) return Status::Ok();
  KV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(args.flags, 0, sizeof(uint32_t) * args.count, stream));
  KV_CUDA_RETURN_IF_ERROR(internal::LaunchDequantize(args, stream));
  return Status::Ok();
}

Status QuantFlagsStatus(uint32_t flag) {
  if ((flag & internal::kFlagNotQuantizable) != 0) {
    return Status::InvalidArgument("int quantization needs finite values within the FP16 range");
  }
  if ((flag & internal::kFlagBadParams) != 0) {
    return Status::Corruption("encoded block: invalid quantization scale or zero point");
  }
  return Status::Ok();
}

}  // namespace kvtier::cuda
