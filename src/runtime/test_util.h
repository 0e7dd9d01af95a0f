// Helpers shared by the runtime tests (test-only; not part of kvtier_runtime): where the shared
// model files are, and a temporary directory per test.
//
// Environment (read here because this is test code; the library never reads it):
//   KVTIER_SHARED_MODELS_DIR   replaces the model directory found at configure time.
//   KVTIER_REQUIRE_RESOURCES=1 makes a missing model file a test failure instead of a skip, so a
//                              CI run that lost the models cannot pass by skipping.
//
// Thread safety: none needed (tests are single-threaded). Ownership: TempDir removes its
// directory on destruction.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace kvtier::runtime::testing {

inline bool ResourcesRequired() {
  const char* v = std::getenv("KVTIER_REQUIRE_RESOURCES");
  return v != nullptr && std::string_view(v) == "1";
}

inline std::string SharedModelPath(const std::string& name) {
  const char* dir = std::getenv("KVTIER_SHARED_MODELS_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : KVTIER_SHARED_MODELS_DIR) + "/" + name;
}

inline bool SharedModelExists(const std::string& name) {
  return std::filesystem::exists(SharedModelPath(name));
}

// GTEST_SKIP and FAIL must run in the test body; this returns the reason, or "" when present.
inline std::string MissingModelMessage(const std::string& name) {
  if (SharedModelExists(name)) return "";
  return "shared model file " + SharedModelPath(name) +
         " is missing (expected ../shared/models beside the repository)";
}

// Skips the test when the model file is missing, or fails it under KVTIER_REQUIRE_RESOURCES=1.
#define KV_SKIP_WITHOUT_MODEL(name)                                                           \
  do {                                                                                        \
    const std::string kv_missing_ = ::kvtier::runtime::testing::MissingModelMessage(name);    \
    if (!kv_missing_.empty()) {                                                               \
      if (::kvtier::runtime::testing::ResourcesRequired()) {                                  \
        FAIL() << kv_missing_ << "; KVTIER_REQUIRE_RESOURCES=1 makes a missing resource fail"; \
      }                                                                                       \
      GTEST_SKIP() << kv_missing_ << "; skipping";                                            \
    }                                                                                         \
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
