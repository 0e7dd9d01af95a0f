#include "core/paged_layout.h"

namespace kvtier {

const char* PagedLayoutName(PagedLayoutKind kind) {
  switch (kind) {
    case PagedLayoutKind::kVllmLegacy:
      return "vllm_legacy";
    case PagedLayoutKind::kFlash:
      return "flash";
    case PagedLayoutKind::kFlashHnd:
      return "flash_hnd";
    case PagedLayoutKind::kFlashInferNhd:
      return "flashinfer_nhd";
    case PagedLayoutKind::kFlashInferHnd:
      return "flashinfer_hnd";
    case PagedLayoutKind::kVllmCpu:
      return "vllm_cpu";
    case PagedLayoutKind::kPackedNhd:
      return "packed_nhd";
    case PagedLayoutKind::kPackedHnd:
      return "packed_hnd";
    case PagedLayoutKind::kLatent:
      return "latent";
    case PagedLayoutKind::kVllmCpuVec:
      return "vllm_cpu_vec";
  }
  return nullptr;
}

}  // namespace kvtier
