// GpuFileIo (see gds.h). The cuFile declarations below are kvtier's own, written from NVIDIA's
// documented C ABI of libcufile (cufile.h is not needed to build): every call returns a
// CUfileError_t {CUfileOpError err; CUresult cu_err;} with err 0 on success, except cuFileRead/
// cuFileWrite, which return the bytes moved or a negative error.
#include "cuda/gds.h"

#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

#include "cuda/cuda_buffer.h"
#include "cuda/cuda_status.h"

namespace kvtier::cuda {

namespace {

struct CuFileError {
  int err;     // CUfileOpError; 0 = CU_FILE_SUCCESS.
  int cu_err;  // CUresult.
};
struct CuFileDescr {
  int type;  // 1 = CU_FILE_HANDLE_TYPE_OPAQUE_FD.
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // nullptr: the default (kernel) file system operations.
};
constexpr int kCuFileHandleTypeOpaqueFd = 1;
using CuFileHandle = void*;

constexpr std::array<const char*, 2> kLibraryNames = {"libcufile.so.0", "libcufile.so"};

}  // namespace

struct CuFileApi {
  void* library = nullptr;
  int (*close_library)(void*) = nullptr;
  bool driver_open = false;
  CuFileError (*driver_open_fn)() = nullptr;
  CuFileError (*driver_close_fn)() = nullptr;
  CuFileError (*handle_register)(CuFileHandle*, CuFileDescr*) = nullptr;
  void (*handle_deregister)(CuFileHandle) = nullptr;
  ssize_t (*read)(CuFileHandle, void*, size_t, off_t, off_t) = nullptr;
  ssize_t (*write)(CuFileHandle, const void*, size_t, off_t, off_t) = nullptr;

