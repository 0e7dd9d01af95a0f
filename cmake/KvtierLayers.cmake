# Layering: core -> env -> {codecs, policies} -> tiers -> [cuda] -> engine -> serve -> {runtime, cli,
# bindings}; the CLI's benchmark drivers (tools/bench) sit on runtime and are linked by the CLI
# only. cuda (src/cuda) exists only with KVTIER_WITH_CUDA; the engine links it when it does.
#
# Every layer's headers are included as "<layer>/<file>.h". A layer lives in src/<layer> unless
# DIR names another folder of the source tree (kvtier_layer(bench DIR tools/bench ...)). A
# layer's library exports an include directory that holds a single link, <layer> -> its folder,
# so a target sees the headers of exactly the layers it links. An include of a higher layer from a lower one therefore fails to
# compile instead of silently creating a cycle.
#
# A layer may be split into several libraries that share its folder and include view: TARGET
# names the library (default kvtier_<layer>), e.g. the tiers layer's kvtier_tier_memory,
# kvtier_tier_ssd and kvtier_tier_remote (docs/architecture.md, "Packages").

function(kvtier_layer name)
  cmake_parse_arguments(L "" "DIR;TARGET" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT L_DIR)
    set(L_DIR "src/${name}")
  endif()
  if(NOT L_TARGET)
    set(L_TARGET "kvtier_${name}")
  endif()
  set(view "${CMAKE_BINARY_DIR}/layer_views/${name}")
  file(MAKE_DIRECTORY "${view}")
  if(NOT EXISTS "${view}/${name}")
    file(CREATE_LINK "${CMAKE_SOURCE_DIR}/${L_DIR}" "${view}/${name}" SYMBOLIC)
  endif()
  add_library(${L_TARGET} STATIC ${L_SOURCES})
  target_include_directories(${L_TARGET} PUBLIC
    "$<BUILD_INTERFACE:${view}>" "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>")
  target_link_libraries(${L_TARGET} PUBLIC ${L_DEPS} PRIVATE kvtier_flags ${L_PRIVATE_DEPS})
endfunction()

# kvtier_shared_models_dir(<var>): the shared model files beside the repository
# (../shared/models), from the calling folder, which sits two levels below the repository root.
# REALPATH keeps this right when that folder is reached through a symlink from another source
# tree. Tests that use the files skip when they are absent.
function(kvtier_shared_models_dir var)
  get_filename_component(real_dir "${CMAKE_CURRENT_LIST_DIR}" REALPATH)
  get_filename_component(models_dir "${real_dir}/../../../shared/models" ABSOLUTE)
  set(${var} "${models_dir}" PARENT_SCOPE)
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
