// kvtier's version. The numbers come from the CMake project version.
#pragma once

namespace kvtier {

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
inline constexpr const char* kVersionString = "0.1.0";

}  // namespace kvtier
