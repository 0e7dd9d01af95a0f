// CUDA errors as kvtier Status values, and the probe that tells whether a GPU is usable at all.
//
// Why: every CUDA runtime call can fail (no driver, no device, out of memory, a sticky launch
// error), and callers must see which call failed. KV_CUDA_RETURN_IF_ERROR turns a cudaError_t into
// a Status whose message names the call and CUDA's own description of the error.
//
// Thread safety: pure functions; CudaDeviceCount() may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include "kvtier/result.h"

namespace kvtier::cuda {

// OK for cudaSuccess. Otherwise a Status naming `call`: NoSpace for out-of-memory, InvalidArgument
// for invalid values or pointers, Unavailable when there is no driver or device, IoError else.
Status CudaStatus(cudaError_t error, const char* call);

// The number of usable CUDA devices, or Unavailable (with CUDA's reason) when there is none:
// no libcuda.so, a driver older than the runtime, or no device. Safe on machines without any
// NVIDIA driver: it only asks the runtime, which reports the missing driver as an error.
Result<int> CudaDeviceCount();

}  // namespace kvtier::cuda

// Evaluates a CUDA runtime call once and returns its error as a Status from the enclosing
// function: KV_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n));
#define KV_CUDA_RETURN_IF_ERROR(call)                                                            \
  do {                                                                                           \
    const cudaError_t kv_cuda_error_ = (call);                                                   \
    if (kv_cuda_error_ != cudaSuccess) return ::kvtier::cuda::CudaStatus(kv_cuda_error_, #call); \
  } while (false)
