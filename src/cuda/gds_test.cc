// Goal: GPUDirect Storage is never a hard requirement. Method: drive the cuFile loader through its
// dlopen/dlsym seams (library absent, a symbol missing, bounce-only mode) and through the real
// dlopen (libcufile is not installed on the CI machines), and check that the bounce path is chosen
// with exactly one log line naming it. With a GPU, a file round trip through GpuFileIo checks the
// path that was chosen. The loader tests run without a GPU.
#include "cuda/gds.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda/cuda_buffer.h"
#include "cuda/cuda_status.h"
#include "testing/test_util.h"

namespace kvtier::cuda {
namespace {

void* NoLibrary(const char*, int) { return nullptr; }
// A handle that stands for a loaded library; never dereferenced (FakeClose "unloads" it).
void* FakeLibrary(const char*, int) { return reinterpret_cast<void*>(uintptr_t{0x1000}); }
void* NoSymbol(void*, const char*) { return nullptr; }
int FakeClose(void*) { return 0; }

TEST(GdsTest, MissingLibraryFallsBackToBounceBuffersAndLogsOnce) {
  CapturingLogger logger;
  const GdsSelection s = SelectGdsPath({.logger = &logger, .dlopen_fn = NoLibrary});
  EXPECT_EQ(s.path, GdsPath::kBounce);
  EXPECT_EQ(s.api, nullptr);
  EXPECT_NE(s.reason.find("libcufile"), std::string::npos) << s.reason;
  ASSERT_EQ(logger.lines().size(), 1u);
  EXPECT_EQ(logger.CountContaining("bounce-buffer path"), 1u);
}

TEST(GdsTest, MissingSymbolFallsBackToBounceBuffers) {
  CapturingLogger logger;
  const GdsSelection s = SelectGdsPath(
      {.logger = &logger, .dlopen_fn = FakeLibrary, .dlsym_fn = NoSymbol, .dlclose_fn = FakeClose});
  EXPECT_EQ(s.path, GdsPath::kBounce);
  EXPECT_NE(s.reason.find("symbol"), std::string::npos) << s.reason;
  EXPECT_EQ(logger.lines().size(), 1u);
}

TEST(GdsTest, BounceOnlyModeNeverLoadsTheLibrary) {
  CapturingLogger logger;
  // A loader that would "succeed" proves it is not called: the selection must not use it.
  const GdsSelection s = SelectGdsPath({.mode = GdsMode::kBounceOnly,
                                        .logger = &logger,
                                        .dlopen_fn = FakeLibrary,
                                        .dlsym_fn = NoSymbol,
                                        .dlclose_fn = FakeClose});
  EXPECT_EQ(s.path, GdsPath::kBounce);
  EXPECT_EQ(s.reason, "GdsMode::kBounceOnly");
  EXPECT_EQ(logger.CountContaining("bounce-buffer path"), 1u);
}

TEST(GdsTest, RealLoaderPicksOnePathAndLogsOnce) {
  CapturingLogger logger;
  const GdsSelection s = SelectGdsPath({.logger = &logger});
  ASSERT_EQ(logger.lines().size(), 1u);
  if (s.path == GdsPath::kBounce) {
    EXPECT_EQ(logger.CountContaining("bounce-buffer path"), 1u);
  } else {
    EXPECT_EQ(logger.CountContaining("GPUDirect Storage"), 1u);
  }
}

TEST(GdsTest, FileRoundTripThroughTheChosenPath) {
  const Result<int> devices = CudaDeviceCount();
  if (!devices.ok()) GTEST_SKIP() << "no usable CUDA GPU: " << devices.status().ToString();
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string path = dir->path() + "/blocks";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  CapturingLogger logger;
  // A bounce buffer smaller than the transfer exercises the chunk loop.
  Result<std::unique_ptr<GpuFileIo>> io =
      GpuFileIo::Open({.bounce_bytes = 64 << 10, .logger = &logger});
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  EXPECT_EQ(logger.lines().size(), 1u);
  constexpr size_t kBytes = 1 << 20;  // 4 KiB-aligned: valid for cuFile's O_DIRECT too.
  std::vector<std::byte> data(kBytes);
  for (size_t i = 0; i < kBytes; ++i) data[i] = static_cast<std::byte>((i * 131) >> 3);
  Result<DeviceBuffer> src = DeviceBuffer::Allocate(kBytes);
  Result<DeviceBuffer> dst = DeviceBuffer::Allocate(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_EQ(cudaMemcpy(src->data(), data.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*io)->Write(fd, 4096, src->data(), kBytes).ok());
  ASSERT_TRUE((*io)->Read(fd, 4096, dst->data(), kBytes).ok());
  std::vector<std::byte> back(kBytes);
  ASSERT_EQ(cudaMemcpy(back.data(), dst->data(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, data);
  const Status short_read = (*io)->Read(fd, 4096 + kBytes, dst->data(), 4096);
  EXPECT_FALSE(short_read.ok());
  close(fd);
}

}  // namespace
}  // namespace kvtier::cuda
