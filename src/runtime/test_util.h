// Helpers shared by the runtime tests (test-only; not part of kvtier_runtime): where the shared
// model files are, and a temporary directory per test.
//
// Thread safety: none needed (tests are single-threaded). Ownership: TempDir removes its
// directory on destruction.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvtier::runtime::testing {

inline std::string SharedModelPath(const std::string& name) {
  return std::string(KVTIER_SHARED_MODELS_DIR) + "/" + name;
}

inline bool SharedModelExists(const std::string& name) {
  return std::filesystem::exists(SharedModelPath(name));
}

// GTEST_SKIP must run in the test body; this returns the message to skip with, or "".
inline std::string MissingModelMessage(const std::string& name) {
  if (SharedModelExists(name)) return "";
  return "shared model file " + SharedModelPath(name) +
         " is missing (expected ../shared/models beside the repository); skipping";
}

#define KV_SKIP_WITHOUT_MODEL(name)                                                        \
  do {                                                                                     \
    const std::string kv_missing_ = ::kvtier::runtime::testing::MissingModelMessage(name); \
    if (!kv_missing_.empty()) GTEST_SKIP() << kv_missing_;                                 \
  } while (0)

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvtier-rt-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string Path(const std::string& name) const { return path_ + "/" + name; }

  std::string Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }

 private:
  std::string path_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace kvtier::runtime::testing
