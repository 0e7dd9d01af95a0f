#include "cuda/cuda_kernels.h"

#include <algorithm>
#include <limits>
#include <string>

#include "codecs/block_format.h"
#include "codecs/codec_params.h"
#include "core/aligned_buffer.h"
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

namespace {

// Each array of the scratch starts on a 256-byte boundary, as cudaMalloc's allocations do.
constexpr size_t kScratchAlign = 256;

size_t AlignUp(size_t n) { return kvtier::AlignUp(n, kScratchAlign); }

// The longest run's rows, 0 for none.
uint32_t MaxRows(std::span<const QuantAttendRunRef> runs) {
  uint32_t rows = 0;
  for (const QuantAttendRunRef& r : runs) rows = std::max(rows, r.rows);
  return rows;
}

// Byte offsets of the scratch's arrays: the run table, scores, partials, run and head lse.
struct ScratchLayout {
  size_t scores = 0;
  size_t partial = 0;
  size_t run_lse = 0;
  size_t head_lse = 0;
  size_t total = 0;
};

ScratchLayout LayOut(const QuantAttendBatch& b) {
  const size_t n_runs = b.runs.size();
  ScratchLayout l;
  l.scores = AlignUp(n_runs * sizeof(internal::QuantAttendRun));
  l.partial = l.scores + AlignUp(n_runs * b.n_heads * size_t{MaxRows(b.runs)} * sizeof(float));
  l.run_lse = l.partial + AlignUp(n_runs * b.n_heads * size_t{b.head_dim} * sizeof(float));
  l.head_lse = l.run_lse + AlignUp(n_runs * b.n_heads * sizeof(float));
  l.total = l.head_lse + AlignUp(size_t{b.n_heads} * sizeof(float));
  return l;
}

Status QuantAttendError(const std::string& problem) {
  return Status::InvalidArgument("quantized attention: " + problem);
}

// PlanQuantAttend's checks of the batch as a whole, before its runs'.
Status CheckQuantAttendBatch(const QuantAttendBatch& b) {
  if (b.n_heads == 0 || b.n_kv_heads == 0 || b.n_heads % b.n_kv_heads != 0) {
    return QuantAttendError("n_heads " + std::to_string(b.n_heads) +
                            " is not a positive multiple of n_kv_heads " +
                            std::to_string(b.n_kv_heads));
  }
  if (b.bits != 8 && b.bits != 4) return QuantAttendError("bits must be 8 or 4");
  if (b.group_size < codecs::kQuantGroupSizeMin || b.group_size > codecs::kQuantGroupSizeMax) {
    return QuantAttendError("group_size " + std::to_string(b.group_size) + " out of range");
  }
  if (b.q == nullptr || b.out == nullptr || b.scratch == nullptr) {
    return QuantAttendError("null q, out or scratch");
  }
  if (reinterpret_cast<uintptr_t>(b.scratch) % alignof(internal::QuantAttendRun) != 0) {
    return QuantAttendError("scratch is not 8-byte aligned");
  }
  if (b.runs.empty()) return QuantAttendError("no runs");
  if (b.runs.size() > std::numeric_limits<uint32_t>::max()) {
    return QuantAttendError("too many runs");
  }
  return Status::Ok();
}

// Run `i` of the batch, checked, with its payload's offsets.
Result<internal::QuantAttendRun> PlanQuantAttendRun(const QuantAttendBatch& b, size_t i) {
  const QuantAttendRunRef& r = b.runs[i];
  const codecs::BlockGeometry g{.tokens = r.block_tokens, .kv_heads = b.n_kv_heads,
                                .head_dim = b.head_dim, .dtype = DType::kF16};
  if (Status st = g.Validate(); !st.ok()) {
    return QuantAttendError("run " + std::to_string(i) + ": " + st.message());
  }
  if (r.payload == nullptr || reinterpret_cast<uintptr_t>(r.payload) % 2 != 0) {
    return QuantAttendError("run " + std::to_string(i) + " has a null or odd payload address");
  }
  if (r.rows == 0 || r.rows > r.block_tokens) {
    return QuantAttendError("run " + std::to_string(i) + " has rows " + std::to_string(r.rows) +
                            " outside 1.." + std::to_string(r.block_tokens));
  }
  const codecs::QuantLayout l = codecs::ComputeQuantLayout(g, b.bits, b.group_size);
  return internal::QuantAttendRun{.payload = r.payload,
                                  .rows = r.rows,
                                  .k_scale_offset = l.k_scale_offset,
                                  .k_zero_offset = l.k_zero_offset,
                                  .v_scale_offset = l.v_scale_offset,
                                  .v_zero_offset = l.v_zero_offset,
                                  .k_codes_offset = l.k_codes_offset,
                                  .v_codes_offset = l.v_codes_offset};
}

}  // namespace

