#!/usr/bin/env bash
# Runs N SIGKILL crash trials of the engine (tests/crash/engine_crash_trial.cc; default 200) and
# prints its per-trial lines and its summary ("trials=... acknowledged=... lost=0 wrong=0 ...").
# Exits non-zero when an acknowledged block was lost or a wrong one was served.
# Usage: scripts/crash_trials.sh [N] [seed]     Environment: KVTIER_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-200}"
build_dir="${KVTIER_BUILD_DIR:-build}"
if [[ ! -d "$build_dir" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build_dir" --target engine_crash_trial
args=(--trials "$trials")
if [[ $# -ge 2 ]]; then
  args+=(--seed "$2")
fi
exec "$build_dir/tests/crash/engine_crash_trial" "${args[@]}"
