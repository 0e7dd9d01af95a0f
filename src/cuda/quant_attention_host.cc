// Host run of the quantized attention kernel bodies (quant_attention_math.h): the same functions
// the GPU threads call, looped over every index in kernel order. Used by the tests to check the
// GPU's arithmetic against the CPU reference without a GPU.
#include "cuda/quant_attention_math.h"

namespace kvtier::cuda::internal {

void QuantAttendHost(const QuantAttendLaunch& a) {
  const uint64_t scores = uint64_t{a.n_runs} * a.n_heads * a.max_rows;
  const uint64_t lses = uint64_t{a.n_runs} * a.n_heads;
  for (uint64_t x = 0; x < scores; ++x) ScoreAt(a, x);
  for (uint64_t x = 0; x < lses; ++x) RunLseAt(a, x);
  for (uint64_t h = 0; h < a.n_heads; ++h) HeadLseAt(a, h);
  if (a.run_mass != nullptr) {
    for (uint64_t i = 0; i < a.n_runs; ++i) RunMassAt(a, i);
  }
  for (uint64_t x = 0; x < scores; ++x) WeightAt(a, x);
  for (uint64_t x = 0; x < lses * a.head_dim; ++x) PartialAt(a, x);
  for (uint64_t x = 0; x < uint64_t{a.n_heads} * a.head_dim; ++x) OutAt(a, x);
}

}  // namespace kvtier::cuda::internal
