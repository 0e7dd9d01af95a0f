// Helpers of the table tests (options_table_test, stats_table_test): a file of the source tree
// (KVTIER_SOURCE_DIR, defined by the test's CMake target), and the check that a generated doc is
// what its generator writes.
//
// Thread safety: test-only; call from the test's thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvtier {

inline std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Expects the source file `relative` to be `generated`; with the environment variable `write_env`
// naming a file, writes `generated` there instead and skips the test.
inline void ExpectGeneratedDoc(const std::string& relative, const std::string& generated,
                               const char* write_env) {
  if (const char* path = std::getenv(write_env)) {
    std::ofstream(path) << generated;
    GTEST_SKIP() << "wrote " << path;
  }
  EXPECT_EQ(ReadSource(relative), generated)
      << relative << " is generated: see its header to regenerate it";
}

}  // namespace kvtier
