// Decode attention over INT8/INT4 blocks read in place on the GPU, one thread per index; the
// bodies are quant_attention_math.h's (shared with the host run the tests compare against the
// CPU reference, runtime's ref::AttendQuant). -fmad=false (src/cuda/CMakeLists.txt): nothing is
// fused, as on the host.
#include "cuda/quant_attention_math.h"

namespace kvtier::cuda::internal {
namespace {

constexpr uint32_t kThreads = 256;

__global__ void ScoreKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) ScoreAt(a, x);
}

__global__ void RunLseKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) RunLseAt(a, x);
}

__global__ void HeadLseKernel(QuantAttendLaunch a) {
  const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < a.n_heads) HeadLseAt(a, h);
}

__global__ void RunMassKernel(QuantAttendLaunch a) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.n_runs) RunMassAt(a, i);
}

__global__ void WeightKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) WeightAt(a, x);
}

__global__ void PartialKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) PartialAt(a, x);
}

__global__ void OutKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) OutAt(a, x);
}

unsigned Blocks(uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t LaunchQuantAttend(const QuantAttendLaunch& a, cudaStream_t stream) {
  if (a.n_runs == 0) return cudaSuccess;
  const uint64_t scores = uint64_t{a.n_runs} * a.n_heads * a.max_rows;
  const uint64_t lses = uint64_t{a.n_runs} * a.n_heads;
  const uint64_t partials = lses * a.head_dim;
  const uint64_t outs = uint64_t{a.n_heads} * a.head_dim;
  ScoreKernel<<<Blocks(scores), kThreads, 0, stream>>>(a, scores);
  RunLseKernel<<<Blocks(lses), kThreads, 0, stream>>>(a, lses);
  HeadLseKernel<<<Blocks(a.n_heads), kThreads, 0, stream>>>(a);
  if (a.run_mass != nullptr) RunMassKernel<<<Blocks(a.n_runs), kThreads, 0, stream>>>(a);
  WeightKernel<<<Blocks(scores), kThreads, 0, stream>>>(a, scores);
  PartialKernel<<<Blocks(partials), kThreads, 0, stream>>>(a, partials);
  OutKernel<<<Blocks(outs), kThreads, 0, stream>>>(a, outs);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda::internal
