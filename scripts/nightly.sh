#!/usr/bin/env bash
# The long runs that CI (.ci/run) keeps short, for a machine that has the time (a nightly job):
#   1. the README's test command (`./run.sh test`), as CI runs it;
#   2. SIGKILL crash trials of the engine: CI runs a few in `engine_crash_trial`, this runs
#      TRIALS of them (scripts/crash_trials.sh; default 1000, a new seed each night);
#   3. every libFuzzer harness for FUZZ_SECONDS each (scripts/fuzz.sh; default 300): CI only
#      replays their corpora.
# Prints each phase's wall time at the end; exits non-zero at the first phase that fails.
#
#   scripts/nightly.sh [TRIALS] [FUZZ_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-1000}"
fuzz_seconds="${2:-300}"
export KVTIER_REQUIRE_RESOURCES=1

start=$SECONDS
times=()
run_phase() {
  local name="$1"
  shift
  echo "== $name"
  local t=$SECONDS
  "$@"
  times+=("$(printf '%6d s  %s' $((SECONDS - t)) "$name")")
}

run_phase "README test command" ./run.sh test
run_phase "crash trials ($trials)" scripts/crash_trials.sh "$trials" "$(date +%s)"
run_phase "fuzzing (${fuzz_seconds} s per harness)" scripts/fuzz.sh "$fuzz_seconds"
printf '%s\n' "${times[@]}"
echo "== nightly: $((SECONDS - start)) s"
