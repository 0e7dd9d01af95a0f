// Goal: each tier library (kvtier_tier_interface, _memory, _crypto, _ssd, _remote) links on its
// own with only the libraries it declares, every object of it included, so a tier can be linked
// without the others (docs/architecture.md, "Packages"); a new cross-library call without its
// dependency fails this build instead of surfacing in the first program that needs it.
// Method: one executable per library, linked with the library as a whole archive
// ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>, src/tiers/CMakeLists.txt); building it is the check, and the
// test it runs only confirms the executable starts.
#include <gtest/gtest.h>

TEST(TierLibraryLinksAlone, Starts) { SUCCEED(); }
