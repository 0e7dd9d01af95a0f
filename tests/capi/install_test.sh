#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds examples/consumer against it twice:
# with CMake (find_package(kvtier) -> kvtier::kvtier: the C API from C and C++, and the C++ API)
# and with pkg-config (plain cc and c++). Then the same against the build tree itself, without
# installing (kvtier_DIR and PKG_CONFIG_PATH pointing into <build>/src/capi).
# Usage: install_test.sh <build dir> <consumer source dir> <cmake> <cc> <c++> <generator>
set -euo pipefail
build_dir=$1 consumer_dir=$2 cmake_bin=$3 cc=$4 cxx=$5 generator=$6

work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier_install_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== cmake --install into $prefix"
"$cmake_bin" --install "$build_dir" --prefix "$prefix"
for f in include/kvtier/c_api.h include/kvtier/status.h include/kvtier/result.h \
         include/kvtier/version.h include/kvtier/engine.h include/kvtier/layout.h \
         include/kvtier/options.h include/kvtier/stats.h; do
  test -f "$prefix/$f" || { echo "missing $f"; exit 1; }
done
lib=$(find "$prefix" -name 'libkvtier.so' | head -n1)
test -n "$lib" || { echo "libkvtier.so not installed"; exit 1; }
libdir=$(dirname "$lib")

echo "== exported symbols: only the C API, the C++ API (kvtier::api) and kvtier::Status"
leaked=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^kvtier_' |
         grep -v '^_ZN6kvtier6Status\|^_ZNK6kvtier6Status\|^_ZN6kvtier14StatusCodeName' |
         grep -v '^_ZN6kvtier3api\|^_ZNK6kvtier3api' |
         grep -v '^KVTIER_1$' || true)
if [ -n "$leaked" ]; then
  echo "unexpected exported symbols:"; echo "$leaked" | head -n 20; exit 1
fi

echo "== find_package(kvtier)"
"$cmake_bin" -S "$consumer_dir" -B "$work/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx"
"$cmake_bin" --build "$work/build"
"$work/build/kvtier_consumer" "$work/data-cmake"
"$work/build/kvtier_consumer_cxx" "$work/data-cmake-cxx"
"$work/build/kvtier_consumer_api" "$work/data-cmake-api"

echo "== pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists --print-errors kvtier
test "$(pkg-config --modversion kvtier)" = "$(grep -o '"[0-9.]*"' "$prefix/include/kvtier/version.h" | tr -d '"')"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/consumer_pc" "$consumer_dir/main.c" \
  $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$libdir" "$work/consumer_pc" "$work/data-pc"
# Without -Wno-missing-field-initializers, GCC's -Wextra flags every designated initializer that
# leaves a field to its default, which is how the options structs are meant to be written.
# shellcheck disable=SC2046
"$cxx" -std=c++20 -Wall -Wextra -Wno-missing-field-initializers -Werror \
  -o "$work/consumer_api_pc" "$consumer_dir/api_main.cc" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$libdir" "$work/consumer_api_pc" "$work/data-api-pc"

echo "== the build tree's package (not installed)"
"$cmake_bin" -S "$consumer_dir" -B "$work/build-tree" -G "$generator" \
  -Dkvtier_DIR="$build_dir/src/capi" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx"
"$cmake_bin" --build "$work/build-tree"
"$work/build-tree/kvtier_consumer" "$work/data-tree"
"$work/build-tree/kvtier_consumer_api" "$work/data-tree-api"
export PKG_CONFIG_PATH="$build_dir/src/capi"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/consumer_tree_pc" "$consumer_dir/main.c" \
  $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$build_dir/src/capi" "$work/consumer_tree_pc" "$work/data-tree-pc"
echo "install_test: OK"
