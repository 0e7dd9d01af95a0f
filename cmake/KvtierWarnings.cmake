# Compiler flags shared by every kvtier target.
add_library(kvtier_flags INTERFACE)
target_compile_options(kvtier_flags INTERFACE
  -Wall -Wextra -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference
  # Options structs are filled with designated initializers, and omitted fields take their
  # documented defaults on purpose; -Wextra would flag every such call site.
  -Wno-missing-field-initializers)
# No silent fused multiply-add: GCC contracts a*b+c (even written as separate intrinsics) into
# FMA where the target has it, so the same source would round differently per function and per
# machine. Codecs promise bit-identical output from their scalar and AVX2 kernels.
target_compile_options(kvtier_flags INTERFACE -ffp-contract=off)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 at -O3 reports std::string appends inside libstdc++ as overlapping memcpy (a known
  # false positive of -Wrestrict in char_traits.h); it fires in headers we do not own.
  target_compile_options(kvtier_flags INTERFACE -Wno-restrict)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(kvtier_flags INTERFACE -Wthread-safety)
endif()
if(KVTIER_WERROR)
  target_compile_options(kvtier_flags INTERFACE -Werror)
endif()
if(KVTIER_SANITIZE)
  target_compile_options(kvtier_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(kvtier_flags INTERFACE -fsanitize=address,undefined)
endif()
