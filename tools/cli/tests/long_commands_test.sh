#!/usr/bin/env bash
# Goal: the CLI's long commands behave: Ctrl-C (SIGINT) stops `bench ssd`, `bench decode` and
# `demo` within seconds with exit status 130 and one "interrupted" message, removes the scratch
# data they wrote, and leaves a --dir that existed before (and the user's files in it) in place,
# while a --dir they had to create is gone; `bench decode` refuses a context whose KV the disk
# cannot hold, naming the need and what is free, before writing anything; `bench ssd` and
# `bench ssd-reopen` (and demo, selfcheck) create a missing --dir and remove it again, and
# bench/gen_fp16_gaussian.py creates its output directory; `--json` on demo, selfcheck and verify
# prints one JSON document with the documented keys (verify keeps exit status 1 on damage), and
# demo's per-turn lookup and load-wait times add up with the compute to the time to first token;
# demo stores and finds a document larger than its default memory tiers; the long commands
# draw a progress line on a terminal's stderr, and print none with -q; `kvtier -q help` and
# `kvtier --log-level info help bench` print the help like `kvtier help`.
# Method: run the binary with sizes big enough to still be running after a second, send SIGINT
# to it, time its exit and look at the directories; parse --json output with python3; time
# nothing else (no timing assertions beyond the bound on stopping).
# Usage: long_commands_test.sh <path to kvtier> <repository root>
set -u

KVTIER="$1"
ROOT="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# check_json <file> <key>...: the file is one JSON document holding every key (top level).
check_json() {
  local file="$1"; shift
  python3 - "$file" "$@" <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
missing = [k for k in sys.argv[2:] if k not in d]
assert not missing, "missing keys: %s" % missing
PY
}

# interrupt <name> <wait-for-glob or ""> <args>...: starts kvtier, waits until a path matching
# the glob exists (at most 60 s) or 1.5 s, sends SIGINT, and checks exit 130 within 15 s and the
# one-line message. stderr is left in $TMP/err.
interrupt() {
  local name="$1" glob="$2"; shift 2
  "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
  local pid=$!
  if [[ -n "$glob" ]]; then
    local i
    for ((i = 0; i < 600; i++)); do
      compgen -G "$glob" >/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    compgen -G "$glob" >/dev/null || fail "$name: nothing matching $glob appeared"
  else
    sleep 1.5
  fi
  kill -0 "$pid" 2>/dev/null || fail "$name: finished before the interrupt (make it bigger)"
  kill -INT "$pid"
  local waited=0
  while kill -0 "$pid" 2>/dev/null && [[ $waited -lt 150 ]]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "$name: still running 15 s after SIGINT"
    kill -KILL "$pid"
  fi
  local rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 130 ]] || fail "$name: exit $rc (want 130): $(cat "$TMP/err")"
  # The last line says so (progress lines may come before it).
  local want="kvtier ${name//_/ }: interrupted;"
  grep . "$TMP/err" | tail -n 1 | grep -qF -- "$want" ||
    fail "$name: the last stderr line lacks '$want': $(cat "$TMP/err")"
}

# --- Ctrl-C -------------------------------------------------------------------------------------

# bench ssd: a pre-existing --dir with the user's file stays; the benchmark's subdirectory goes.
mkdir -p "$TMP/ssd"
echo keep >"$TMP/ssd/users-file"
interrupt bench_ssd "$TMP/ssd/kvtier-bench-*/seg-*" \
  bench ssd --dir "$TMP/ssd" --total-bytes 4GiB --block-bytes 1MiB
[[ -f "$TMP/ssd/users-file" ]] || fail "bench_ssd: the user's file was removed"
[[ $(ls "$TMP/ssd") == users-file ]] || fail "bench_ssd: scratch left: $(ls "$TMP/ssd")"

# bench ssd with a --dir it had to create: the created directories go too.
interrupt bench_ssd "$TMP/made/for/ssd/kvtier-bench-*/seg-*" \
  bench ssd --dir "$TMP/made/for/ssd" --total-bytes 4GiB
[[ ! -e "$TMP/made" ]] || fail "bench_ssd_created_dir: $TMP/made is still there"

# bench decode: interrupted while the offloaded configuration's SSD tier holds data.
mkdir -p "$TMP/decode"
echo keep >"$TMP/decode/users-file"
interrupt bench_decode "$TMP/decode/offload/seg-*" \
  bench decode --model synthetic:llama2-7b --layers 4 --context 8192 --configs resident,offload \
  --no-probe --dir "$TMP/decode"
[[ -f "$TMP/decode/users-file" ]] || fail "bench_decode: the user's file was removed"
[[ $(ls "$TMP/decode") == users-file ]] || fail "bench_decode: scratch left: $(ls "$TMP/decode")"

