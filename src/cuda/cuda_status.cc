#include "cuda/cuda_status.h"

#include <string>

namespace kvtier::cuda {

Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message =
      std::string(call) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  switch (error) {
    case cudaErrorMemoryAllocation:
      return Status::NoSpace(std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      return Status::InvalidArgument(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
      return Status::Unavailable(std::move(message));
    default:
      return Status::IoError(std::move(message));
  }
}

Result<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Clear the (non-sticky) error so later calls do not report it again.
    static_cast<void>(cudaGetLastError());
    return CudaStatus(error, "cudaGetDeviceCount");
  }
  if (count <= 0) return Status::Unavailable("cudaGetDeviceCount: no CUDA device");
  return count;
}

}  // namespace kvtier::cuda
