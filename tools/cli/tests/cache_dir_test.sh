#!/usr/bin/env bash
# Goal: `kvtier run` and `kvtier chat` never claim to cache what did not reach the disk. A
# --cache-dir that cannot be used (a regular file, a place where nothing can be created, a
# read-only filesystem, a filesystem without room for one segment) fails at once with exit 1 and
# one line naming the directory; a disk that fills up during a chat prints one clear error line,
# goes on answering, and makes the exit status non-zero.
# Method: the real stories260K model (../shared/models); small tmpfs mounts for the read-only,
# full and filling cases (needs root and mount; those cases say SKIP without them); a chat fed
# through a FIFO so that the disk is filled exactly between turn 1 and turn 2.
# Usage: cache_dir_test.sh <path to kvtier> <shared models directory>
# Exit 77 (skipped) when the shared model files are absent; exit 1 instead when
# KVTIER_REQUIRE_RESOURCES=1 (CI), so a run without the models cannot pass by skipping.
set -u

KVTIER="$1"
MODELS="$2"
BIN="$MODELS/stories260K.bin"
TOK="$MODELS/tok512.bin"
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
require_files "$BIN" "$TOK"
TMP="$(mktemp -d)"
MOUNTS=()
cleanup() {
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside"

# expect_unusable <name> <dir>: run fails with exit 1 before generating, one line naming <dir>.
expect_unusable() {
  local name="$1" dir="$2" rc=0
  "$KVTIER" run --model "$BIN" --tokenizer "$TOK" --prompt "$PROMPT" --steps 8 \
    --cache-dir "$dir" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [[ $rc -eq 1 ]] || { fail "$name: exit $rc (want 1), stderr: $(cat "$TMP/err")"; return; }
  grep -qF "cache directory $dir cannot be used" "$TMP/err" ||
    fail "$name: stderr does not name the directory: $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
  [[ ! -s "$TMP/out" ]] || fail "$name: generated text although the cache cannot be used"
}

# mount_tmpfs <dir> <options>: 0 when mounted. The options give mode=0700: a tmpfs root is 1777
# by default, and kvtier refuses a cache directory that others can write.
mount_tmpfs() {
  mkdir -p "$1"
  mount -t tmpfs -o "$2" tmpfs "$1" 2>/dev/null || return 1
  MOUNTS+=("$1")
}

: >"$TMP/plain-file"
expect_unusable not_a_directory "$TMP/plain-file"
expect_unusable proc /proc/self/kvtier-cache

if mount_tmpfs "$TMP/ro" "size=4m,ro,mode=0700"; then
  expect_unusable read_only "$TMP/ro"
else
  echo "SKIP: read_only (no tmpfs mount: not root?)"
fi

if mount_tmpfs "$TMP/small" "size=8m,mode=0700"; then
  expect_unusable no_room "$TMP/small"
  grep -q "no space left on device" "$TMP/err" || fail "no_room: not reported as no space: $(cat "$TMP/err")"
else
  echo "SKIP: no_room (no tmpfs mount)"
fi

# A disk that fills between two chat turns: turn 2's store fails, the reply is still printed,
# one error line says why, and the exit status is 1.
if mount_tmpfs "$TMP/filling" "size=24m,mode=0700"; then
  mkfifo "$TMP/turns"
  rc_file="$TMP/chat-rc"
  ( rc=0
    "$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --steps 20 --cache-dir "$TMP/filling/c" \
      <"$TMP/turns" >"$TMP/out" 2>"$TMP/err" || rc=$?
    echo "$rc" >"$rc_file" ) &
  chat_pid=$!
  exec 3>"$TMP/turns"
  echo "Once upon a time, there was a little dog named Max who liked to run." >&3
  for _ in $(seq 1 600); do
    grep -q '^\[turn 1\]' "$TMP/err" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '^\[turn 1\]' "$TMP/err" || fail "filling: turn 1 never finished: $(cat "$TMP/err")"
  # Fill every byte left (dd stops at ENOSPC).
  dd if=/dev/zero of="$TMP/filling/fill" bs=64k 2>/dev/null
  echo "One day, Max saw a big red ball in the park and he wanted to play with it." >&3
  exec 3>&-
  wait "$chat_pid"
  rc="$(cat "$rc_file")"
  [[ "$rc" == 1 ]] || fail "filling: chat exit $rc (want 1): $(cat "$TMP/err")"
  [[ $(grep -c '^\[turn ' "$TMP/err") -eq 2 ]] || fail "filling: expected 2 turns: $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/out") -eq 2 ]] || fail "filling: expected 2 replies: $(cat "$TMP/out")"
  [[ $(grep -c 'error: the KV cache could not store' "$TMP/err") -eq 1 ]] ||
    fail "filling: expected one error line: $(cat "$TMP/err")"
  grep 'error: the KV cache could not store' "$TMP/err" | grep -q "NoSpace" ||
    fail "filling: the error does not say NoSpace: $(cat "$TMP/err")"
else
  echo "SKIP: filling (no tmpfs mount)"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "cache_dir_test: all checks passed"
