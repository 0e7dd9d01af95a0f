// Small pieces shared by the `kvtier bench codec`, `bench quality` and `bench engine` reports: the
// median of a run of repetitions, a fresh scratch directory, a timer, and the shared model.
//
// Thread safety: pure functions, except MakeScratchDir (creates a directory).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::cli {

// The median of `values` (the mean of the two middle ones for an even count); 0 when empty.
double Median(std::vector<double> values);

// Creates a fresh directory "<parent>/<prefix>-XXXXXX" (mkdtemp, mode 0700) and returns its path;
// an empty `parent` means $TMPDIR, else /tmp. IoError naming the path when it cannot.
Result<std::string> MakeScratchDir(const std::string& parent, const std::string& prefix);

// The small trained model the benchmarks read when no --model is given.
inline constexpr const char* kSharedModelFile = "stories260K.gguf";

// A file of the shared model beside the repository: <dir>/shared/models/<file> for any ancestor
// <dir> of the working directory or of the kvtier binary (the repository's ../shared/models).
std::optional<std::string> FindSharedModel(const std::string& file = kSharedModelFile);

// Seconds since construction (steady clock).
class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace kvtier::cli
