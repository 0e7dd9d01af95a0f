// Host runs of the quantization kernel bodies (quant_math.h): the same functions the GPU threads
// call, looped over every index. Used by the tests to check the GPU's arithmetic without a GPU.
#include "cuda/quant_math.h"

namespace kvtier::cuda::internal {

void QuantizeHost(const QuantArgs& a) {
  for (uint32_t b = 0; b < a.count; ++b) {
    uint32_t flags = 0;
    for (uint64_t i = 0; i < uint64_t{a.key_groups} * a.channels; ++i)
      flags |= KeyParamsAt(a, b, i);
    for (uint64_t i = 0; i < uint64_t{a.tokens} * a.value_groups; ++i) {
      flags |= ValueParamsAt(a, b, i);
    }
    for (uint32_t half = 0; half < 2; ++half) {
      for (uint64_t i = 0; i < CodeBytes(a); ++i) CodeByteAt(a, b, half, i);
    }
    a.flags[b] = flags;
  }
}

void DequantizeHost(const QuantArgs& a) {
  for (uint32_t b = 0; b < a.count; ++b) {
    uint32_t flags = 0;
    for (uint32_t half = 0; half < 2; ++half) {
      for (uint64_t e = 0; e < uint64_t{a.tokens} * a.channels; ++e) {
        flags |= DequantizeAt(a, b, half, e);
      }
    }
    a.flags[b] = flags;
  }
}

}  // namespace kvtier::cuda::internal
