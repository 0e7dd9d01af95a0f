// Helpers shared by kvtier's tests: a temporary directory removed at scope exit, a Logger that
// keeps the lines it receives so tests can assert on what was logged, and deterministic block
// payloads and token sequences.
//
// Test-only: this library is linked into test binaries, never into the engine.
// Thread safety: ScopedTempDir is not synchronized; CapturingLogger accepts concurrent Log() calls.
// Ownership: ScopedTempDir owns its directory tree and removes it in its destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/logger.h"
#include "core/mutex.h"
#include "core/sha256.h"
#include "kvtier/result.h"

namespace kvtier {

class ScopedTempDir {
 public:
  // Makes a fresh directory "<base>/kvtier-XXXXXX" with mkdtemp. An empty `base` means $TMPDIR,
  // or /tmp when that is unset.
  static Result<ScopedTempDir> Create(const std::string& base = "");
  ~ScopedTempDir();

  ScopedTempDir(ScopedTempDir&& other) noexcept;
  ScopedTempDir& operator=(ScopedTempDir&& other) = delete;
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // "<path>/<name>".
  std::string Join(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;  // Empty once moved from.
};

// Deterministic block bytes for (chunk hash, layer), `bytes` long: finite FP16 values (every
// exponent below 0x1F), distinct per chunk and layer, so codecs accept them and a mix-up shows.
std::vector<std::byte> TestBlockPayload(const Hash256& chunk, uint32_t layer, uint64_t bytes);
// Tokens seed * 100003 + i for i < n: distinct sequences (and so chunk hashes) per seed.
std::vector<uint32_t> TestTokens(uint32_t seed, size_t n);

// The bytes of the file at `path`, or "<why>" when it cannot be read: tests compare a file that
// must be left alone with what it held.
std::string ReadFileOrWhy(const std::string& path);
// XORs the byte at `offset` of the file at `path` with `mask` (every bit by default): a damage
// that always changes the byte, whatever it held (a fixed byte written over random ciphertext
// equals it 1 time in 256). An error names the file when it is shorter or cannot be opened.
Status FlipByteOfFile(const std::string& path, uint64_t offset, uint8_t mask = 0xFF);
// Whether `s`'s message holds `needle`.
bool MessageContains(const Status& s, std::string_view needle);

class CapturingLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message) override KV_EXCLUDES(mu_);
  std::vector<std::string> lines() const KV_EXCLUDES(mu_);
  // Lines that contain `needle`.
  size_t CountContaining(std::string_view needle) const KV_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::vector<std::string> lines_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier
