// Compiles include/kvtier/c_api.h as C++ with kvtier's warnings: C++ consumers include it too.
#include <type_traits>

#include "kvtier/c_api.h"

static_assert(std::is_standard_layout_v<kvtier_engine_options_t>);
static_assert(std::is_trivially_copyable_v<kvtier_error_t>);
