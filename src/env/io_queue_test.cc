// Goal: show that both IoQueue backends (io_uring and the pread/pwrite thread pool) keep the same
// contract: batched writes and reads move the right bytes, gathered writes put their buffers back
// to back, Submit never accepts more than the depth allows, bad requests (misaligned for
// O_DIRECT, missing file or buffer, too long, a gather that is not a write or not its length) are
// rejected at Submit, kernel errors come back in completions naming the file, and Poll honours its timeout.
// Method: one value-parameterized suite runs every test on each backend, on files in a fresh
// mkdtemp directory. A pipe-backed File gives a read that blocks until the test writes to the
// pipe, so "nothing completes" is deterministic on both backends.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "core/limits.h"
#include "env/env.h"
#include "env/io_queues.h"
#include "testing/test_util.h"

namespace kvtier {
namespace {

// A File over the read end of a pipe: a read blocks until bytes are written to the pipe. Both
// backends can use it: io_uring through fd(), the thread pool through ReadAt.
class PipeFile final : public File {
 public:
  PipeFile() { KV_CHECK(::pipe2(fds_, O_CLOEXEC) == 0); }
  ~PipeFile() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  void Feed(std::string_view bytes) {
    KV_CHECK(::write(fds_[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  }
  const std::string& path() const override { return path_; }
  bool direct() const override { return false; }
  int fd() const override { return fds_[0]; }
  Status ReadAt(uint64_t, std::span<std::byte> dst, size_t* read_bytes) override {
    const ssize_t n = ::read(fds_[0], dst.data(), dst.size());
    if (n < 0) return Status::FromErrno(errno, "read pipe");
    *read_bytes = static_cast<size_t>(n);
    return Status::Ok();
  }
  Status WriteAt(uint64_t, std::span<const std::byte>) override { return Unsupported(); }
  Status Sync() override { return Unsupported(); }
  Status Truncate(uint64_t) override { return Unsupported(); }
  Status Allocate(uint64_t, uint64_t) override { return Unsupported(); }
  Result<uint64_t> Size() override { return Unsupported(); }
  Status Close() override { return Status::Ok(); }

 private:
  static Status Unsupported() { return Status::NotSupported("pipe"); }
  int fds_[2] = {-1, -1};
  std::string path_ = "<pipe>";
};

class IoQueueTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    auto dir = ScopedTempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    env_ = NewPosixEnv({.logger = &logger_});
  }

  std::unique_ptr<IoQueue> NewQueue(uint32_t depth) {
    auto queue = env_->NewIoQueue({.depth = depth, .backend = GetParam(), .fallback_threads = 3});
    EXPECT_TRUE(queue.ok()) << queue.status().ToString();
    if (!queue.ok()) return nullptr;
    EXPECT_EQ((*queue)->depth(), depth);
    return std::move(queue).value();
  }

  std::unique_ptr<File> Open(const std::string& name, OpenMode mode, DirectIo direct) {
    auto f = env_->OpenFile(dir_->Join(name), {.mode = mode, .direct = direct});
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  std::optional<ScopedTempDir> dir_;
  CapturingLogger logger_;
  std::unique_ptr<Env> env_;
};

constexpr size_t kBlockBytes = 2 * kDirectIoAlignment;

void Fill(std::span<std::byte> bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte((i * 131 + seed * 17) & 0xff);
}

TEST_P(IoQueueTest, BatchedWritesThenReads) {
  for (DirectIo direct : {DirectIo::kOff, DirectIo::kPreferred}) {
    std::unique_ptr<File> file = Open("data", OpenMode::kTruncate, direct);
    ASSERT_NE(file, nullptr);
    std::unique_ptr<IoQueue> queue = NewQueue(8);
    ASSERT_NE(queue, nullptr);
    constexpr size_t kBlocks = 20;
    auto src = AlignedBuffer::Allocate(kBlocks * kBlockBytes);
    auto dst = AlignedBuffer::Allocate(kBlocks * kBlockBytes);
    ASSERT_TRUE(src.ok() && dst.ok());
    std::vector<IoRequest> writes, reads;
    for (uint32_t i = 0; i < kBlocks; ++i) {
      Fill(src->span().subspan(i * kBlockBytes, kBlockBytes), i);
      writes.push_back({.op = IoOp::kWrite,
                        .file = file.get(),
                        .offset = i * kBlockBytes,
                        .buffer = src->data() + i * kBlockBytes,
                        .length = kBlockBytes,
                        .user_data = 100 + i});
      reads.push_back(writes.back());
      reads.back().op = IoOp::kRead;
      reads.back().buffer = dst->data() + i * kBlockBytes;
    }
    writes.push_back({.op = IoOp::kSync, .file = file.get(), .user_data = 999});
    std::vector<IoCompletion> done;
    Status s = RunToCompletion(*queue, writes, &done);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(done.size(), writes.size());
    std::vector<bool> seen(kBlocks + 1, false);
    for (const IoCompletion& c : done) {
      const size_t index = c.user_data == 999 ? kBlocks : c.user_data - 100;
      ASSERT_LE(index, kBlocks);
      EXPECT_FALSE(seen[index]);
      seen[index] = true;
      EXPECT_EQ(c.bytes, index == kBlocks ? 0 : kBlockBytes);
    }
    ASSERT_TRUE(RunToCompletion(*queue, reads, &done).ok());
    EXPECT_EQ(std::memcmp(src->data(), dst->data(), src->size()), 0);
    EXPECT_EQ(file->Size().value(), kBlocks * kBlockBytes);
    EXPECT_EQ(queue->in_flight(), 0u);
  }
}

// A gathered write (IoRequest::gather) puts its buffers back to back from its offset, O_DIRECT
// included, and reads back as one run of bytes; a bad gather is refused at Submit.
TEST_P(IoQueueTest, GatheredWritesPutTheirBuffersBackToBack) {
  for (DirectIo direct : {DirectIo::kOff, DirectIo::kPreferred}) {
    std::unique_ptr<File> file = Open("gather", OpenMode::kTruncate, direct);
    ASSERT_NE(file, nullptr);
    std::unique_ptr<IoQueue> queue = NewQueue(4);
    ASSERT_NE(queue, nullptr);
    constexpr size_t kPieces = 5;
    // The pieces lie apart in memory, in reverse order, of different sizes.
    auto src = AlignedBuffer::Allocate(2 * kPieces * kBlockBytes);
    auto dst = AlignedBuffer::Allocate(kPieces * kBlockBytes);
    ASSERT_TRUE(src.ok() && dst.ok());
    std::vector<iovec> gather;
    uint64_t total = 0;
    for (size_t i = 0; i < kPieces; ++i) {
      const size_t bytes = i % 2 == 0 ? kBlockBytes : kDirectIoAlignment;
      std::byte* at = src->data() + (2 * (kPieces - 1 - i)) * kBlockBytes;
      Fill(std::span(at, bytes), static_cast<uint32_t>(i));
      gather.push_back({at, bytes});
      total += bytes;
    }
    const IoRequest write{.op = IoOp::kWrite,
                          .file = file.get(),
                          .offset = kBlockBytes,
                          .length = total,
                          .user_data = 7,
                          .gather = gather};
    std::vector<IoCompletion> done;
    const IoRequest batch[] = {write};
    Status s = RunToCompletion(*queue, batch, &done);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].bytes, total);
    const IoRequest read{.op = IoOp::kRead,
                         .file = file.get(),
                         .offset = kBlockBytes,
                         .buffer = dst->data(),
                         .length = total};
    const IoRequest reads[] = {read};
    ASSERT_TRUE(RunToCompletion(*queue, reads, &done).ok());
    uint64_t at = 0;
    for (const iovec& v : gather) {
      EXPECT_EQ(std::memcmp(dst->data() + at, v.iov_base, v.iov_len), 0) << at;
      at += v.iov_len;
    }
    EXPECT_EQ(file->Size().value(), kBlockBytes + total);

    std::vector<IoRequest> bad(3, write);
    bad[0].length = total - kDirectIoAlignment;  // Not the buffers' total.
    bad[1].op = IoOp::kRead;                     // Reads do not gather.
    std::vector<iovec> many(kIoVectorsMax + 1, gather[0]);
    bad[2].gather = many;
    bad[2].length = many.size() * gather[0].iov_len;
    std::vector<iovec> misaligned = gather;
    misaligned[1].iov_base = static_cast<std::byte*>(misaligned[1].iov_base) + 512;
    if (file->direct()) {
      bad.push_back(write);
      bad.back().gather = misaligned;
    }
    for (const IoRequest& r : bad) {
      const IoRequest pair[] = {write, r};
      auto accepted = queue->Submit(pair);
      EXPECT_TRUE(accepted.status().IsInvalidArgument()) << accepted.status().ToString();
      EXPECT_EQ(queue->in_flight(), 0u);
    }
  }
}

TEST_P(IoQueueTest, SubmitRespectsDepth) {
  std::unique_ptr<File> file = Open("depth", OpenMode::kTruncate, DirectIo::kOff);
  std::unique_ptr<IoQueue> queue = NewQueue(4);
  ASSERT_NE(queue, nullptr);
  std::vector<std::byte> buffer(10 * 512);
  std::vector<IoRequest> requests;
  for (uint64_t i = 0; i < 10; ++i) {
    requests.push_back({.op = IoOp::kWrite,
                        .file = file.get(),
                        .offset = i * 512,
                        .buffer = buffer.data() + i * 512,
                        .length = 512,
                        .user_data = i});
  }
  std::span<const IoRequest> rest(requests);
  auto accepted = queue->Submit(rest);
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(*accepted, 4u);
  EXPECT_EQ(queue->in_flight(), 4u);
  EXPECT_EQ(queue->Submit(rest.subspan(4)).value(), 0u);  // Full: nothing more accepted.
  rest = rest.subspan(4);
  std::vector<IoCompletion> out(16);
  size_t completed = 0;
  for (int round = 0; round < 100 && completed < requests.size(); ++round) {
    auto more = queue->Submit(rest);
    ASSERT_TRUE(more.ok());
    rest = rest.subspan(*more);
    EXPECT_LE(queue->in_flight(), 4u);
    auto n = queue->Poll(out, 1, 5'000'000);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_GE(*n, 1u);
    for (size_t i = 0; i < *n; ++i) EXPECT_TRUE(out[i].status.ok()) << out[i].status.ToString();
    completed += *n;
  }
  EXPECT_EQ(completed, requests.size());
  EXPECT_EQ(queue->in_flight(), 0u);
}

TEST_P(IoQueueTest, RejectsBadRequests) {
  std::unique_ptr<File> file = Open("direct", OpenMode::kTruncate, DirectIo::kPreferred);
  std::unique_ptr<IoQueue> queue = NewQueue(4);
  ASSERT_NE(queue, nullptr);
  auto buf = AlignedBuffer::Allocate(2 * kDirectIoAlignment);
  const IoRequest good{.op = IoOp::kWrite,
                       .file = file.get(),
                       .offset = 0,
                       .buffer = buf->data(),
                       .length = kDirectIoAlignment};
  std::vector<IoRequest> bad;
  if (file->direct()) {
    bad.push_back(good);
    bad.back().offset = 512;
    bad.push_back(good);
    bad.back().length = 100;
    bad.push_back(good);
    bad.back().buffer = buf->data() + 8;
  }
  bad.push_back(good);
  bad.back().file = nullptr;
  bad.push_back(good);
  bad.back().buffer = nullptr;
  bad.push_back(good);
  bad.back().length = kIoRequestBytesMax + kDirectIoAlignment;
  for (const IoRequest& r : bad) {
    // The bad request comes second: nothing of the batch is submitted.
    const IoRequest batch[] = {good, r};
    auto accepted = queue->Submit(batch);
    EXPECT_TRUE(accepted.status().IsInvalidArgument()) << accepted.status().ToString();
    EXPECT_EQ(queue->in_flight(), 0u);
  }
  EXPECT_TRUE(env_->NewIoQueue({.depth = 0, .backend = GetParam()}).status().IsInvalidArgument());
  EXPECT_TRUE(env_->NewIoQueue({.depth = kIoDepthMax + 1, .backend = GetParam()})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(env_->NewIoQueue({.backend = GetParam(), .fallback_threads = 0})
                  .status()
                  .IsInvalidArgument());
}

TEST_P(IoQueueTest, ErrorsComeBackInCompletions) {
  std::unique_ptr<File> writable = Open("ro", OpenMode::kCreate, DirectIo::kOff);
  ASSERT_TRUE(writable->WriteAt(0, std::vector<std::byte>(64)).ok());
  std::unique_ptr<File> read_only = Open("ro", OpenMode::kReadOnly, DirectIo::kOff);
  std::unique_ptr<File> closed = Open("closed", OpenMode::kCreate, DirectIo::kOff);
  ASSERT_TRUE(closed->Close().ok());
  std::unique_ptr<IoQueue> queue = NewQueue(4);
  ASSERT_NE(queue, nullptr);
  std::vector<std::byte> buffer(64);
  const IoRequest requests[] = {
      {.op = IoOp::kWrite,
       .file = read_only.get(),
       .buffer = buffer.data(),
       .length = 64,
       .user_data = 1},
      {.op = IoOp::kRead,
       .file = closed.get(),
       .buffer = buffer.data(),
       .length = 64,
       .user_data = 2},
      {.op = IoOp::kRead,
       .file = read_only.get(),
       .offset = 32,
       .buffer = buffer.data(),
       .length = 64,
       .user_data = 3},
  };
  std::vector<IoCompletion> done;
  Status s = RunToCompletion(*queue, requests, &done);
  EXPECT_TRUE(s.IsIoError()) << s.ToString();
  ASSERT_EQ(done.size(), 3u);
  for (const IoCompletion& c : done) {
    EXPECT_FALSE(c.status.ok()) << c.user_data;
    EXPECT_EQ(c.bytes, c.user_data == 3 ? 32u : 0u);
    if (c.user_data == 1) {
      EXPECT_NE(c.status.message().find(read_only->path()), std::string::npos);
    }
    // A short read is an error for RunToCompletion, naming file and offset.
    if (c.user_data == 3) {
      EXPECT_NE(c.status.message().find("short read of " + read_only->path() + " at offset 32"),
                std::string::npos)
          << c.status.ToString();
    }
  }
}

TEST_P(IoQueueTest, PollTimesOut) {
  std::unique_ptr<IoQueue> queue = NewQueue(2);
  ASSERT_NE(queue, nullptr);
  std::vector<IoCompletion> out(4);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(queue->Poll(out, 1, 10'000'000).value(), 0u);  // Nothing in flight: at once.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));

  PipeFile pipe;
  char bytes[8] = {};
  const IoRequest read{.op = IoOp::kRead,
                       .file = &pipe,
                       .buffer = reinterpret_cast<std::byte*>(bytes),
                       .length = sizeof(bytes),
                       .user_data = 7};
  ASSERT_EQ(queue->Submit({&read, 1}).value(), 1u);
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(queue->Poll(out, 1, 50'000).value(), 0u);  // Nothing completes.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(45));
  EXPECT_EQ(queue->Poll(out, 0, 0).value(), 0u);
  pipe.Feed("abcdefgh");
  auto n = queue->Poll(out, 1, 5'000'000);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(out[0].user_data, 7u);
  EXPECT_EQ(out[0].bytes, 8u);
  EXPECT_EQ(std::string_view(bytes, 8), "abcdefgh");
}

TEST_P(IoQueueTest, DestructorWaitsForInFlight) {
  PipeFile pipe;
  char bytes[4] = {};
  std::optional<std::thread> feeder;
  {
    std::unique_ptr<IoQueue> queue = NewQueue(2);
    ASSERT_NE(queue, nullptr);
    const IoRequest read{.op = IoOp::kRead,
                         .file = &pipe,
                         .buffer = reinterpret_cast<std::byte*>(bytes),
                         .length = 4};
    ASSERT_EQ(queue->Submit({&read, 1}).value(), 1u);
    feeder.emplace([&pipe] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      pipe.Feed("wxyz");
    });
  }  // The destructor returns only after the read landed, 50 ms later.
  feeder->join();
  EXPECT_EQ(std::string_view(bytes, 4), "wxyz");
}

INSTANTIATE_TEST_SUITE_P(Backends, IoQueueTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kThreadPool),
                         [](const ::testing::TestParamInfo<IoBackend>& param_info) {
                           return param_info.param == IoBackend::kIoUring ? "IoUring"
                                                                          : "ThreadPool";
                         });

TEST(IoQueueAutoTest, PicksABackendAndLogsAFallbackOnce) {
  CapturingLogger logger;
  std::unique_ptr<Env> env = NewPosixEnv({.logger = &logger});
  for (int i = 0; i < 2; ++i) {
    auto queue = env->NewIoQueue({.depth = 4, .backend = IoBackend::kAuto});
    ASSERT_TRUE(queue.ok()) << queue.status().ToString();
    const bool ring = (*queue)->backend_name() == "io_uring";
    // io_uring where the kernel allows it; otherwise the thread pool and a single log line.
    EXPECT_EQ(logger.lines().size(), ring ? 0u : 1u);
  }
}

}  // namespace
}  // namespace kvtier