# demo: a 64k-token document is minutes of prefill; it stops within a moment.
mkdir -p "$TMP/demo"
interrupt demo "$TMP/demo/kvtier-demo-*" demo --document-tokens 65536 --dir "$TMP/demo"
[[ -d "$TMP/demo" && -z "$(ls "$TMP/demo")" ]] || fail "demo: scratch left: $(ls "$TMP/demo")"

# --- bench decode free space --------------------------------------------------------------------

rc=0
"$KVTIER" bench decode --context 4000000000 --no-probe --dir "$TMP/huge" >"$TMP/out" \
  2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "decode_free_space: exit $rc (want 1)"
grep -qE "free; the offloaded configurations need about [0-9.]+ GiB" "$TMP/err" ||
  fail "decode_free_space: message: $(cat "$TMP/err")"
[[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "decode_free_space: not one line: $(cat "$TMP/err")"
[[ ! -e "$TMP/huge" ]] || fail "decode_free_space: the --dir it made is still there"

# --- missing directories are created ------------------------------------------------------------

rc=0
"$KVTIER" bench ssd-reopen --dir "$TMP/new/reopen" --blocks 300 --json >"$TMP/out" \
  2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "reopen_missing_dir: exit $rc: $(cat "$TMP/err")"
check_json "$TMP/out" blocks reopen_checkpoint_ms reopen_scan_ms ||
  fail "reopen_missing_dir: $(cat "$TMP/out")"
[[ ! -e "$TMP/new" ]] || fail "reopen_missing_dir: the directory it made is still there"
rc=0
"$KVTIER" bench ssd --dir "$TMP/new2/ssd" --total-bytes 1MiB --block-bytes 64KiB --json \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "ssd_missing_dir: exit $rc: $(cat "$TMP/err")"
[[ ! -e "$TMP/new2" ]] || fail "ssd_missing_dir: the directory it made is still there"
python3 "$ROOT/bench/gen_fp16_gaussian.py" "$TMP/new3/sub/g" --mib 1 >/dev/null ||
  fail "gen_fp16_gaussian: failed with a missing directory"
[[ -s "$TMP/new3/sub/g.raw" && -s "$TMP/new3/sub/g.shuf" ]] || fail "gen_fp16_gaussian: no files"

# --- --json -------------------------------------------------------------------------------------

rc=0
"$KVTIER" demo --document-tokens 256 --dir "$TMP/new5/sub" --json >"$TMP/out" 2>"$TMP/err" ||
  rc=$?
[[ ! -e "$TMP/new5" ]] || fail "demo_json: the --dir it made is still there"
[[ $rc -eq 0 ]] || fail "demo_json: exit $rc: $(cat "$TMP/err")"
check_json "$TMP/out" model kv_layout block_bytes turns turn1_over_turn2_compute \
  turn1_over_turn2_ttft turn1_over_restart_ttft passed error ||
  fail "demo_json: $(cat "$TMP/out")"
python3 -c 'import json,sys; d=json.load(sys.stdin); t=d["turns"]
assert d["passed"] is True and len(t) == 4, d
for k in ("turn", "title", "tenant", "prompt_tokens", "cached_tokens", "computed_tokens",
          "cached_chunks_per_tier", "compute_ms", "ttft_ms", "lookup_ms", "load_wait_ms",
          "stored_chunks", "fell_back"):
    assert all(k in x for x in t), k
assert t[0]["load_wait_ms"] == 0 and all(0 <= x["load_wait_ms"] <= x["compute_ms"] for x in t), t
assert all(abs(x["ttft_ms"] - x["lookup_ms"] - x["compute_ms"]) < 0.01 for x in t), t
assert t[1]["cached_tokens"] > 0 and t[2]["cached_tokens"] == 0 and t[3]["cached_tokens"] > 0
assert "logits_relative_gap" in t[1] and "reference_ms" in t[3]' <"$TMP/out" ||
  fail "demo_json: turns: $(cat "$TMP/out")"

# A document larger than the demo's default memory tiers (64 host + 8 device blocks: 18 chunks of
# this model's 4 layers) is still stored by turn 1 in one call and found by turn 2.
rc=0
"$KVTIER" -q demo --document-tokens 5120 --dir "$TMP" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "demo_large: exit $rc: $(cat "$TMP/err") $(cat "$TMP/out")"
python3 -c 'import json,sys; t=json.load(sys.stdin)["turns"]
assert t[0]["stored_chunks"] == 20 and t[1]["cached_tokens"] == 5120, t
assert t[3]["cached_tokens"] == 5120, t' <"$TMP/out" || fail "demo_large: $(cat "$TMP/out")"

rc=0
"$KVTIER" selfcheck --dir "$TMP/new4/sub" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ ! -e "$TMP/new4" ]] || fail "selfcheck_json: the --dir it made is still there"
[[ $rc -eq 0 ]] || fail "selfcheck_json: exit $rc: $(cat "$TMP/err")"
check_json "$TMP/out" dir io_backend layout blocks_written bytes_written blocks_recovered \
  checkpoint_used blocks_read_back_identical damaged_blocks_refused corrupt_records \
  blocks_intact_after_damage passed error || fail "selfcheck_json: $(cat "$TMP/out")"

