// GpuFileIo: file <-> device memory transfers through NVIDIA GPUDirect Storage (cuFile) when the
// machine has it, and through a pinned bounce buffer when it does not.
//
// Why run-time loading: GDS needs libcufile, the nvidia-fs kernel module and a supported file
// system; most machines lack at least one. Dynamo hard-wired GDS with no fallback and failed on
// such machines. Here libcufile is dlopen'ed ("libcufile.so.0", then
// "libcufile.so") at Open, never linked, and any failure (library absent, a symbol missing,
// cuFileDriverOpen refusing) selects the bounce path instead. Open logs exactly one line saying
// which path is in use and why.
//
// Bounce path: pread/pwrite on the host into a pinned buffer of bounce_bytes, and a synchronous
// cudaMemcpy between it and device memory, chunk by chunk.
//
// Thread safety: one GpuFileIo per thread (the bounce buffer is shared by its calls).
// Ownership: GpuFileIo owns the library handle, the cuFile driver session and the bounce buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/logger.h"
#include "kvtier/result.h"

namespace kvtier::cuda {

enum class GdsPath : uint8_t {
  kCuFile = 0,  // GPUDirect Storage: DMA between the NVMe and GPU memory.
  kBounce = 1,  // pread/pwrite through pinned host memory.
};

enum class GdsMode : uint8_t {
  kAuto = 0,        // cuFile when it loads and its driver opens, else the bounce path.
  kBounceOnly = 1,  // Never try cuFile.
};

struct GdsOptions {
  GdsMode mode = GdsMode::kAuto;
  size_t bounce_bytes = 16u << 20;  // Pinned bounce buffer (bounce path only).
  Logger* logger = nullptr;         // Borrowed; receives the one line naming the path.
  // Test seams: the loader, symbol lookup and unloader to use (nullptr: dlopen/dlsym/dlclose).
  void* (*dlopen_fn)(const char* file, int flags) = nullptr;
  void* (*dlsym_fn)(void* handle, const char* symbol) = nullptr;
  int (*dlclose_fn)(void* handle) = nullptr;
};

// The entry points of libcufile that kvtier uses, resolved at run time.
struct CuFileApi;

// Which path Open would take and why, without touching the GPU: loads libcufile (kAuto) and
// opens its driver. `reason` says why the bounce path was chosen (empty for kCuFile). Logs the one
// line. On kCuFile, `api` holds the loaded library (closed by its deleter).
struct GdsSelection {
  GdsPath path = GdsPath::kBounce;
  std::string reason;
  std::shared_ptr<CuFileApi> api;  // Shared with the GpuFileIo that adopts it.
};
GdsSelection SelectGdsPath(const GdsOptions& options);

class GpuFileIo {
 public:
  // Selects the path (SelectGdsPath), then allocates the bounce buffer when needed. Errors:
  // InvalidArgument for bounce_bytes 0, the CUDA error when pinned memory cannot be allocated.
  static Result<std::unique_ptr<GpuFileIo>> Open(const GdsOptions& options);
  ~GpuFileIo();
  GpuFileIo(const GpuFileIo&) = delete;
  GpuFileIo& operator=(const GpuFileIo&) = delete;

  GdsPath path() const;

  // Reads `bytes` at `offset` of `fd` into device memory at `device_dst` and returns when they
  // are there. IoError on a short file or a failing read (naming the path used).
  Status Read(int fd, uint64_t offset, std::byte* device_dst, size_t bytes);
  // Writes `bytes` of device memory at `device_src` to `fd` at `offset`.
  Status Write(int fd, uint64_t offset, const std::byte* device_src, size_t bytes);

  struct Impl;

 private:
  explicit GpuFileIo(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::cuda
