#!/usr/bin/env bash
# Goal: `kvtier bench remote` measures the remote tier on a real Redis: one JSON object with the
# sealed and plaintext put/get rates, what encryption costs, and redis-benchmark's SET/GET for
# the same value size; it leaves the server as it found it; a key file others can read, a bad
# --redis, a zero --rounds and an unknown --sealed-open are refused with one line and a non-zero
# exit; --sealed-open after-reads (the get path before the overlap) and overlapped run; redis-benchmark
# runs once per round, also over distinct keys, and leaves no key behind; --aes-gcm openssl
# runs and is reported, an unknown --aes-gcm is refused; --connections 3 runs its batches on three
# connections (every block read back intact, the count reported, redis-benchmark given as many
# clients) and leaves no key, and --connections 0 is refused; --fs-dir measures the fs tier on a
# directory beside plain files (cached, and --cold --no-fsync), leaves no file, and is refused
# beside --redis (or with neither), as --cold is without it.
# Method: a redis-server on a free loopback port in a temporary directory, killed at the end;
# the JSON is parsed with python3.
# Usage: bench_remote_test.sh <path to kvtier>
# Exit 77 (skipped) without redis-server; exit 1 instead when KVTIER_REQUIRE_RESOURCES=1 (CI).
set -u
KVTIER="$1"
if ! command -v redis-server >/dev/null; then
  if [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
    echo "FAIL: redis-server is not installed; KVTIER_REQUIRE_RESOURCES=1 makes it fail" >&2
    exit 1
  fi
  echo "SKIP: redis-server is not installed"
  exit 77
fi
TMP="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
  >/dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
  sleep 0.05
done
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

rc=0
"$KVTIER" bench remote --redis "127.0.0.1:$PORT" --block-bytes 64KiB --total-bytes 2MiB \
  --rounds 2 --json >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench remote: exit $rc: $(cat "$TMP/err")"
else
  python3 - "$TMP/out" <<'PY' || fail "bench remote: JSON check failed: $(cat "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("put_bytes_per_s", "get_bytes_per_s", "plaintext_put_bytes_per_s",
          "plaintext_get_bytes_per_s"):
    assert j[k] > 0, k
# 1 - sealed / plaintext: below 1 when both ran; on 2 MiB and a busy machine either may be far
# faster than the other, so only that and finiteness are checked (a lower bound made it flaky).
import math
for k in ("encryption_get_cost", "encryption_put_cost"):
    assert math.isfinite(j[k]) and j[k] < 1, (k, j[k])
assert j["block_bytes"] == 65536 and j["blocks"] == 32 and j["rounds"] == 2
assert len(j["get_bytes_per_s_all"]) == 2
assert j["redis_benchmark_get_bytes_per_s"] > 0 or "redis_benchmark_note" in j
if j["redis_benchmark_get_bytes_per_s"] > 0:  # One figure per round; GET of distinct keys too.
    assert len(j["redis_benchmark_get_bytes_per_s_all"]) == 2, j
    assert j["redis_benchmark_get_distinct_bytes_per_s"] > 0 or "redis_benchmark_distinct_note" in j
assert j["sealed_open"] == "as-read"
assert j["aes_gcm"] in ("openssl", "ipsec-mb avx512", "ipsec-mb avx2", "ipsec-mb avx"), j["aes_gcm"]
PY
fi
[[ "$(redis-cli -p "$PORT" dbsize)" == 0 ]] || fail "bench remote left keys behind (redis-benchmark's?)"
# expect_choice <flag> <value> <JSON key>: a run with that choice succeeds and reports it.
expect_choice() {
  local rc=0
  "$KVTIER" bench remote --redis "127.0.0.1:$PORT" --block-bytes 64KiB --total-bytes 1MiB \
    --rounds 1 "$1" "$2" --no-redis-benchmark --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || { fail "bench remote $1 $2: exit $rc: $(cat "$TMP/err")"; return; }
  grep -q "\"$3\": \"$2\"" "$TMP/out" || fail "$3 not reported: $(cat "$TMP/out")"
}
expect_choice --sealed-open overlapped sealed_open   # Sealed values opened on the open worker.
expect_choice --sealed-open after-reads sealed_open  # The pre-overlap get path, for comparison.
[[ "$(redis-cli -p "$PORT" dbsize)" == 0 ]] || fail "bench remote left keys behind"
expect_choice --aes-gcm openssl aes_gcm  # Either AES-GCM implementation, to compare in one run.

rc=0
"$KVTIER" bench remote --redis "127.0.0.1:$PORT" --block-bytes 64KiB --total-bytes 2MiB \
  --rounds 1 --connections 3 --json >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench remote --connections 3: exit $rc: $(cat "$TMP/err")"
else
  python3 - "$TMP/out" <<'PY' || fail "bench remote --connections 3: $(cat "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["connections"] == 3 and j["blocks"] == 32, j
assert j["get_bytes_per_s"] > 0 and j["plaintext_put_bytes_per_s"] > 0, j
PY
fi
[[ "$(redis-cli -p "$PORT" dbsize)" == 0 ]] || fail "bench remote --connections 3 left keys behind"

# expect_fail <name> <needle> <args...>
expect_fail() {
  local name="$1" needle="$2"; shift 2
  local rc=0
  "$KVTIER" bench remote "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -ne 0 && $rc -lt 128 ]] || { fail "$name: exit $rc"; return; }
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
}
printf '1 %s\n' "$(printf 'ab%.0s' $(seq 1 32))" >"$TMP/keys"
chmod 644 "$TMP/keys"
expect_fail open_key_file "0644" --redis "127.0.0.1:$PORT" --remote-key-file "$TMP/keys"
expect_fail bad_endpoint "port" --redis "127.0.0.1:notaport"
expect_fail zero_rounds "--rounds" --redis "127.0.0.1:$PORT" --rounds 0
expect_fail zero_connections "--connections" --redis "127.0.0.1:$PORT" --connections 0
expect_fail bad_sealed_open "--sealed-open" --redis "127.0.0.1:$PORT" --sealed-open later
expect_fail bad_aes_gcm "--aes-gcm" --redis "127.0.0.1:$PORT" --aes-gcm rot13
expect_fail neither "one of them" --block-bytes 64KiB
expect_fail both "one of them" --redis "127.0.0.1:$PORT" --fs-dir "$TMP/fs"
expect_fail cold_on_redis "--cold" --redis "127.0.0.1:$PORT" --cold

# The fs tier on a directory: sealed, plaintext and the plain files, cached and cold; every block
# read back intact (the run fails otherwise) and nothing left in the directory but its folders.
for extra in "" "--cold --no-fsync"; do
  rc=0
  # shellcheck disable=SC2086
  "$KVTIER" bench remote --fs-dir "$TMP/fs" --block-bytes 64KiB --total-bytes 1MiB --rounds 2     $extra --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "bench remote --fs-dir $extra: exit $rc: $(cat "$TMP/err")"
    continue
  fi
  python3 - "$TMP/out" "$extra" <<'PY' || fail "bench remote --fs-dir $extra: JSON: $(cat "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
cold = "--cold" in sys.argv[2]
assert j["store"] == "fs" and j["fs_cold"] == cold and j["fs_fsync"] == (not cold), j
for k in ("put_bytes_per_s", "get_bytes_per_s", "plaintext_put_bytes_per_s",
          "plaintext_get_bytes_per_s", "files_put_bytes_per_s", "files_get_bytes_per_s"):
    assert j[k] > 0, k
assert len(j["files_get_bytes_per_s_all"]) == 2 and j["blocks"] == 16, j
assert "redis_benchmark_note" in j, j
PY
  left="$(find "$TMP/fs" -type f | wc -l)"
  [[ "$left" == 0 ]] || fail "bench remote --fs-dir $extra left $left files behind"
done

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "bench_remote_test: all checks passed"
