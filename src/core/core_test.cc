// Checks the core value types: Status codes and errno mapping, Result<T> and the early-return
// macros, little-endian encoding round trips and the bounds-checked reader, AlignedBuffer
// alignment and ownership, HugePageBuffer's 2 MiB start, zeroed bytes and ownership, UniqueFd closing, and SHA-256 against the FIPS 180-2 test vectors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include "core/aligned_buffer.h"
#include "core/coding.h"
#include "core/huge_page_buffer.h"
#include "core/sha256.h"
#include "core/unique_fd.h"
#include "kvtier/result.h"

namespace kvtier {
namespace {

TEST(StatusTest, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status s = Status::Corruption("bad crc");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToString(), "Corruption: bad crc");
  EXPECT_EQ(s.WithContext("segment 3").message(), "segment 3: bad crc");
  EXPECT_TRUE(Status::Busy("x").IsRetryable());
  EXPECT_FALSE(Status::IoError("x").IsRetryable());
}

TEST(StatusTest, FromErrnoMapsCodes) {
  EXPECT_TRUE(Status::FromErrno(ENOSPC, "write").IsNoSpace());
  EXPECT_TRUE(Status::FromErrno(ENOENT, "open").IsNotFound());
  EXPECT_TRUE(Status::FromErrno(EIO, "read").IsIoError());
  EXPECT_EQ(Status::FromErrno(EIO, "read").message(), "read: Input/output error");
}

Result<int> ParsePositive(int v) {
  if (v <= 0) return Status::InvalidArgument("not positive");
  return v;
}

Status UseMacros(int v, int* out) {
  KV_ASSIGN_OR_RETURN(int parsed, ParsePositive(v));
  KV_RETURN_IF_ERROR(parsed > 100 ? Status::InvalidArgument("too big") : Status::Ok());
  *out = parsed;
  return Status::Ok();
}

TEST(ResultTest, ValueAndError) {
  Result<int> r = ParsePositive(5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  Result<int> e = ParsePositive(-1);
  EXPECT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsInvalidArgument());
  EXPECT_EQ(e.value_or(7), 7);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(3);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 3);
}

TEST(ResultTest, Macros) {
  int out = 0;
  EXPECT_TRUE(UseMacros(10, &out).ok());
  EXPECT_EQ(out, 10);
  EXPECT_TRUE(UseMacros(-1, &out).IsInvalidArgument());
  EXPECT_TRUE(UseMacros(1000, &out).IsInvalidArgument());
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> e = Status::IoError("x");
  EXPECT_DEATH((void)e.value(), "value\\(\\) on an error Result");
}

TEST(CodingTest, FixedRoundTripAndByteOrder) {
  std::byte buf[8];
  EncodeFixed32(buf, 0x04030201u);
  EXPECT_EQ(std::to_integer<int>(buf[0]), 1);
  EXPECT_EQ(std::to_integer<int>(buf[3]), 4);
  EXPECT_EQ(DecodeFixed32(buf), 0x04030201u);
  EncodeFixed64(buf, 0x0807060504030201ull);
  EXPECT_EQ(std::to_integer<int>(buf[7]), 8);
  EXPECT_EQ(DecodeFixed64(buf), 0x0807060504030201ull);
  EncodeFixed16(buf, 0xBEEF);
  EXPECT_EQ(DecodeFixed16(buf), 0xBEEF);
  std::string s;
  PutFixed32(&s, 7);
  PutLengthPrefixed(&s, "abc");
  EXPECT_EQ(s.size(), 4u + 4u + 3u);
}

TEST(CodingTest, ReaderStopsAtEnd) {
  std::string s;
  PutFixed32(&s, 42);
  PutFixed16(&s, 9);
  ByteReader r(std::as_bytes(std::span(s.data(), s.size())));
  uint32_t a = 0;
  uint16_t b = 0;
  uint64_t c = 0;
  EXPECT_TRUE(r.GetFixed32(&a));
  EXPECT_TRUE(r.GetFixed16(&b));
  EXPECT_FALSE(r.GetFixed64(&c));  // Nothing left: must fail, not overrun.
  EXPECT_EQ(a, 42u);
  EXPECT_EQ(b, 9u);
  std::span<const std::byte> out;
  EXPECT_FALSE(r.GetBytes(1, &out));
}

TEST(AlignedBufferTest, AlignmentAndMove) {
  auto r = AlignedBuffer::Allocate(10000);
  ASSERT_TRUE(r.ok());
  AlignedBuffer a = std::move(r).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kDirectIoAlignment, 0u);
  EXPECT_EQ(a.size(), 10000u);
  EXPECT_EQ(a.capacity(), 12288u);
  EXPECT_EQ(std::to_integer<int>(a.data()[9999]), 0);
  AlignedBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.size(), 10000u);
  EXPECT_TRUE(AlignedBuffer::Allocate(16, 3).status().IsInvalidArgument());
  EXPECT_FALSE(AlignedBuffer::Allocate(SIZE_MAX - 10).ok());
}

TEST(HugePageBufferTest, StartsOnAHugePageZeroedAndMoves) {
  auto r = HugePageBuffer::Allocate(3 * kMiB + 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  HugePageBuffer a = std::move(r).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kTransparentHugePageBytes, 0u);
  EXPECT_EQ(a.size(), 3 * kMiB + 5);
  EXPECT_EQ(a.span().size(), a.size());
  for (size_t at = 0; at < a.size(); at += 4096) ASSERT_EQ(std::to_integer<int>(a.data()[at]), 0);
  a.data()[a.size() - 1] = std::byte{7};  // The whole size is writable.
  HugePageBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(std::to_integer<int>(b.data()[b.size() - 1]), 7);
  b = HugePageBuffer();  // Unmapped; an empty buffer is destroyed quietly.
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_TRUE(HugePageBuffer::Allocate(0).status().IsInvalidArgument());
  EXPECT_FALSE(HugePageBuffer::Allocate(SIZE_MAX - 10).ok());
}

TEST(UniqueFdTest, ClosesOnDestructionAndMove) {
  int raw = -1;
  {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    UniqueFd moved = std::move(fd);
    EXPECT_FALSE(fd.valid());
    EXPECT_EQ(moved.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // Closed by the destructor.
  UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.Close().ok());
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(fd.Close().ok());  // Closing twice is a no-op.
}

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(ToHex(Sha256Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ToHex(Sha256Of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("abcdbcdecdefdefgefghfghighijhijk");
  h.Update("ijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(ToHex(h.Finish()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, HexRoundTrip) {
  Hash256 h = Sha256Of("x");
  Hash256 back{};
  ASSERT_TRUE(FromHex(ToHex(h), &back));
  EXPECT_EQ(h, back);
  EXPECT_FALSE(FromHex("zz", &back));
  EXPECT_FALSE(FromHex(std::string(64, 'g'), &back));
}

}  // namespace
}  // namespace kvtier