Result<internal::QuantAttendPlan> internal::PlanQuantAttend(const QuantAttendBatch& b) {
  if (Status st = CheckQuantAttendBatch(b); !st.ok()) return st;
  internal::QuantAttendPlan plan;
  plan.runs.reserve(b.runs.size());
  for (size_t i = 0; i < b.runs.size(); ++i) {
    KV_ASSIGN_OR_RETURN(const internal::QuantAttendRun run, PlanQuantAttendRun(b, i));
    plan.runs.push_back(run);
  }
  const uint64_t channels = uint64_t{b.n_kv_heads} * b.head_dim;
  if (b.bits == 4 && channels % 2 != 0) {
    return QuantAttendError("INT4 needs an even n_kv_heads * head_dim");
  }
  // Every pass's thread count must fit a one-dimensional grid of 256-thread blocks.
  constexpr uint64_t kMaxThreads = uint64_t{std::numeric_limits<int32_t>::max()} * 256;
  const uint64_t scores = uint64_t{b.runs.size()} * b.n_heads * MaxRows(b.runs);
  const uint64_t partials = uint64_t{b.runs.size()} * b.n_heads * b.head_dim;
  if (scores > kMaxThreads || partials > kMaxThreads) return QuantAttendError("too large");
  const ScratchLayout s = LayOut(b);
  if (b.scratch_bytes < s.total) {
    return QuantAttendError("scratch of " + std::to_string(b.scratch_bytes) + " bytes, " +
                            std::to_string(s.total) + " needed (QuantAttendScratchBytes)");
  }
  auto at = [&](size_t offset) { return reinterpret_cast<float*>(b.scratch + offset); };
  plan.launch = internal::QuantAttendLaunch{
      .n_heads = b.n_heads,
      .n_kv_heads = b.n_kv_heads,
      .head_dim = b.head_dim,
      .bits = b.bits,
      .group_size = b.group_size,
      .channels = static_cast<uint32_t>(channels),
      .value_groups = static_cast<uint32_t>((channels + b.group_size - 1) / b.group_size),
      .n_runs = static_cast<uint32_t>(b.runs.size()),
      .max_rows = MaxRows(b.runs),
      .q = b.q,
      .runs = reinterpret_cast<const internal::QuantAttendRun*>(b.scratch),
      .scores = at(s.scores),
      .partial = at(s.partial),
      .run_lse = b.run_lse != nullptr ? b.run_lse : at(s.run_lse),
      .head_lse = b.head_lse != nullptr ? b.head_lse : at(s.head_lse),
      .out = b.out,
      .run_mass = b.run_mass};
  return plan;
}

size_t QuantAttendScratchBytes(const QuantAttendBatch& batch) { return LayOut(batch).total; }

Status AttendQuantRuns(const QuantAttendBatch& batch, cudaStream_t stream) {
  KV_ASSIGN_OR_RETURN(const internal::QuantAttendPlan plan, internal::PlanQuantAttend(batch));
  // From pageable memory: returns once the table is staged, so `plan` may go.
  KV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(batch.scratch, plan.runs.data(),
                                          plan.runs.size() * sizeof(internal::QuantAttendRun),
                                          cudaMemcpyHostToDevice, stream));
  KV_CUDA_RETURN_IF_ERROR(internal::LaunchQuantAttend(plan.launch, stream));
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
