// Test-only helpers for the codec tests: one element of a raw KV block (FP32, FP16 or BF16)
// written from a float, or read as one (the conversions are the codecs' own, codecs/kernels.h).
//
// Thread safety: pure functions. Test-only: included by test files, never by the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codecs/kernels.h"
#include "core/kv_layout.h"

namespace kvtier::codecs {

// Element i of `dst`, seen as an array of `dtype`, becomes `v` (rounded to nearest).
inline void StoreElement(DType dtype, float v, std::byte* dst, size_t i) {
  if (dtype == DType::kF32) {
    std::memcpy(dst + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
  std::memcpy(dst + 2 * i, &h, 2);
}

// Element i of `src`, seen as an array of `dtype`, as a float.
inline float LoadElement(DType dtype, const std::byte* src, size_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, src + 2 * i, 2);
  return dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
}

}  // namespace kvtier::codecs
