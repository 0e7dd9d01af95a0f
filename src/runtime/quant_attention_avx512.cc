// AVX-512F instantiation of the quantized attention kernel (quant_attention_simd.h): 16 float
// lanes (Vec16, quant_attention_vec16.h). Shapes whose head_dim or group size is not a multiple
// of 16 go to the AVX2 version.
#include <immintrin.h>

#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from operands "initialised" with themselves (_mm512_undefined_*),
// which -Wmaybe-uninitialized reports wherever one is inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KV_QATTN_TARGET __attribute__((target("avx512f,avx2,f16c,fma")))
#include "runtime/quant_attention_simd.h"

namespace kvtier::runtime::avx512 {
namespace {

#include "runtime/quant_attention_vec16.h"

}  // namespace

KV_QATTN_TARGET void AttendQuant(const QuantAttendArgs& args) {
  qattn::AttendOrFallBack<Vec16>(args, avx2::AttendQuant);
}

}  // namespace kvtier::runtime::avx512
