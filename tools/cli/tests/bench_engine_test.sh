#!/usr/bin/env bash
# Goal: `kvtier bench engine` prints one JSON object with the host tier's put/get throughput
# beside memcpy (all > 0, with their ratios) and a multi-turn trace replayed through host + SSD
# tiers whose small host tier makes blocks spill: hit ratios per tier in [0, 1] with both tiers
# serving hits, bytes per link > 0, evictions, medians, Busy retries counted, and Pin beside Load
# of each session's first turn after a restart (times > 0); the SSD tier's record bytes with
# none copied into its own buffers (one copy before the disk, copies_before_disk 1); with --redis, the
# remote tier's hit ratio and bytes too (blocks put into it > 0, no failed puts); the SSD scratch
# directory is gone afterwards (and after Ctrl-C, exit 130); text output names each part; bad
# flags exit 2 with one line.
# Method: small layouts and traces (a few MiB); the JSON is parsed with python3; --dir points
# into a temporary directory that must be empty afterwards. The Redis run starts a redis-server
# on a free loopback port when redis-server is installed (skipped with a line otherwise).
# Usage: bench_engine_test.sh <path to kvtier>
set -u
KVTIER="$1"
TMP="$(mktemp -d)"
SERVER=""
cleanup() {
  [[ -n "$SERVER" ]] && { kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
mkdir -p "$TMP/scratch"
SMALL=(--layers 2 --kv-heads 2 --head-dim 64 --block-tokens 16 --put-bytes 2MiB --repeat 2
       --sessions 3 --turns 3 --first-tokens 64 --turn-tokens 32 --ssd-bytes 64MiB
       --dir "$TMP/scratch")

# check_json <file> <with remote: 0|1>
check_json() {
  python3 - "$@" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
remote = sys.argv[2] == "1"
errors = []
h, t = j["host"], j["trace"]
for k in ["put_bytes_per_s", "get_bytes_per_s", "memcpy_bytes_per_s", "put_over_memcpy",
          "get_over_memcpy"]:
    if not h[k] > 0:
        errors.append(f"host.{k} = {h[k]}")
if j["block_bytes"] != 2 * 16 * 2 * 64 * 2:
    errors.append(f"block_bytes {j['block_bytes']}")
hr = t["hit_ratio"]
tiers = ["host", "ssd"] + (["remote"] if remote else [])
if sorted(k for k in hr if k != "miss") != sorted(tiers):
    errors.append(f"hit_ratio tiers {list(hr)}")
for k, v in hr.items():
    if not 0 <= v <= 1:
        errors.append(f"hit_ratio.{k} = {v}")
if abs(sum(hr.values()) - 1) > 1e-9:
    errors.append(f"hit ratios do not add up to 1: {hr}")
if not (hr["host"] > 0 and hr["ssd"] > 0):
    errors.append(f"the small host tier should leave hits for both tiers: {hr}")
b = t["bytes"]
links = ["host_from_ssd", "ssd_from_host"] + (["host_from_remote", "remote_from_engine"] if remote else [])
if sorted(b) != sorted(links):
    errors.append(f"links {list(b)}")
# Every block stays on the SSD, so nothing needs the remote tier's copy: host_from_remote may be 0.
for k in links:
    if not (b.get(k, 0) >= 0 if k == "host_from_remote" else b.get(k, 0) > 0):
        errors.append(f"bytes.{k} = {b.get(k)}")
if remote and t.get("remote_put_errors") != 0:
    errors.append(f"remote_put_errors {t.get('remote_put_errors')}")
if not remote and "remote_put_errors" in t:
    errors.append("remote_put_errors without --redis")
if not t["evictions"]["host"] > 0:
    errors.append(f"no host evictions: {t['evictions']}")
if t["requests"] != 9 or t["sessions"] != 3 or t["turns"] != 3:
    errors.append(f"requests {t['requests']}")
for k in ["load_ms_median", "store_ms_median", "request_ms_median"]:
    if not t[k] > 0:
        errors.append(f"trace.{k} = {t[k]}")
if not t["blocks_requested"] > 0 or not t["blocks_stored"] > 0:
    errors.append("no blocks")
# The evicted blocks reached the SSD, each record from the engine's encode buffer (plaintext).
if not t["ssd_write_bytes"] >= b["ssd_from_host"]:
    errors.append(f"ssd_write_bytes {t['ssd_write_bytes']} < ssd_from_host {b['ssd_from_host']}")
if t["ssd_staged_write_bytes"] != 0 or t["copies_before_disk"] != 1:
    errors.append(f"copies before the disk: {t['ssd_staged_write_bytes']} staged, "
                  f"{t['copies_before_disk']}")
# Part 3: each session's first turn (4 chunks of 2 layers) pinned from the SSD after a restart.
p = j["pin_after_restart"]
if p["sessions"] != 3 or p["blocks"] != 8:
    errors.append(f"pin_after_restart {p}")
for k in ["pin_ms_median", "load_ms_median", "pin_over_load_paired"]:
    if not p[k] > 0:
        errors.append(f"pin_after_restart.{k} = {p[k]}")
# Stores that found only dirty victims were Busy while the cleaner wrote them back, and retried.
if not (isinstance(t.get("store_busy_retries"), int) and t["store_busy_retries"] >= 0):
    errors.append(f"store_busy_retries {t.get('store_busy_retries')}")
if errors:
    print("\n".join(errors))
    sys.exit(1)
PY
}

# 1. JSON, host + SSD.
rc=0
"$KVTIER" bench engine "${SMALL[@]}" --trace-host-bytes 256KiB --json >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench engine: exit $rc: $(cat "$TMP/err")"
else
  check_json "$TMP/out" 0 || fail "bench engine: $(check_json "$TMP/out" 0): $(cat "$TMP/out")"
fi
[[ -z "$(ls -A "$TMP/scratch")" ]] || fail "scratch data left in --dir: $(ls -A "$TMP/scratch")"

# 2. Text output.
rc=0
"$KVTIER" bench engine "${SMALL[@]}" --trace-host-bytes 256KiB >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "bench engine (text): exit $rc: $(cat "$TMP/err")"
for needle in "put (Store)" "get (Lookup+Load)" "memcpy" "hit ratio" "host<-ssd" "evictions" \
              "pin/load" "copies before the disk"; do
  grep -qF "$needle" "$TMP/out" || fail "text output lacks '$needle': $(cat "$TMP/out")"
done

# 3. Ctrl-C: exit 130, scratch data removed.
"$KVTIER" bench engine --put-bytes 64MiB --repeat 1000 --dir "$TMP/scratch" \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 1 100); do
  [[ -n "$(ls -A "$TMP/scratch")" ]] && break
  sleep 0.1
done
sleep 1
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc -eq 130 ]] || fail "Ctrl-C: exit $rc, expected 130: $(cat "$TMP/err")"
grep -q "interrupted" "$TMP/err" || fail "Ctrl-C: no message: $(cat "$TMP/err")"
[[ -z "$(ls -A "$TMP/scratch")" ]] || fail "scratch data left after Ctrl-C: $(ls -A "$TMP/scratch")"

