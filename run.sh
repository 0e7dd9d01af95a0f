#!/usr/bin/env bash
# kvtier's front door. Each command installs what is missing (Debian packages), builds, and runs:
#   ./run.sh demo    the main job: the demo of the engine end to end
#   ./run.sh test    the whole test suite (unit, integration, crash, CLI and vLLM tests); also
#                    creates .venv-vllm with vLLM (scripts/setup_vllm_venv.sh, from PyPI) and
#                    .venv-lmcache over it (scripts/setup_lmcache_venv.sh) for the peer smokes
#   ./run.sh build   only install and build (Release, in build/)
# Environment: KVTIER_BUILD_DIR (default build), KVTIER_JOBS (default: number of CPUs).
set -euo pipefail
cd "$(dirname "$0")"

build_dir="${KVTIER_BUILD_DIR:-build}"
jobs="${KVTIER_JOBS:-$(nproc)}"

build() {
  ./scripts/install_deps.sh
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

case "${1:-}" in
  demo)
    build
    "$build_dir/tools/cli/kvtier" --version
    "$build_dir/tools/cli/kvtier" demo
    ;;
  test)
    ./scripts/install_deps.sh
    ./scripts/setup_vllm_venv.sh "$build_dir"
    ./scripts/setup_lmcache_venv.sh "$build_dir"
    build
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
    ;;
  build)
    build
    ;;
  *)
    echo "usage: $0 demo|test|build" >&2
    exit 2
    ;;
esac
