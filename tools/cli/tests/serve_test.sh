#!/usr/bin/env bash
# Goal: `kvtier serve` and `kvtier ctl` as an operator uses them: --help shows the commands to
# type; bad flag values and secret files get one clear line; a service on a temporary socket and
# cache directory answers `ctl stats` (JSON: itself as the one client, the layout served) and
# /metrics and /healthz over --http; its socket's directory and socket carry --socket-group's
# group and modes; a socket path too long for a Unix socket, or a file there, is refused before
# the engine opens; a second service on the same socket is refused naming the holder's pid
# (before its engine opens too), one on the same cache directory naming the LOCK's (before its
# host tier is faulted in); `kvtier run --server` and `preload --server`
# store a prompt's chunks through the service; `ctl drain` turns /healthz to 503; SIGTERM exits 0 after a flush; a new
# service (from a --config file, with a client token) on the same directory refuses clients
# without the token, finds the chunks on the SSD, and `run --server` loads them; `ctl clear --namespace` makes a tenant's chunks misses, also after a restart, and
# `inspect` does not count the service's state file.
# Method: the binary under `timeout`, the service in the background with its stderr in a file,
# every wait bounded (a hang fails instead of stalling), python3 for JSON and HTTP. The model
# steps use the shared stories260K model; without it they are skipped with a line (failed when
# KVTIER_REQUIRE_RESOURCES=1), the rest still runs.
# packaging/kvtier.toml starts a service (with a temporary cache, RUNTIME_DIRECTORY as systemd
# sets it: the socket goes there), and systemd-analyze finds nothing to say about
# packaging/kvtier.service (skipped with a line where systemd-analyze is missing).
# Usage: serve_test.sh <path to kvtier> <shared models directory> <repository root>
set -u

KVTIER="$1"
MODELS="${2:-}"
ROOT="${3:-$(dirname "$0")/../../..}"
TMP="$(mktemp -d)"
SERVE_PID=""
cleanup() {
  [[ -z "$SERVE_PID" ]] || kill -KILL "$SERVE_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
RUN_TIMEOUT=60
unset KVTIER_CONFIG KVTIER_SOCKET

LAYOUT=layers=5,kv_heads=4,head_dim=8,dtype=f16,block_tokens=16  # stories260K's, 16 tokens.
SOCK="$TMP/run/kvtier.sock"
GGUF="$MODELS/stories260K.gguf"
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the \
park."

# start_serve <stderr file> <args>...: starts `kvtier serve` in the background (SERVE_PID) and
# waits (at most 30 s) for its "serving" line; returns 1 when it exits or never says it.
start_serve() {
  local log="$1"; shift
  "$KVTIER" serve "$@" 2>"$log" </dev/null &
  SERVE_PID=$!
  for _ in $(seq 300); do
    grep -q "kvtier serve: serving" "$log" && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || { wait "$SERVE_PID"; SERVE_PID=""; return 1; }
    sleep 0.1
  done
  return 1
}

# stop_serve <signal>: sends it and waits (at most 60 s); sets serve_rc (124: did not exit).
stop_serve() {
  kill -"$1" "$SERVE_PID"
  serve_rc=124
  for _ in $(seq 600); do
    if ! kill -0 "$SERVE_PID" 2>/dev/null; then
      serve_rc=0
      wait "$SERVE_PID" || serve_rc=$?
      break
    fi
    sleep 0.1
  done
  [[ $serve_rc -ne 124 ]] || kill -KILL "$SERVE_PID"
  SERVE_PID=""
}

# http <port> <path>: "<status> <content type>" then the body.
http() {
  python3 - "$1" "$2" <<'EOF'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=10)
except urllib.error.HTTPError as e:
    r = e
print(r.status, r.headers.get("Content-Type"))
sys.stdout.write(r.read().decode())
EOF
}

# json_get <expression over j>: evaluates it on the JSON in $TMP/out.
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$TMP/out"; }

