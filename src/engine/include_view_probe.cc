// A probe of the include views (CMakeLists.txt, "include_view_*" tests): compiled with the
// include directories of one of the engine's libraries, it includes INCLUDE_VIEW_PROBE_HEADER,
// which must fail to compile when that header is in a tier folder the library does not link,
// and compile when the library may see it.
#include INCLUDE_VIEW_PROBE_HEADER

int KvtierIncludeViewProbe() { return 0; }
