#!/usr/bin/env bash
# Provides LMCache's environment for the peer benchmarks and their smoke tests (.venv-lmcache):
# a virtual environment of its own, layered over .venv-vllm (scripts/setup_vllm_venv.sh makes
# that one first), with lmcache and the few pure-Python packages its server imports installed
# `--no-deps` from PyPI, so that LMCache's pins (numpy <= 2.2.6, protobuf < 7) never replace
# vLLM's. bench/peers/lmcache_vllm.py holds the package list and does the work
# (peerlib.ensure_overlay_venv). Like .venv-vllm, the environment is shared by every clone on the
# machine: built once per pin set (the package list, the vLLM environment it reads and that
# one's pins, the recipe's revision) in ${KVTIER_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/
# kvtier/venvs}/lmcache-VERSION-HASH, under a flock on the lock file beside it, its stamp written
# last; .venv-lmcache is a symlink to it (an older .venv-lmcache directory is deleted). Delete
# that directory to force a rebuild.
#
#   scripts/setup_lmcache_venv.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
/usr/bin/python3 bench/peers/lmcache_vllm.py --setup-only --kvtier-python "$build_dir/python"
