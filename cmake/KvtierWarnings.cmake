# Compiler flags shared by every kvtier target.
add_library(kvtier_flags INTERFACE)
target_compile_options(kvtier_flags INTERFACE
  -Wall -Wextra -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference)
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
