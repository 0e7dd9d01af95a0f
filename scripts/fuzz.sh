#!/usr/bin/env bash
# Builds the libFuzzer harnesses (the `fuzz` CMake preset: clang, ASan + UBSan) and runs each one
# for a fixed time, one after another, printing what libFuzzer reports at the end: executions
# (stat::number_of_executed_units), executions per second, new corpus inputs and crashes.
#
#   scripts/fuzz.sh [--merge] [SECONDS] [TARGET...]
#
# SECONDS (default 60) is each harness's -max_total_time. TARGETs default to every harness in
# tests/fuzz/corpus/. Each run starts from a scratch copy of the harness's seed corpus, so the
# repository's corpus only changes with --merge, which merges the inputs that found new coverage
# back into tests/fuzz/corpus/<target>/ (libFuzzer -merge=1). A crashing input is kept under
# build-fuzz/fuzz-artifacts/<target>/; the script exits 1 when any harness crashed.
# Environment: KVTIER_FUZZ_RUNS, when set, also stops each harness after that many executions
# (libFuzzer -runs); KVTIER_FUZZ_RSS_MB (default 2048) bounds each harness's memory; KVTIER_JOBS
# (default: number of CPUs) the build.
set -euo pipefail
cd "$(dirname "$0")/.."

merge=0
if [[ "${1:-}" == "--merge" ]]; then
  merge=1
  shift
fi
seconds="${1:-60}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -eq 0 ]]; then
  echo "usage: $0 [--merge] [SECONDS] [TARGET...]" >&2
  exit 2
fi
corpus_root="tests/fuzz/corpus"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for d in "$corpus_root"/*/; do targets+=("$(basename "$d")"); done
fi
rss_mb="${KVTIER_FUZZ_RSS_MB:-2048}"
runs="${KVTIER_FUZZ_RUNS:--1}"
build_dir="build-fuzz"

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${KVTIER_JOBS:-$(nproc)}" >/dev/null

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
crashed=0
printf '%-28s %12s %10s %8s %s\n' target executions execs/s new crashes
for target in "${targets[@]}"; do
  binary="$build_dir/tests/fuzz/$target"
  if [[ ! -x "$binary" ]]; then
    echo "$target: no such harness ($binary)" >&2
    exit 2
  fi
  work="$scratch/$target"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$corpus_root/$target"/* "$work/corpus/" 2>/dev/null || true
  seeds=$(find "$work/corpus" -type f | wc -l)
  start=$(date +%s.%N)
  rc=0
  "$binary" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout=30 -runs="$runs" \
    -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  executions="${executions:-0}"
  rate=$(echo "scale=0; $executions / $elapsed" | bc)
  found=$(($(find "$work/corpus" -type f | wc -l) - seeds))
  crashes=$(find "$work/artifacts" -type f | wc -l)
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
    crashed=1
    mkdir -p "$build_dir/fuzz-artifacts/$target"
    cp "$work/artifacts"/* "$build_dir/fuzz-artifacts/$target/" 2>/dev/null || true
    cp "$work/log" "$build_dir/fuzz-artifacts/$target/log"
    printf '%-28s %12s %10s %8s %s (exit %d; see %s)\n' "$target" "$executions" "$rate" "$found" \
      "$crashes" "$rc" "$build_dir/fuzz-artifacts/$target/"
  else
    printf '%-28s %12s %10s %8s %s\n' "$target" "$executions" "$rate" "$found" "$crashes"
  fi
  if [[ $merge -eq 1 ]]; then
    "$binary" -merge=1 -rss_limit_mb="$rss_mb" "$corpus_root/$target" "$work/corpus" \
      >"$work/merge.log" 2>&1
  fi
done
exit $crashed
