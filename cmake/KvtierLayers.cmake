# Layering: core -> env -> {codecs, policies} -> tiers -> [cuda] -> engine -> {runtime, cli,
# bindings}. cuda (src/cuda) exists only with KVTIER_WITH_CUDA; the engine links it when it does.
#
# Every layer's headers are included as "<layer>/<file>.h". A layer's library exports an include
# directory that holds a single link, <layer> -> src/<layer>, so a target sees the headers of
# exactly the layers it links. An include of a higher layer from a lower one therefore fails to
# compile instead of silently creating a cycle.

function(kvtier_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(view "${CMAKE_BINARY_DIR}/layer_views/${name}")
  file(MAKE_DIRECTORY "${view}")
  if(NOT EXISTS "${view}/${name}")
    file(CREATE_LINK "${CMAKE_SOURCE_DIR}/src/${name}" "${view}/${name}" SYMBOLIC)
  endif()
  add_library(kvtier_${name} STATIC ${L_SOURCES})
  target_include_directories(kvtier_${name} PUBLIC
    "$<BUILD_INTERFACE:${view}>" "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>")
  target_link_libraries(kvtier_${name} PUBLIC ${L_DEPS} PRIVATE kvtier_flags ${L_PRIVATE_DEPS})
endfunction()

# kvtier_test(<name> <source> LIBS ...): one GoogleTest binary registered with CTest.
function(kvtier_test name source)
  if(NOT KVTIER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "" "LIBS;LABELS" ${ARGN})
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${T_LIBS} kvtier_flags GTest::gtest GTest::gtest_main
                                        GTest::gmock)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()
