#!/usr/bin/env bash
# Goal: `cmake --install` yields a working kvtier: the `kvtier` command (bin/), libkvtier.so with
# its soname link, the public headers, the CMake package (config, version file, targets) and the
# pkg-config file, and the Python package (kvtier/ with its extension and vllm.py); and the build
# tree's CMake package and kvtier.pc work too, without installing. Programs built against either
# run without LD_LIBRARY_PATH, and no internal symbol leaks from libkvtier.so.
# Method: install the already-built tree into a temporary prefix; check the files and links; build
# examples/consumer against the prefix with CMake (find_package(kvtier) -> kvtier::kvtier: the C
# API from C and C++, and the C++ API; kvtier::kvtier_host: the C++ API over a host-only engine,
# whose program and library need neither liburing nor hiredis nor libipsec-mb: readelf -d, ldd)
# and with pkg-config (plain cc and c++), then against the
# build tree (kvtier_DIR and PKG_CONFIG_PATH pointing into <build>/src/capi); run every program
# (each opens an engine, stores and loads a block); run <prefix>/bin/kvtier --version; import the
# Python module from the prefix alone and store and load a block through it.
# Usage: install_test.sh <build dir> <consumer source dir> <cmake> <cc> <c++> <generator>
#                        [<python3>]   (no Python check when empty or absent)
set -euo pipefail
build_dir=$1 consumer_dir=$2 cmake_bin=$3 cc=$4 cxx=$5 generator=$6 python=${7:-}
# Every program below must find libkvtier.so by itself (run path from the package).
unset LD_LIBRARY_PATH

work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier_install_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "install_test: $*" >&2; exit 1; }

echo "== cmake --install into $prefix"
"$cmake_bin" --install "$build_dir" --prefix "$prefix"
for f in include/kvtier/c_api.h include/kvtier/status.h include/kvtier/result.h \
         include/kvtier/version.h include/kvtier/engine.h include/kvtier/layout.h \
         include/kvtier/options.h include/kvtier/stats.h; do
  test -f "$prefix/$f" || fail "missing $f"
done
lib=$(find "$prefix" -name 'libkvtier.so' | head -n1)
host_lib=$(find "$prefix" -name 'libkvtier_host.so' | head -n1)
test -n "$host_lib" || fail "libkvtier_host.so not installed"
test -n "$lib" || fail "libkvtier.so not installed"
libdir=$(dirname "$lib")
version=$(grep -o '"[0-9.]*"' "$prefix/include/kvtier/version.h" | tr -d '"')

echo "== the library's soname and its links"
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
abi=$(sed -n 's/^#define KVTIER_ABI_VERSION \([0-9]*\)$/\1/p' "$prefix/include/kvtier/c_api.h")
test "$soname" = "libkvtier.so.$abi" || fail "SONAME is '$soname', expected libkvtier.so.$abi"
test -L "$lib" || fail "libkvtier.so is not a link to $soname"
test -f "$libdir/$soname" || fail "$soname (the file programs load) not installed"
test "$(readlink -f "$lib")" = "$(readlink -f "$libdir/$soname")" ||
  fail "libkvtier.so and $soname are different files"

echo "== the CMake package and the pkg-config file"
for f in kvtierConfig.cmake kvtierConfigVersion.cmake kvtierTargets.cmake; do
  test -f "$libdir/cmake/kvtier/$f" || fail "missing $libdir/cmake/kvtier/$f"
done
test -f "$libdir/pkgconfig/kvtier.pc" || fail "missing $libdir/pkgconfig/kvtier.pc"

echo "== exported symbols: only the C API, the C++ API (kvtier::api) and kvtier::Status"
leaked=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^kvtier_' |
         grep -v '^_ZN6kvtier6Status\|^_ZNK6kvtier6Status\|^_ZN6kvtier14StatusCodeName' |
         grep -v '^_ZN6kvtier3api\|^_ZNK6kvtier3api' |
         grep -v '^KVTIER_1$' || true)
if [ -n "$leaked" ]; then
  echo "unexpected exported symbols:"; echo "$leaked" | head -n 20; exit 1
fi

echo "== libkvtier_host.so: the C++ API only, and no SSD or remote tier dependency"
leaked=$(nm -D --defined-only "$host_lib" | awk '{print $3}' |
         grep -v '^_ZN6kvtier6Status\|^_ZNK6kvtier6Status\|^_ZN6kvtier14StatusCodeName' |
         grep -v '^_ZN6kvtier3api\|^_ZNK6kvtier3api' | grep -v '^KVTIER_HOST_1$' || true)
if [ -n "$leaked" ]; then
  echo "unexpected exported symbols in libkvtier_host.so:"; echo "$leaked" | head -n 20; exit 1