  ~CuFileApi() {
    if (driver_open && driver_close_fn != nullptr) static_cast<void>(driver_close_fn());
    if (library != nullptr) static_cast<void>(close_library(library));
  }
};

namespace {

template <typename Fn>
bool Resolve(const GdsOptions& o, void* library, const char* name, Fn* out) {
  void* symbol = (o.dlsym_fn != nullptr ? o.dlsym_fn : dlsym)(library, name);
  *out = reinterpret_cast<Fn>(symbol);
  return symbol != nullptr;
}

// Loads libcufile and opens its driver; on failure `reason` says why and nullptr is returned.
std::shared_ptr<CuFileApi> LoadCuFile(const GdsOptions& o, std::string* reason) {
  auto api = std::make_shared<CuFileApi>();
  api->close_library = o.dlclose_fn != nullptr ? o.dlclose_fn : dlclose;
  for (const char* name : kLibraryNames) {
    api->library = (o.dlopen_fn != nullptr ? o.dlopen_fn : dlopen)(name, RTLD_NOW | RTLD_LOCAL);
    if (api->library != nullptr) break;
  }
  if (api->library == nullptr) {
    *reason = "libcufile.so.0 / libcufile.so not found";
    return nullptr;
  }
  const bool resolved =
      Resolve(o, api->library, "cuFileDriverOpen", &api->driver_open_fn) &&
      Resolve(o, api->library, "cuFileHandleRegister", &api->handle_register) &&
      Resolve(o, api->library, "cuFileHandleDeregister", &api->handle_deregister) &&
      Resolve(o, api->library, "cuFileRead", &api->read) &&
      Resolve(o, api->library, "cuFileWrite", &api->write);
  if (!resolved) {
    *reason = "libcufile lacks a required symbol";
    return nullptr;
  }
  if (!Resolve(o, api->library, "cuFileDriverClose_v2", &api->driver_close_fn)) {
    static_cast<void>(Resolve(o, api->library, "cuFileDriverClose", &api->driver_close_fn));
  }
  const CuFileError opened = api->driver_open_fn();
  if (opened.err != 0) {
    *reason = "cuFileDriverOpen failed (error " + std::to_string(opened.err) +
              "; is the nvidia-fs module loaded?)";
    return nullptr;
  }
  api->driver_open = true;
  return api;
}

}  // namespace

GdsSelection SelectGdsPath(const GdsOptions& options) {
  GdsSelection s;
  if (options.mode == GdsMode::kBounceOnly) {
    s.reason = "GdsMode::kBounceOnly";
  } else {
    s.api = LoadCuFile(options, &s.reason);
    if (s.api != nullptr) s.path = GdsPath::kCuFile;
  }
  if (s.path == GdsPath::kCuFile) {
    LogTo(options.logger, LogLevel::kInfo, "gds: using GPUDirect Storage (cuFile)");
  } else {
    LogTo(options.logger, LogLevel::kInfo,
          "gds: using the pinned bounce-buffer path (" + s.reason + ")");
  }
  return s;
}

struct GpuFileIo::Impl {
  GdsPath path = GdsPath::kBounce;
  std::shared_ptr<CuFileApi> api;
  PinnedBuffer bounce;
};

Result<std::unique_ptr<GpuFileIo>> GpuFileIo::Open(const GdsOptions& options) {
  if (options.bounce_bytes == 0) return Status::InvalidArgument("gds: bounce_bytes is 0");
  auto impl = std::make_unique<Impl>();
  GdsSelection s = SelectGdsPath(options);
  impl->path = s.path;
  impl->api = std::move(s.api);
  if (impl->path == GdsPath::kBounce) {
    KV_ASSIGN_OR_RETURN(impl->bounce, PinnedBuffer::Allocate(options.bounce_bytes));
  }
  return std::unique_ptr<GpuFileIo>(new GpuFileIo(std::move(impl)));
}

GpuFileIo::GpuFileIo(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuFileIo::~GpuFileIo() = default;
GdsPath GpuFileIo::path() const { return impl_->path; }

namespace {

// Registers `fd` with cuFile for the duration of one transfer and moves `bytes` in a loop.
Status CuFileTransfer(const CuFileApi& api, int fd, uint64_t offset, std::byte* device,
                      size_t bytes, bool write) {
  CuFileDescr descr{};
  descr.type = kCuFileHandleTypeOpaqueFd;
  descr.handle.fd = fd;
  CuFileHandle handle = nullptr;
  const CuFileError registered = api.handle_register(&handle, &descr);
  if (registered.err != 0) {
    return Status::IoError("gds: cuFileHandleRegister failed (error " +
                           std::to_string(registered.err) + ")");
  }
  size_t done = 0;
  Status status;
  while (done < bytes && status.ok()) {
    const auto file_offset = static_cast<off_t>(offset + done);
    const auto buffer_offset = static_cast<off_t>(done);
    const ssize_t n = write ? api.write(handle, device, bytes - done, file_offset, buffer_offset)
                            : api.read(handle, device, bytes - done, file_offset, buffer_offset);
    if (n <= 0) {
      status = Status::IoError(std::string("gds: ") + (write ? "cuFileWrite" : "cuFileRead") +
                               (n == 0 ? " hit end of file" : " failed") + " at offset " +
                               std::to_string(offset + done));
    } else {
      done += static_cast<size_t>(n);
    }
  }
  api.handle_deregister(handle);
  return status;
}

// pread/pwrite the whole range [buffer, buffer + bytes) at `offset`.
Status HostIo(int fd, uint64_t offset, std::byte* buffer, size_t bytes, bool write) {
  size_t done = 0;
  while (done < bytes) {
    const auto at = static_cast<off_t>(offset + done);
    const ssize_t n = write ? pwrite(fd, buffer + done, bytes - done, at)
                            : pread(fd, buffer + done, bytes - done, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, write ? "gds bounce: pwrite" : "gds bounce: pread");
    if (n == 0) return Status::IoError("gds bounce: pread hit end of file");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status GpuFileIo::Read(int fd, uint64_t offset, std::byte* device_dst, size_t bytes) {
  if (impl_->path == GdsPath::kCuFile) {
    return CuFileTransfer(*impl_->api, fd, offset, device_dst, bytes, /*write=*/false);
  }
  PinnedBuffer& bounce = impl_->bounce;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bounce.size(), bytes - done);
    KV_RETURN_IF_ERROR(HostIo(fd, offset + done, bounce.data(), n, /*write=*/false));
    KV_CUDA_RETURN_IF_ERROR(cudaMemcpy(device_dst + done, bounce.data(), n, cudaMemcpyDefault));
    done += n;
  }
  return Status::Ok();
}

Status GpuFileIo::Write(int fd, uint64_t offset, const std::byte* device_src, size_t bytes) {
  if (impl_->path == GdsPath::kCuFile) {
    return CuFileTransfer(*impl_->api, fd, offset, const_cast<std::byte*>(device_src), bytes,
                          /*write=*/true);
  }
  PinnedBuffer& bounce = impl_->bounce;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bounce.size(), bytes - done);
    KV_CUDA_RETURN_IF_ERROR(cudaMemcpy(bounce.data(), device_src + done, n, cudaMemcpyDefault));
    KV_RETURN_IF_ERROR(HostIo(fd, offset + done, bounce.data(), n, /*write=*/true));
    done += n;
  }
  return Status::Ok();
}

}  // namespace kvtier::cuda