# 4. With a Redis tier.
if command -v redis-server >/dev/null; then
  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    >/dev/null 2>&1 &
  SERVER=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  rc=0
  "$KVTIER" bench engine "${SMALL[@]}" --trace-host-bytes 256KiB --redis "127.0.0.1:$PORT" --json >"$TMP/out" \
    2>"$TMP/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "bench engine --redis: exit $rc: $(cat "$TMP/err")"
  else
    check_json "$TMP/out" 1 || fail "bench engine --redis: $(check_json "$TMP/out" 1): $(cat "$TMP/out")"
  fi
else
  echo "SKIP (Redis tier): redis-server is not installed"
fi

# 5. Bad flags: one line on stderr, exit 2.
source "$(dirname "$0")/expect_usage.sh"
expect_usage zero_repeat "--repeat" "$KVTIER" bench engine --repeat 0
expect_usage block_tokens "--block-tokens" "$KVTIER" bench engine --block-tokens 100
expect_usage zero_sessions "--sessions" "$KVTIER" bench engine --sessions 0
expect_usage bad_put_bytes "--put-bytes" "$KVTIER" bench engine --put-bytes lots
expect_usage small_ssd "--ssd-bytes" "$KVTIER" bench engine --ssd-bytes 1MiB
expect_usage unknown_flag "--frobnicate" "$KVTIER" bench engine --frobnicate

# 6. A bad --redis is refused before anything runs: one line, exit 1, nothing measured.
rc=0
"$KVTIER" bench engine --redis 127.0.0.1:notaport >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "bad --redis: exit $rc: $(cat "$TMP/err")"
grep -q "^kvtier bench: --redis: .*port" "$TMP/err" || fail "bad --redis: $(cat "$TMP/err")"
[[ ! -s "$TMP/out" ]] || fail "bad --redis: something was measured: $(cat "$TMP/out")"

# 7. A host tier too small for one turn: one line, exit 1.
rc=0
"$KVTIER" bench engine "${SMALL[@]}" --trace-host-bytes 4KiB >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "tiny host tier: exit $rc: $(cat "$TMP/err")"
grep -q "^kvtier bench: --trace-host-bytes" "$TMP/err" || fail "tiny host tier: $(cat "$TMP/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "bench_engine_test: all checks passed"
