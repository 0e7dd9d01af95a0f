// Decode attention over INT8/INT4 blocks read in place on the GPU, one thread per index; the
// bodies are quant_attention_math.h's (shared with the host run the tests compare against the
// CPU reference, runtime's ref::AttendQuant). -fmad=false (src/cuda/CMakeLists.txt): nothing is
// fused, as on the host.
#include "cuda/quant_attention_math.h"

namespace kvtier::cuda::internal {
namespace {

constexpr uint32_t kThreads = 256;

// One pass: Body once per index of [0, n), one thread each.
template <void (*Body)(const QuantAttendLaunch&, uint64_t)>
__global__ void PassKernel(QuantAttendLaunch a, uint64_t n) {
  const uint64_t x = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x < n) Body(a, x);
}

template <void (*Body)(const QuantAttendLaunch&, uint64_t)>
void Launch(const QuantAttendLaunch& a, uint64_t n, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  PassKernel<Body><<<blocks, kThreads, 0, stream>>>(a, n);
}

}  // namespace

cudaError_t LaunchQuantAttend(const QuantAttendLaunch& a, cudaStream_t stream) {
  if (a.n_runs == 0) return cudaSuccess;
  const uint64_t scores = uint64_t{a.n_runs} * a.n_heads * a.max_rows;
  const uint64_t lses = uint64_t{a.n_runs} * a.n_heads;
  Launch<ScoreAt>(a, scores, stream);
  Launch<RunLseAt>(a, lses, stream);
  Launch<HeadLseAt>(a, a.n_heads, stream);
  if (a.run_mass != nullptr) Launch<RunMassAt>(a, a.n_runs, stream);
  Launch<WeightAt>(a, scores, stream);
  Launch<PartialAt>(a, lses * a.head_dim, stream);
  Launch<OutAt>(a, uint64_t{a.n_heads} * a.head_dim, stream);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda::internal
