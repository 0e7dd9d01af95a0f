// Gather/scatter between engines' paged KV caches and canonical blocks, and byte-plane shuffles.
// One thread per element; the index math is paged_layout.h's, checked on the host by
// paged_layout_test.cc and on the GPU against the host reference by cuda_kernels_test.cc.
#include "cuda/kernel_launch.h"

namespace kvtier::cuda::internal {
namespace {

constexpr uint32_t kThreads = 256;

template <typename T>
__global__ void PagedTransferKernel(PagedTransfer t, TransferDirection direction) {
  const uint64_t e = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= t.block_elements()) return;
  const PagedGeometry& g = t.geometry;
  const uint32_t b = blockIdx.y;
  const auto d = static_cast<uint32_t>(e % g.head_dim);
  const auto h = static_cast<uint32_t>((e / g.head_dim) % g.kv_heads);
  const uint64_t per_half = uint64_t{t.block_tokens} * g.kv_heads * g.head_dim;
  const auto tok = static_cast<uint32_t>((e % per_half) / (uint64_t{g.kv_heads} * g.head_dim));
  const auto kv = static_cast<uint32_t>(e / per_half);
  const int32_t page = t.block_table[uint64_t{b} * t.pages_per_block() + tok / g.page_tokens];
  if (page < 0 || static_cast<uint32_t>(page) >= t.pages_total) return;
  const uint32_t slot = tok % g.page_tokens;
  const auto p = static_cast<uint64_t>(page);
  T* cache = reinterpret_cast<T*>(kv == 0 ? t.k_cache : t.v_cache);
  const uint64_t paged =
      kv == 0 ? PagedKeyIndex(g, p, slot, h, d) : PagedValueIndex(g, p, slot, h, d);
  T* block = reinterpret_cast<T*>(t.blocks[b]);
  if (direction == TransferDirection::kGather) {
    block[e] = cache[paged];
  } else {
    cache[paged] = block[e];
  }
}

template <uint32_t kPlanes>
__global__ void ShuffleKernel(const uint8_t* src, uint8_t* dst, uint64_t n, bool inverse) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
#pragma unroll
  for (uint32_t b = 0; b < kPlanes; ++b) {
    if (inverse) {
      dst[kPlanes * i + b] = src[b * n + i];
    } else {
      dst[b * n + i] = src[kPlanes * i + b];
    }
  }
}

dim3 Grid(uint64_t threads_total, uint32_t y) {
  return dim3(static_cast<unsigned>((threads_total + kThreads - 1) / kThreads), y, 1);
}

}  // namespace

cudaError_t LaunchPagedTransfer(const PagedTransfer& t, TransferDirection direction,
                                cudaStream_t stream) {
  if (t.block_count == 0) return cudaSuccess;
  const dim3 grid = Grid(t.block_elements(), t.block_count);
  if (t.geometry.elem_bytes == 2) {
    PagedTransferKernel<uint16_t><<<grid, kThreads, 0, stream>>>(t, direction);
  } else {
    PagedTransferKernel<uint32_t><<<grid, kThreads, 0, stream>>>(t, direction);
  }
  return cudaGetLastError();
}

cudaError_t LaunchShuffle(const std::byte* src, std::byte* dst, uint64_t n, uint32_t elem_bytes,
                          bool inverse, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto* s = reinterpret_cast<const uint8_t*>(src);
  auto* d = reinterpret_cast<uint8_t*>(dst);
  if (elem_bytes == 2) {
    ShuffleKernel<2><<<Grid(n, 1), kThreads, 0, stream>>>(s, d, n, inverse);
  } else {
    ShuffleKernel<4><<<Grid(n, 1), kThreads, 0, stream>>>(s, d, n, inverse);
  }
  return cudaGetLastError();
}

}  // namespace kvtier::cuda::internal
