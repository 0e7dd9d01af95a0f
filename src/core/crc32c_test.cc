// Checks CRC32C against published test vectors (RFC 3720 B.4 and the "123456789" check value),
// on both the dispatched (SSE4.2 where present) and the portable path, and that Extend over
// pieces equals one pass over the whole, for random data and every split point.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kvtier {
namespace {

struct Vector {
  std::vector<uint8_t> data;
  uint32_t crc;
};

std::vector<Vector> Rfc3720Vectors() {
  std::vector<Vector> v;
  v.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u});
  std::vector<uint8_t> inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    dec[static_cast<size_t>(i)] = static_cast<uint8_t>(31 - i);
  }
  v.push_back({inc, 0x46DD794Eu});
  v.push_back({dec, 0x113FDB5Cu});
  return v;
}

TEST(Crc32cTest, PublishedVectors) {
  for (const auto& v : Rfc3720Vectors()) {
    EXPECT_EQ(crc32c::Value(v.data.data(), v.data.size()), v.crc);
    EXPECT_EQ(crc32c::ExtendPortable(0, v.data.data(), v.data.size()), v.crc);
  }
  EXPECT_EQ(crc32c::Value(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c::ExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c::Value(std::string_view("")), 0u);
}

TEST(Crc32cTest, ExtendEqualsWholeAndPathsAgree) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<uint8_t> data(4099);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  EXPECT_EQ(crc32c::ExtendPortable(0, data.data(), data.size()), whole);
  for (size_t split = 0; split <= data.size(); split += 37) {
    const uint32_t a = crc32c::Extend(0, data.data(), split);
    EXPECT_EQ(crc32c::Extend(a, data.data() + split, data.size() - split), whole) << split;
  }
}

TEST(Crc32cTest, MaskRoundTrip) {
  const uint32_t crc = crc32c::Value(std::string_view("foo"));
  EXPECT_NE(crc32c::Mask(crc), crc);
  EXPECT_NE(crc32c::Mask(crc32c::Mask(crc)), crc);
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(crc)), crc);
}

}  // namespace
}  // namespace kvtier