fi
# The host-only program and library: nothing of the SSD tier (liburing), the remote tier (hiredis)
# or their crypto (libipsec-mb, libssl) among their needed libraries, direct or indirect.
host_banned='lib(uring|hiredis|hiredis_ssl|IPSec_MB|ssl)\.so'
check_host_only() {
  local needed
  needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  test -n "$needed" || fail "readelf -d $1 lists no NEEDED libraries"
  if echo "$needed" | grep -E "$host_banned"; then fail "$1 needs an SSD or remote tier library"; fi
  if ldd "$1" | grep -E "$host_banned"; then fail "$1 loads an SSD or remote tier library"; fi
}
check_host_only "$host_lib"

echo "== the installed command"
test -x "$prefix/bin/kvtier" || fail "bin/kvtier not installed"
out=$("$prefix/bin/kvtier" --version)
test "$out" = "kvtier $version" || fail "bin/kvtier --version printed '$out', expected 'kvtier $version'"

echo "== find_package(kvtier) from the prefix"
"$cmake_bin" -S "$consumer_dir" -B "$work/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx"
"$cmake_bin" --build "$work/build"
"$work/build/kvtier_consumer" "$work/data-cmake"
"$work/build/kvtier_consumer_cxx" "$work/data-cmake-cxx"
"$work/build/kvtier_consumer_api" "$work/data-cmake-api"
"$work/build/kvtier_consumer_host"
check_host_only "$work/build/kvtier_consumer_host"
readelf -d "$work/build/kvtier_consumer_host" | grep -q 'NEEDED.*\[libkvtier_host\.so' ||
  fail "kvtier_consumer_host does not link libkvtier_host.so"

echo "== pkg-config from the prefix"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists --print-errors kvtier
test "$(pkg-config --modversion kvtier)" = "$version" || fail "kvtier.pc has another version"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/consumer_pc" "$consumer_dir/main.c" \
  $(pkg-config --cflags --libs kvtier)
"$work/consumer_pc" "$work/data-pc"
# Without -Wno-missing-field-initializers, GCC's -Wextra flags every designated initializer that
# leaves a field to its default, which is how the options structs are meant to be written.
# shellcheck disable=SC2046
"$cxx" -std=c++20 -Wall -Wextra -Wno-missing-field-initializers -Werror \
  -o "$work/consumer_api_pc" "$consumer_dir/api_main.cc" $(pkg-config --cflags --libs kvtier)
"$work/consumer_api_pc" "$work/data-api-pc"

echo "== the build tree's package (not installed)"
"$cmake_bin" -S "$consumer_dir" -B "$work/build-tree" -G "$generator" \
  -Dkvtier_DIR="$build_dir/src/capi" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx"
"$cmake_bin" --build "$work/build-tree"
"$work/build-tree/kvtier_consumer" "$work/data-tree"
"$work/build-tree/kvtier_consumer_cxx" "$work/data-tree-cxx"
"$work/build-tree/kvtier_consumer_api" "$work/data-tree-api"
"$work/build-tree/kvtier_consumer_host"
check_host_only "$work/build-tree/kvtier_consumer_host"
export PKG_CONFIG_PATH="$build_dir/src/capi"
test "$(pkg-config --modversion kvtier)" = "$version" || fail "the build tree's kvtier.pc differs"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/consumer_tree_pc" "$consumer_dir/main.c" \
  $(pkg-config --cflags --libs kvtier)
"$work/consumer_tree_pc" "$work/data-tree-pc"
# shellcheck disable=SC2046
"$cxx" -std=c++20 -Wall -Wextra -Wno-missing-field-initializers -Werror \
  -o "$work/consumer_tree_api_pc" "$consumer_dir/api_main.cc" $(pkg-config --cflags --libs kvtier)
"$work/consumer_tree_api_pc" "$work/data-tree-api-pc"

if [ -n "$python" ]; then
  echo "== the Python package from the prefix alone"
  site=$(cd "$prefix" && find . -path '*/site-packages/kvtier/__init__.py' | head -n1)
  test -n "$site" || fail "no site-packages/kvtier/__init__.py under the prefix"
  site=$prefix/${site#./}
  site=${site%/kvtier/__init__.py}
  test -f "$site/kvtier/vllm.py" || fail "kvtier/vllm.py not installed"
  (cd "$work" && PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 "$python" -I -c '
import sys
sys.path.insert(0, sys.argv[1])  # -I drops PYTHONPATH; only the prefix may provide kvtier.
import numpy as np
import kvtier
assert kvtier.__file__.startswith(sys.argv[1]), kvtier.__file__
layout = "layers=2,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"
with kvtier.Engine(layout=layout, host_bytes=1 << 20) as e:
    ns = e.make_namespace("install-test")
    tokens = list(range(16))
    src = np.random.default_rng(1).standard_normal(
        (1, e.layers) + e.block_shape).astype(e.numpy_dtype)
    with e.store(ns, tokens, src) as store:
        store.wait()
    dst = kvtier.empty_blocks(e, 1)
    with e.load(ns, tokens, dst) as load:
        for layer in range(e.layers):
            load.wait_layer(layer)
    assert (dst == src).all()
print("kvtier", kvtier.__version__, "from", kvtier.__file__)
' "$site") || fail "the installed Python package does not work"
fi
echo "install_test: OK"
