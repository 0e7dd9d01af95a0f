#include "cuda/cuda_buffer.h"

#include <utility>

#include "cuda/cuda_status.h"

namespace kvtier::cuda {

// ---- DeviceBuffer

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("DeviceBuffer: zero bytes");
  void* p = nullptr;
  KV_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  DeviceBuffer buffer;
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) static_cast<void>(cudaFree(data_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) static_cast<void>(cudaFree(data_));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- PinnedBuffer

Result<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, PinnedMapping mapping) {
  if (bytes == 0) return Status::InvalidArgument("PinnedBuffer: zero bytes");
  const unsigned flags =
      mapping == PinnedMapping::kMapped ? cudaHostAllocMapped : cudaHostAllocDefault;
  void* p = nullptr;
  KV_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, flags));
  PinnedBuffer buffer;
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.bytes_ = bytes;
  if (mapping == PinnedMapping::kMapped) {
    void* device = nullptr;
    KV_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device, p, 0));  // buffer frees p.
    buffer.device_data_ = static_cast<std::byte*>(device);
  }
  return buffer;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) static_cast<void>(cudaFreeHost(data_));
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      device_data_(std::exchange(other.device_data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) static_cast<void>(cudaFreeHost(data_));
    data_ = std::exchange(other.data_, nullptr);
    device_data_ = std::exchange(other.device_data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- CudaStream

Result<CudaStream> CudaStream::Create() {
  CudaStream stream;
  KV_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking));
  return stream;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

// ---- CudaEvent

Result<CudaEvent> CudaEvent::Create(EventTiming timing) {
  CudaEvent event;
  const unsigned flags =
      timing == EventTiming::kEnabled ? cudaEventDefault : cudaEventDisableTiming;
  KV_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event.event_, flags));
  return event;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

}  // namespace kvtier::cuda