mkdir -p "$TMP/cache"
CACHE=$("$KVTIER" bench ssd --dir "$TMP/cache" --block-bytes 64KiB --total-bytes 1MiB --json \
  --keep 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["kept_dirs"][0])')
rc=0
"$KVTIER" verify "$CACHE" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "verify_json: exit $rc: $(cat "$TMP/err")"
check_json "$TMP/out" segments records_verified checkpoint_present checkpoint_valid \
  checkpoint_entries_verified problem_count problems || fail "verify_json: $(cat "$TMP/out")"
SEG=$(ls "$CACHE"/seg-*.kvs | head -n 1)
python3 - "$SEG" $((4096 + 65536 + 1000)) <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x5A]))
PY
rc=0
"$KVTIER" verify "$CACHE" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "verify_json_damaged: exit $rc (want 1)"
python3 -c 'import json,sys; d=json.load(sys.stdin)
assert d["problem_count"] == len(d["problems"]) > 0, d' <"$TMP/out" ||
  fail "verify_json_damaged: $(cat "$TMP/out")"

# --- progress -----------------------------------------------------------------------------------

# On a terminal (a pseudo-terminal from script(1)) the line is drawn in place with the phase,
# done/total, percentage and rate; -q prints nothing on stderr.
mkdir -p "$TMP/progress"
if command -v script >/dev/null; then
  script -qec "'$KVTIER' bench ssd --dir '$TMP/progress' --total-bytes 16MiB --block-bytes 1MiB" \
    /dev/null >"$TMP/tty" 2>&1 || fail "progress_ssd: exit $?: $(cat "$TMP/tty")"
  grep -qE $'\rbench ssd read: 32.0 MiB/32.0 MiB \\(100%\\), [0-9.]+ [KMG]iB/s' "$TMP/tty" ||
    fail "progress_ssd: no final progress line: $(cat -A "$TMP/tty")"
  script -qec "'$KVTIER' bench decode --model synthetic:tinyllama-1.1b --layers 2 --dim 64 \
    --context 1024 --block-tokens 16 --tokens 2 --configs resident,offload --no-probe \
    --dir '$TMP/progress'" /dev/null >"$TMP/tty" 2>&1 || fail "progress_decode: exit $?"
  grep -qE $'\rbench decode offload: decoding: [0-9]+/[0-9]+ blocks \\(100%\\)' "$TMP/tty" ||
    fail "progress_decode: no final progress line: $(cat -A "$TMP/tty")"
  script -qec "'$KVTIER' demo --document-tokens 256 --dir '$TMP/progress'" /dev/null \
    >"$TMP/tty" 2>&1 || fail "progress_demo: exit $?"
  grep -qE $'\rdemo turn 1: [0-9]+/[0-9]+ tokens \\(100%\\)' "$TMP/tty" ||
    fail "progress_demo: no progress line: $(cat -A "$TMP/tty")"
else
  echo "note: no script(1); the terminal progress line is not checked" >&2
fi
"$KVTIER" -q bench ssd --dir "$TMP/progress" --total-bytes 16MiB >/dev/null 2>"$TMP/err" ||
  fail "quiet: exit $?"
[[ ! -s "$TMP/err" ]] || fail "quiet: stderr not empty: $(cat "$TMP/err")"

# --- help after root flags ----------------------------------------------------------------------

for args in "-q help" "--log-level info help" "--log-level=warn help"; do
  # shellcheck disable=SC2086  # The words are the arguments.
  out=$("$KVTIER" $args 2>&1) || fail "help ($args): exit $?"
  grep -qF "Usage: kvtier" <<<"$out" || fail "help ($args): $out"
done
out=$("$KVTIER" --log-level info help bench 2>&1) || fail "help bench: exit $?"
grep -qF "ssd-reopen" <<<"$out" || fail "help bench: $out"
out=$("$KVTIER" -q help bench ssd 2>&1) || fail "help bench ssd: exit $?"
grep -qF -- "--queue-depth" <<<"$out" || fail "help bench ssd: $out"
rc=0
"$KVTIER" -q help bogus >/dev/null 2>"$TMP/err" || rc=$?
[[ $rc -eq 2 ]] || fail "help bogus: exit $rc (want 2)"
grep -qF "no subcommand 'bogus'" "$TMP/err" || fail "help bogus: $(cat "$TMP/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures long-command check(s) failed" >&2
  exit 1
fi
echo "all long-command checks passed"
