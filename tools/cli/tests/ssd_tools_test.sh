#!/usr/bin/env bash
# Goal: `kvtier verify` reports every problem of a damaged SSD cache (a segment cut mid-record
# whose records the checkpoint still lists, a garbage checkpoint, a FIFO or directory named like a
# segment, never waited on) with a summary line and a non-zero exit; `kvtier repair` fixes it so
# that verify passes and says what it dropped; inspect/verify/repair/clear refuse the directories
# of two different caches given as one, and a cache a running process holds; `kvtier clear`
# empties a cache and refuses a directory that is not one.
# Method: make caches with `kvtier bench ssd --keep` (64 KiB records in one directory), damage
# their files with python3, mkfifo and mkdir, run the tools (each under `timeout`, so a hang
# fails instead of stalling), and check exit status, stdout and the one-line stderr.
# Usage: ssd_tools_test.sh <path to kvtier>
set -u

KVTIER="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
RUN_TIMEOUT=60

# expect_ok <name> <needle>... -- <args>: exit 0 and stdout contains every needle.
expect_ok() {
  local name="$1"; shift
  local needles=()
  while [[ "$1" != "--" ]]; do needles+=("$1"); shift; done
  shift
  run "$@"
  [[ $rc -eq 0 ]] || { fail "$name: exit $rc, stderr: $(cat "$TMP/err")"; return; }
  local n
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$TMP/out" || fail "$name: stdout lacks '$n': $(cat "$TMP/out")"
  done
}

# expect_fail <name> <stderr needle> <stdout needle or ""> <args>...: a non-zero exit that is not a
# signal, one line on stderr containing the first needle, stdout containing the second.
expect_fail() {
  local name="$1" needle="$2" out_needle="$3"; shift 3
  run "$@"
  [[ $rc -ne 0 && $rc -lt 128 ]] || { fail "$name: exit $rc, stderr: $(cat "$TMP/err")"; return; }
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
  if [[ -n "$out_needle" ]]; then
    grep -qF -- "$out_needle" "$TMP/out" || fail "$name: stdout lacks '$out_needle': $(cat "$TMP/out")"
  fi
}

# make_cache <parent>: a cache of 16 blocks of 64 KiB; prints its directory.
make_cache() {
  mkdir -p "$1"
  "$KVTIER" bench ssd --dir "$1" --block-bytes 64KiB --queue-depth 4 --total-bytes 1MiB \
    --json --keep 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["kept_dirs"][0])' 2>/dev/null
}

A=$(make_cache "$TMP/a")
B=$(make_cache "$TMP/b")
if [[ ! -d "$A" || ! -d "$B" ]]; then
  echo "FAIL: bench --keep made no cache" >&2
  exit 1
fi
SEG=$(ls "$A"/seg-*.kvs | head -n 1)

expect_ok verify_clean "16 records verified, 0 problems" -- verify "$A"
expect_ok verify_json "\"records_verified\": 16" "\"problems\": []" -- verify "$A" --json

# Cut the segment 100 bytes into record 2's header block: the old verify passed this.
python3 -c 'import os,sys; os.truncate(sys.argv[1], 4096 + 2 * 65536 + 100)' "$SEG"
expect_fail verify_truncated "problems (listed above)" "2 records verified" verify "$A"
grep -qF "$(basename "$SEG") offset $((4096 + 2 * 65536))..$((4096 + 2 * 65536 + 100))" "$TMP/out" ||
  fail "verify_truncated: the cut record is not named: $(cat "$TMP/out")"
grep -qF "past the end" "$TMP/out" || fail "verify_truncated: no entry past the end: $(cat "$TMP/out")"
run verify "$A" --json
[[ $rc -eq 1 ]] || fail "verify_json_damaged: exit $rc"
grep -qF '"offset_begin": 135168' "$TMP/out" || fail "verify_json_damaged: $(cat "$TMP/out")"

# A garbage checkpoint, a FIFO and a directory named like segments: reported, nothing hangs.
printf 'garbage' >"$A/index.ckpt"
mkfifo "$A/seg-00000000000000c8.kvs"
mkdir "$A/seg-00000000000000c9.kvs"
expect_fail verify_special "problems" "checkpoint invalid" verify "$A"
grep -qF "not a regular file (a FIFO)" "$TMP/out" || fail "verify_special: FIFO: $(cat "$TMP/out")"
grep -qF "not a regular file (a directory)" "$TMP/out" ||
  fail "verify_special: directory: $(cat "$TMP/out")"
expect_ok inspect_special "checkpoint invalid" "BAD" -- inspect "$A"

expect_ok repair "moved $SEG aside to $SEG.bad" "now 2 records verified, 0 problems" \
  "dropped: checkpoint invalid" -- repair "$A"
[[ -p "$A/seg-00000000000000c8.kvs.bad" ]] || fail "repair: the FIFO was not moved aside"
expect_ok verify_repaired "2 records verified, 0 problems" -- verify "$A"
expect_ok inspect_repaired "blocks 2," "checkpoint valid" -- inspect "$A"

# Two caches given as one (both have segment 1).
expect_fail two_verify "belongs to cache" "" verify "$A" "$B"
expect_fail two_inspect "belongs to cache" "" inspect "$A" "$B"
expect_fail two_repair "belongs to cache" "" repair "$A" "$B"
expect_fail two_clear "belongs to cache" "" clear "$A" "$B"
[[ -n "$(ls "$B"/seg-*.kvs 2>/dev/null)" ]] || fail "two_clear removed segments"

# A cache in use (its LOCK held exclusively, as a running tier does).
echo $$ >"$B/LOCK"
if flock -n -x "$B/LOCK" true; then
  exec 9<"$B/LOCK"
  flock -x 9
  expect_fail busy_verify "is in use by process" "" verify "$B"
  expect_fail busy_repair "is in use by process" "" repair "$B"
  expect_fail busy_clear "is in use by process" "" clear "$B"
  expect_ok busy_inspect "in use:" "blocks 16," -- inspect "$B"
  exec 9<&-
fi

# Clear: only kvtier's files go; a foreign directory is refused.
echo keep >"$A/notes.txt"
expect_fail clear_dir "could not be removed" "not removed:" clear "$A"
grep -qF "removed $SEG.bad" "$TMP/out" || fail "clear_dir: $SEG.bad not removed: $(cat "$TMP/out")"
[[ -d "$A/seg-00000000000000c9.kvs.bad" ]] || fail "clear removed a directory"
rmdir "$A/seg-00000000000000c9.kvs.bad"
expect_ok clear_again "clear: removed 0 files" -- clear "$A"
[[ -f "$A/notes.txt" && -f "$A/MANIFEST" ]] || fail "clear removed a file that is not the cache's"
[[ -z "$(ls "$A"/seg-* 2>/dev/null)" ]] || fail "clear left segments: $(ls "$A")"
expect_ok clear_b "removed $B/index.ckpt" "removed $B/seg-0000000000000001.kvs" -- clear "$B"
mkdir -p "$TMP/foreign"
echo data >"$TMP/foreign/x.txt"
expect_fail clear_foreign "not a kvtier cache directory" "" clear "$TMP/foreign"
[[ -f "$TMP/foreign/x.txt" ]] || fail "clear_foreign removed a file"
expect_fail clear_missing "no such directory" "" clear "$TMP/nope"
expect_fail repair_no_dir "dir is required" "" repair

if [[ $failures -ne 0 ]]; then
  echo "$failures SSD tool check(s) failed" >&2
  exit 1
fi
echo "all SSD tool checks passed"
