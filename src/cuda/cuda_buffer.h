// Move-only owners of CUDA resources: DeviceBuffer (cudaMalloc), PinnedBuffer (cudaHostAlloc,
// optionally mapped into the device's address space), CudaStream and CudaEvent.
//
// Why: a CUDA allocation, stream or event that leaks on an error path is invisible until the card
// runs out; with one owner each, leaks cannot be written. Each factory returns a Status naming the
// CUDA call that failed. Destructors release quietly (a failing cudaFree at teardown has nobody to
// report to).
//
// Thread safety: an owner is not synchronized; the resources themselves follow CUDA's rules
// (streams and events may be used from any thread). Ownership: each object owns its resource and
// releases it in its destructor; raw handles returned by get()/data() are borrowed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kvtier/result.h"

namespace kvtier::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // cudaMalloc of `bytes` (> 0) on the current device; NoSpace when the card is out of memory.
  static Result<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return data_; }  // Device address (256-byte aligned at least).
  size_t size() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

enum class PinnedMapping : uint8_t {
  kNone = 0,
  // Also mapped into the device's address space (zero-copy/UVA access from kernels); the device
  // address comes from cudaHostGetDevicePointer. Slower for kernels than device memory: only for
  // data a kernel touches once.
  kMapped = 1,
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // cudaHostAlloc of `bytes` (> 0) of page-locked host memory.
  static Result<PinnedBuffer> Allocate(size_t bytes, PinnedMapping mapping = PinnedMapping::kNone);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const { return data_; }                // Host address.
  std::byte* device_data() const { return device_data_; }  // nullptr unless kMapped.
  size_t size() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  std::byte* device_data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaStream {
 public:
  CudaStream() = default;
  // A non-blocking stream (no implicit sync with the legacy default stream).
  static Result<CudaStream> Create();
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

enum class EventTiming : uint8_t { kDisabled = 0, kEnabled = 1 };

class CudaEvent {
 public:
  CudaEvent() = default;
  // Timing is off by default: such events are cheaper to record and to wait on.
  static Result<CudaEvent> Create(EventTiming timing = EventTiming::kDisabled);
  // Takes ownership of an event created elsewhere (e.g. with cudaEventBlockingSync).
  static CudaEvent Adopt(cudaEvent_t event) {
    CudaEvent owner;
    owner.event_ = event;
    return owner;
  }
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace kvtier::cuda