model_steps=1
if [[ ! -f "$GGUF" ]]; then
  if [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
    fail "shared model $GGUF is missing; KVTIER_REQUIRE_RESOURCES=1 makes that a failure"
  else
    echo "SKIP (model steps): $GGUF is missing"
  fi
  model_steps=0
fi

# --help: the commands a new user types.
run serve --help
[[ $rc -eq 0 ]] || fail "serve --help: exit $rc"
for needle in "kvtier serve --layout" "kvtier ctl stats" "--socket" "--http" "--cache-dir" \
              "--tenant-secret-file" "--socket-group" "server\": \"unix:"; do
  grep -qF -- "$needle" "$TMP/out" || fail "serve --help lacks '$needle'"
done
run ctl --help
for needle in stats flush drain clear --socket; do
  grep -qF -- "$needle" "$TMP/out" || fail "ctl --help lacks '$needle'"
done
run --help
grep -q "serve" "$TMP/out" && grep -q "ctl" "$TMP/out" || fail "kvtier --help lists no serve/ctl"

# Bad values: one line naming the flag.
expect_fail "no layout" 2 "--layout" serve --socket "$SOCK"
expect_fail "bad layout" 2 "--layout" serve --socket "$SOCK" --layout layers=5
expect_fail "bad http" 2 "--http" serve --socket "$SOCK" --layout "$LAYOUT" --http 80x
expect_fail "http host name" 2 "not resolved" serve --layout "$LAYOUT" --http example.com:80
expect_fail "clients-max 0" 2 "--clients-max" serve --layout "$LAYOUT" --clients-max 0
expect_fail "bad uid" 2 "--allow-uid" serve --layout "$LAYOUT" --allow-uid 12x
expect_fail "bad digest" 2 "--weights-digest" serve --layout "$LAYOUT" --weights-digest abc
expect_fail "bad staging" 2 "--client-staging-bytes" serve --layout "$LAYOUT" \
  --client-staging-bytes 1TiB
# A socket path no Unix socket address holds, or a file there that is not a socket: refused
# before the engine opens. Here and below, a host tier no engine could open (1 PiB) shows the
# order: had the engine opened first, its error would be the one reported.
long_sock="$TMP/$(printf 's%.0s' {1..120}).sock"
expect_fail "long socket path" 1 "is longer than 107 bytes" serve --socket "$long_sock" \
  --layout "$LAYOUT" --host-bytes 1PiB
: >"$TMP/not-a-socket"
expect_fail "file at the socket path" 1 "exists and is not a socket" serve \
  --socket "$TMP/not-a-socket" --layout "$LAYOUT" --host-bytes 1PiB
expect_fail "unknown group" 1 "no such group" serve --socket "$SOCK" --layout "$LAYOUT" \
  --allow-group no-such-group-kvtier
printf 'a-secret-of-enough-bytes\n' >"$TMP/open-secret"
chmod 644 "$TMP/open-secret"
expect_fail "readable secret" 1 "chmod 600" serve --socket "$SOCK" --layout "$LAYOUT" \
  --tenant-secret-file "$TMP/open-secret"
printf 'short\n' >"$TMP/short-secret"
chmod 600 "$TMP/short-secret"
expect_fail "short secret" 1 "at least 16" serve --socket "$SOCK" --layout "$LAYOUT" \
  --tenant-secret-file "$TMP/short-secret"
expect_fail "no service" 1 "no kvtier service at $TMP/none.sock" ctl stats \
  --socket "$TMP/none.sock"
grep -q "is kvtier serve running there?" "$TMP/err" || fail "no service: no hint: $(cat "$TMP/err")"
expect_fail "ctl timeout" 2 "--timeout" ctl stats --timeout 7200
expect_fail "ctl without a command" 2 "stats, flush, drain or clear" ctl
expect_fail "clear without a service" 1 "no kvtier service" ctl clear --namespace tenant-a \
  --socket "$SOCK"
expect_fail "clear of a bad uid" 2 "--uid" ctl clear --namespace tenant-a --uid -1
[[ ! -e "$TMP/run" ]] || fail "a refused start created the socket directory"

# The service, with an SSD directory, HTTP on a free port and the caller's group on its socket.
printf 'tenant-secret-of-32-bytes-0123456\n' >"$TMP/secret"
chmod 600 "$TMP/secret"
GROUP="$(id -g)"
start_serve "$TMP/serve1.err" --socket "$SOCK" --cache-dir "$TMP/cache" --layout "$LAYOUT" \
  --host-bytes 16MiB --http 0 --socket-group "$GROUP" --tenant-secret-file "$TMP/secret" ||
  { fail "serve did not start: $(cat "$TMP/serve1.err")"; finish serve; }
PID1=$SERVE_PID
PORT=$(sed -n 's/.*http 127\.0\.0\.1:\([0-9]*\)).*/\1/p' "$TMP/serve1.err" | head -1)
[[ -n "$PORT" ]] || fail "the serving line names no http port: $(cat "$TMP/serve1.err")"
[[ "$(stat -c '%a %g' "$TMP/run")" == "750 $GROUP" ]] ||
  fail "socket directory: $(stat -c '%a %g' "$TMP/run") (want 750 $GROUP)"
[[ "$(stat -c '%a %g' "$SOCK")" == "660 $GROUP" ]] ||
  fail "socket: $(stat -c '%a %g' "$SOCK") (want 660 $GROUP)"

KVTIER_SOCKET="$SOCK" run ctl stats
[[ $rc -eq 0 ]] || fail "ctl stats: exit $rc: $(cat "$TMP/err")"
[[ "$(json_get 'j["clients_active"]')" == 1 ]] ||
  fail "ctl stats: clients_active: $(cat "$TMP/out")"
[[ "$(json_get 'j["layout"]')" == "$LAYOUT" ]] || fail "ctl stats: layout: $(cat "$TMP/out")"

http "$PORT" /metrics >"$TMP/metrics"
head -1 "$TMP/metrics" | grep -q "^200 text/plain; version=0.0.4" ||
  fail "/metrics: $(head -1 "$TMP/metrics")"
grep -q "^kvtier_" "$TMP/metrics" || fail "/metrics has no kvtier_ series"
[[ "$(http "$PORT" /healthz)" == $'200 text/plain; charset=utf-8\nok' ]] ||
  fail "/healthz: $(http "$PORT" /healthz)"
http "$PORT" /nope >"$TMP/nope"
[[ "$(head -1 "$TMP/nope")" == "404 "* ]] || fail "/nope is not 404: $(cat "$TMP/nope")"

# A second service: on the same socket (another cache), then on the same cache (another socket).
# Both before a host tier is faulted in (the 1 PiB one is never tried): the socket is checked
# before the engine opens, and the engine opens its SSD tier (whose LOCK refuses) before memory.
expect_fail "same socket" 1 "pid $PID1" serve --socket "$SOCK" --layout "$LAYOUT" \
  --host-bytes 1PiB
expect_fail "same cache" 1 "in use by process $PID1" serve --socket "$TMP/run2/k.sock" \
  --cache-dir "$TMP/cache" --layout "$LAYOUT" --host-bytes 1PiB

expect_fail "http port taken" 1 "cannot listen for HTTP on 127.0.0.1:$PORT" serve \
  --socket "$TMP/run3/k.sock" --layout "$LAYOUT" --host-bytes 1PiB --http "$PORT"

if [[ $model_steps -eq 1 ]]; then
  run run --server "unix:$SOCK" -m "$GGUF" -p "$PROMPT" -n 4 --salt tenant-a
  [[ $rc -eq 0 ]] || fail "run --server: exit $rc: $(cat "$TMP/err")"
  grep -q "2 chunks stored" "$TMP/err" || fail "run --server stored no chunks: $(cat "$TMP/err")"
  printf '%s\n' "$PROMPT Her friend Tom came to play with her." >"$TMP/doc.txt"
  run preload --server "$SOCK" -m "$GGUF" --document "$TMP/doc.txt" --salt tenant-c
  [[ $rc -eq 0 ]] || fail "preload --server: exit $rc: $(cat "$TMP/err")"
  grep -q "; [1-9][0-9]* chunks stored" "$TMP/out" || fail "preload --server: $(cat "$TMP/out")"
  expect_fail "run --server with a cache dir" 1 "the service owns the tiers" run \
    --server "$SOCK" --cache-dir "$TMP/other" -m "$GGUF" -p "$PROMPT" -n 1
fi

run ctl clear --namespace never-used --socket "$SOCK"
[[ $rc -eq 0 ]] && grep -q 'tenant "never-used" of uid [0-9]* moved to generation 1' "$TMP/err" ||
  fail "ctl clear: exit $rc: $(cat "$TMP/err")"
[[ -f "$TMP/cache/serve-namespaces" ]] || fail "ctl clear recorded nothing in the cache directory"
run ctl drain --socket "$SOCK"
[[ $rc -eq 0 ]] || fail "ctl drain: exit $rc: $(cat "$TMP/err")"
[[ "$(http "$PORT" /healthz)" == $'503 text/plain; charset=utf-8\ndraining' ]] ||
  fail "/healthz while draining: $(http "$PORT" /healthz)"

stop_serve TERM
[[ $serve_rc -eq 0 ]] || fail "SIGTERM: exit $serve_rc: $(cat "$TMP/serve1.err")"
grep -q "stopped; the cache was flushed" "$TMP/serve1.err" ||
  fail "no flush line at stop: $(cat "$TMP/serve1.err")"

# Restarted from a config file: the chunks are on the SSD, and a run loads them.
cat >"$TMP/kvtier.toml" <<EOF
[serve]
socket = "$SOCK"
cache-dir = "$TMP/cache"
layout = "$LAYOUT"
host_bytes = "16MiB"
tenant-secret-file = "$TMP/secret"
token-file = "$TMP/token"
EOF
printf 'client-token-0123\n' >"$TMP/token"
chmod 600 "$TMP/token"
start_serve "$TMP/serve2.err" --config "$TMP/kvtier.toml" ||
  { fail "serve --config did not start: $(cat "$TMP/serve2.err")"; finish serve; }
[[ "$(stat -c '%a' "$SOCK")" == 600 ]] || fail "socket without a group: $(stat -c '%a' "$SOCK")"
expect_fail "no token" 1 "a missing or wrong token); give its --token-file" ctl stats \
  --socket "$SOCK"
run ctl stats --socket "$SOCK" --token-file "$TMP/token"
[[ $rc -eq 0 ]] || fail "ctl stats with the token: exit $rc: $(cat "$TMP/err")"
if [[ $model_steps -eq 1 ]]; then
  ssd_blocks='[t["blocks"] for t in j["engine"]["tiers"] if t["kind"] == "ssd"][0]'
  [[ "$(json_get "$ssd_blocks")" == 20 ]] ||  # run's 2 chunks and preload's 2, of 5 layers.
    fail "after the restart the SSD tier holds no 20 blocks: $(cat "$TMP/out")"
  run run --server "$SOCK" -m "$GGUF" -p "$PROMPT" -n 4  # Also logs the client's refusal.
  [[ $rc -eq 1 ]] && grep -q "wrong token); give its --server-token-file" "$TMP/err" ||
    fail "run --server without the token: exit $rc: $(cat "$TMP/err")"
  export KVTIER_SERVER_TOKEN_FILE="$TMP/token"
  run run --server "$SOCK" -m "$GGUF" -p "$PROMPT" -n 4 --salt tenant-a
  grep -q "32 loaded from the cache (chunks: 2 ssd)" "$TMP/err" ||
    fail "run --server after the restart: $(cat "$TMP/err")"
  run run --server "$SOCK" -m "$GGUF" -p "$PROMPT" -n 4 --salt tenant-b
  grep -q " 0 loaded from the cache" "$TMP/err" ||
    fail "another tenant found tenant-a's chunks: $(cat "$TMP/err")"
  # Cleared, tenant-a's chunks are misses, also after the service restarted.
  run ctl clear --namespace tenant-a --socket "$SOCK" --token-file "$TMP/token"
  [[ $rc -eq 0 ]] || fail "ctl clear --namespace tenant-a: exit $rc: $(cat "$TMP/err")"
  run run --server "$SOCK" -m "$GGUF" -p "$PROMPT" -n 4 --salt tenant-a
  grep -q " 0 loaded from the cache" "$TMP/err" ||
    fail "tenant-a hit after ctl clear: $(cat "$TMP/err")"
  # The run stored them again, under the new generation; the restarted service knows it.
  stop_serve INT
  start_serve "$TMP/serve2b.err" --config "$TMP/kvtier.toml" ||
    fail "serve did not restart: $(cat "$TMP/serve2b.err")"
  run ctl clear --namespace tenant-a --socket "$SOCK" --token-file "$TMP/token"
  grep -q "moved to generation 2" "$TMP/err" ||
    fail "the restarted service forgot the clear: $(cat "$TMP/err")"
  run inspect "$TMP/cache"
  grep -q "other file" "$TMP/out" && fail "inspect counts the service's state: $(cat "$TMP/out")"
  unset KVTIER_SERVER_TOKEN_FILE
fi
stop_serve INT
[[ $serve_rc -eq 0 ]] || fail "SIGINT: exit $serve_rc: $(cat "$TMP/serve2.err")"

# The packaged config, as the systemd unit starts it (a small host tier and a temporary cache).
mkdir -p "$TMP/rt"
RUNTIME_DIRECTORY="$TMP/rt" start_serve "$TMP/serve3.err" --config "$ROOT/packaging/kvtier.toml" \
  --cache-dir "$TMP/cache3" --host-bytes 64MiB --ssd-bytes 64MiB --socket-group "$GROUP" \
  --http 0 || fail "serve --config packaging/kvtier.toml did not start: $(cat "$TMP/serve3.err")"
if [[ -n "$SERVE_PID" ]]; then
  [[ -S "$TMP/rt/kvtier.sock" ]] || fail "no socket in \$RUNTIME_DIRECTORY: $(ls -la "$TMP/rt")"
  stop_serve TERM
  [[ $serve_rc -eq 0 ]] || fail "packaged config: SIGTERM: exit $serve_rc"
fi
if command -v systemd-analyze >/dev/null; then
  sed "s#/usr/local/bin/kvtier#$(realpath "$KVTIER")#" "$ROOT/packaging/kvtier.service" \
    >"$TMP/kvtier.service"
  systemd-analyze verify "$TMP/kvtier.service" >"$TMP/verify" 2>&1 ||
    fail "systemd-analyze verify kvtier.service: $(cat "$TMP/verify")"
  [[ ! -s "$TMP/verify" ]] || fail "systemd-analyze verify kvtier.service: $(cat "$TMP/verify")"
else
  echo "SKIP (unit check): systemd-analyze is missing"
fi

finish serve
