// INT8/INT4 KIVI quantization of canonical blocks into the codecs layer's stage payload, and back,
// one thread per index; the bodies are quant_math.h's (shared with the host run that the tests
// compare against the CPU codec). The CPU codec (src/codecs/quantize.cc, kernels_scalar.cc)
// defines the result bit for bit:
//   group min/max scanned in the CPU's order with the same comparisons (this fixes which zero
//   sign survives), scale = f16((max - min) / qmax), zero = f16(min + 0), inv = 1 / f32(scale),
//   q = clamp(rint((x - zero) * inv), 0, qmax), x' = f32(q) * scale + zero.
// -fmad=false (src/cuda/CMakeLists.txt) backs up the _rn intrinsics: nothing is fused.
#include "cuda/quant_math.h"

namespace kvtier::cuda::internal {
namespace {

constexpr uint32_t kThreads = 256;

__global__ void KeyParamsKernel(QuantArgs a) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= uint64_t{a.key_groups} * a.channels) return;
  const uint32_t flags = KeyParamsAt(a, blockIdx.y, i);
  if (flags != 0) atomicOr(&a.flags[blockIdx.y], flags);
}

__global__ void ValueParamsKernel(QuantArgs a) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= uint64_t{a.tokens} * a.value_groups) return;
  const uint32_t flags = ValueParamsAt(a, blockIdx.y, i);
  if (flags != 0) atomicOr(&a.flags[blockIdx.y], flags);
}

__global__ void CodesKernel(QuantArgs a) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= CodeBytes(a)) return;
  CodeByteAt(a, blockIdx.y, blockIdx.z, i);
}

__global__ void DequantizeKernel(QuantArgs a) {
  const uint64_t e = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= uint64_t{a.tokens} * a.channels) return;
  const uint32_t flags = DequantizeAt(a, blockIdx.y, blockIdx.z, e);
  if (flags != 0) atomicOr(&a.flags[blockIdx.y], flags);
}

dim3 Grid(uint64_t threads_total, uint32_t y, uint32_t z) {
  return dim3(static_cast<unsigned>((threads_total + kThreads - 1) / kThreads), y, z);
}

}  // namespace

cudaError_t LaunchQuantize(const QuantArgs& a, cudaStream_t stream) {
  if (a.count == 0) return cudaSuccess;
  // Parameters first: the codes kernel reads them back from the stage (the FP16 values actually
  // stored, as the CPU quantizer does), and stream order makes that safe.
  const dim3 keys = Grid(uint64_t{a.key_groups} * a.channels, a.count, 1);
  const dim3 values = Grid(uint64_t{a.tokens} * a.value_groups, a.count, 1);
  KeyParamsKernel<<<keys, kThreads, 0, stream>>>(a);
  ValueParamsKernel<<<values, kThreads, 0, stream>>>(a);
  CodesKernel<<<Grid(CodeBytes(a), a.count, 2), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchDequantize(const QuantArgs& a, cudaStream_t stream) {
  if (a.count == 0) return cudaSuccess;
  const dim3 grid = Grid(uint64_t{a.tokens} * a.channels, a.count, 2);
  DequantizeKernel<<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda::internal
