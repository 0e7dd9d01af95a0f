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
# kvtier_tier_crypto and kvtier_tier_remote (docs/architecture.md, "Packages").
#
# A layer's name may be a path: a folder below another layer's folder that holds a library of
# its own (each tier below memory: kvtier_layer(tiers/ssd ...) is src/tiers/ssd, included as
# "tiers/ssd/<file>.h"). Its view links only that folder. The view of a layer whose folder
# holds such subfolders (FILES_ONLY) links the folder's own files one by one and none of its
# subfolders, so a library that links the tiers layer alone cannot include a tier's headers:
# the include fails to compile until the library links that tier.
function(kvtier_layer name)
  cmake_parse_arguments(L "FILES_ONLY" "DIR;TARGET" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT L_DIR)
    set(L_DIR "src/${name}")
  endif()
  if(NOT L_TARGET)
    string(REPLACE "/" "_" target_name "${name}")
    set(L_TARGET "kvtier_${target_name}")
  endif()
  string(REPLACE "/" "+" view_name "${name}")
  set(view "${CMAKE_BINARY_DIR}/layer_views/${view_name}")
  kvtier_layer_view("${view}" "${name}" "${CMAKE_SOURCE_DIR}/${L_DIR}" ${L_FILES_ONLY})
  add_library(${L_TARGET} STATIC ${L_SOURCES})
  target_include_directories(${L_TARGET} PUBLIC
    "$<BUILD_INTERFACE:${view}>" "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>")
  target_link_libraries(${L_TARGET} PUBLIC ${L_DEPS} PRIVATE kvtier_flags ${L_PRIVATE_DEPS})
endfunction()

# kvtier_layer_view(<view> <name> <folder> [files_only]): <view>/<name> shows <folder>: one link
# to it, or with files_only a folder of links to its files (headers added later need a CMake
# run, which CONFIGURE_DEPENDS asks for).
function(kvtier_layer_view view name folder files_only)
  get_filename_component(parent "${view}/${name}" DIRECTORY)
  file(MAKE_DIRECTORY "${parent}")
  if(NOT files_only)
    if(NOT EXISTS "${view}/${name}")
      file(CREATE_LINK "${folder}" "${view}/${name}" SYMBOLIC)
    endif()
    return()
  endif()
  file(MAKE_DIRECTORY "${view}/${name}")
  file(GLOB headers CONFIGURE_DEPENDS LIST_DIRECTORIES false RELATIVE "${folder}"
       "${folder}/*.h")
  foreach(header IN LISTS headers)
    if(NOT EXISTS "${view}/${name}/${header}")
      file(CREATE_LINK "${folder}/${header}" "${view}/${name}/${header}" SYMBOLIC)
    endif()
  endforeach()
endfunction()

# kvtier_layer_headers(<target> <layer> HEADERS <file>...): an interface library whose view shows
# only the named headers of <layer>'s folder: plain types (a tier's options) that a library may
# hold without linking the layer, and through which it cannot reach the layer's other headers.
function(kvtier_layer_headers target name)
  cmake_parse_arguments(H "" "" "HEADERS" ${ARGN})
  set(view "${CMAKE_BINARY_DIR}/layer_views/${target}")
  file(MAKE_DIRECTORY "${view}/${name}")
  foreach(header IN LISTS H_HEADERS)
    if(NOT EXISTS "${view}/${name}/${header}")
      file(CREATE_LINK "${CMAKE_SOURCE_DIR}/src/${name}/${header}" "${view}/${name}/${header}"
           SYMBOLIC)
    endif()
  endforeach()
  add_library(${target} INTERFACE)
  target_include_directories(${target} INTERFACE "$<BUILD_INTERFACE:${view}>")
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
