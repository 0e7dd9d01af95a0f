# Compiler flags shared by every kvtier target. They are GCC/Clang flags that nvcc rejects, so CUDA
# sources (src/cuda) never see them: each option below is wrapped in $<${kvtier_not_cuda}:...>,
# which leaves C and C++ compilation exactly as before. src/cuda/CMakeLists.txt passes nvcc and
# its host compiler their own warning flags.
set(kvtier_not_cuda "$<NOT:$<COMPILE_LANGUAGE:CUDA>>")
add_library(kvtier_flags INTERFACE)
set(kvtier_warning_flags
  -Wall -Wextra -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference
  # Options structs are filled with designated initializers, and omitted fields take their
  # documented defaults on purpose; -Wextra would flag every such call site.
  -Wno-missing-field-initializers)
target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:${kvtier_warning_flags}>")
# No silent fused multiply-add: GCC contracts a*b+c (even written as separate intrinsics) into
# FMA where the target has it, so the same source would round differently per function and per
# machine. Codecs promise bit-identical output from their scalar and AVX2 kernels.
target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:-ffp-contract=off>")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 at -O3 reports std::string appends inside libstdc++ as overlapping memcpy (a known
  # false positive of -Wrestrict in char_traits.h); it fires in headers we do not own.
  target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:-Wno-restrict>")
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:-Wthread-safety>")
endif()
if(KVTIER_WERROR)
  target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:-Werror>")
endif()
if(KVTIER_SANITIZE)
  set(kvtier_sanitize_flags
    -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:${kvtier_sanitize_flags}>")
  target_link_options(kvtier_flags INTERFACE -fsanitize=address,undefined)
endif()
# ThreadSanitizer is a build of its own: it cannot be linked together with AddressSanitizer.
# The tsan preset (CMakePresets.json) turns it on for the concurrency tests; tests/tsan.supp
# lists the reports proven to be false positives, each with its reason.
option(KVTIER_TSAN "Build with ThreadSanitizer (not together with KVTIER_SANITIZE)" OFF)
if(KVTIER_TSAN)
  if(KVTIER_SANITIZE)
    message(FATAL_ERROR "KVTIER_TSAN and KVTIER_SANITIZE cannot be combined: ThreadSanitizer "
                        "and AddressSanitizer are separate builds")
  endif()
  set(kvtier_tsan_flags -fsanitize=thread -fno-omit-frame-pointer)
  target_compile_options(kvtier_flags INTERFACE "$<${kvtier_not_cuda}:${kvtier_tsan_flags}>")
  target_link_options(kvtier_flags INTERFACE -fsanitize=thread)
endif()
