#include "testing/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

namespace kvtier {

std::string ReadFileOrWhy(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return "<" + ec.message() + ">";
  std::string bytes(size, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

Status FlipByteOfFile(const std::string& path, uint64_t offset, uint8_t mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f.good()) return Status::IoError("cannot open " + path + " to damage it");
  f.seekg(static_cast<std::streamoff>(offset));
  const int byte = f.get();
  if (byte == std::char_traits<char>::eof()) {
    return Status::InvalidArgument(path + " is shorter than " + std::to_string(offset + 1));
  }
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(byte ^ mask));
  f.flush();
  if (!f.good()) return Status::IoError("cannot write to " + path);
  return Status::Ok();
}

bool MessageContains(const Status& s, std::string_view needle) {
  return s.message().find(needle) != std::string::npos;
}

Result<ScopedTempDir> ScopedTempDir::Create(const std::string& base) {
  std::string dir = base;
  if (dir.empty()) {
    // Tests may read the environment; engine code never does.
    const char* tmpdir = std::getenv("TMPDIR");
    dir = (tmpdir != nullptr && tmpdir[0] != '\0') ? tmpdir : "/tmp";
  }
  std::string templ = dir + "/kvtier-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + templ);
  return ScopedTempDir(std::move(templ));
}

ScopedTempDir::ScopedTempDir(ScopedTempDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

ScopedTempDir::~ScopedTempDir() {
  if (path_.empty()) return;
  std::error_code ec;  // A directory left behind in /tmp is not worth failing a test over.
  std::filesystem::remove_all(path_, ec);
}

void CapturingLogger::Log(LogLevel level, std::string_view message) {
  MutexLock lock(&mu_);
  lines_.push_back(std::string(LogLevelName(level)) + ": " + std::string(message));
}

std::vector<std::string> CapturingLogger::lines() const {
  MutexLock lock(&mu_);
  return lines_;
}

size_t CapturingLogger::CountContaining(std::string_view needle) const {
  MutexLock lock(&mu_);
  size_t count = 0;
  for (const std::string& line : lines_)
    if (line.find(needle) != std::string::npos) ++count;
  return count;
}

std::vector<std::byte> TestBlockPayload(const Hash256& chunk, uint32_t layer, uint64_t bytes) {
  uint64_t x = layer * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < 8; ++i) x ^= uint64_t{chunk[i]} << (8 * i);
  std::vector<std::byte> out(bytes);
  for (size_t i = 0; i + 1 < out.size(); i += 2) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
    out[i + 1] = static_cast<std::byte>((x >> 8) & 0x3B);  // Exponent < 0x1F: finite.
  }
  return out;
}

std::vector<uint32_t> TestTokens(uint32_t seed, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = seed * 100003u + static_cast<uint32_t>(i);
  return t;
}

}  // namespace kvtier
