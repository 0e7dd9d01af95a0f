#!/usr/bin/env bash
# Goal: no kvtier command opens a file of a cache directory through a link, uses a directory
# another user controls, or replaces a --metrics-file that is not a regular file; no file outside
# the cache directory is created, truncated or renamed. Each attack: LOCK replaced by a link to a
# file outside (clear, verify, repair, stats, inspect and run --cache-dir all refuse it, and the
# file keeps its bytes); a dangling LOCK link (the target is not created); the cache directory
# itself a link, owned by another uid, or writable by others (refused naming owner and mode);
# --metrics-file naming a FIFO, a device node or a link, or with a link planted at the old fixed
# "<path>.tmp" name; such a --metrics-file, a directory or a missing directory refused before the
# run (nothing generated), not at its end. Also: a LOCK left by a dead process is taken over
# with a warning naming its pid.
# Method: the real stories260K model (../shared/models) makes a cache; the attacks are made with
# ln, chown, chmod, mkfifo and mknod in a mktemp directory. Run as root (root passes permission
# checks, so ownership is tested with chown to uid 54321; the device node case needs mknod and
# says SKIP without it).
# Usage: cache_links_test.sh <path to kvtier> <shared models directory>
# Exit 77 (skipped) when the shared model files are absent; exit 1 instead when
# KVTIER_REQUIRE_RESOURCES=1 (CI).
set -u

KVTIER="$1"
MODELS="$2"
GGUF="$MODELS/stories260K.gguf"
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
require_files "$GGUF"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
C="$TMP/cache"
V="$TMP/victim"  # A file of the user's, e.g. ~/.bashrc.
PROMPT="Once upon a time, there was a little girl"

make_cache() {
  rm -rf "$C"
  run run -m "$GGUF" -p "$PROMPT" -n 4 --cache-dir "$C"
  [[ $rc -eq 0 ]] || fail "setup: kvtier run exit $rc: $(cat "$TMP/err")"
  echo data >"$V"
}

victim_untouched() {
  [[ "$(cat "$V" 2>/dev/null)" == data ]] || fail "$1: $V was changed: '$(cat "$V" 2>&1)'"
}

# refused <name> <needle> <args>...: kvtier exits 1 with the needle on stderr.
refused() {
  local name="$1" needle="$2"; shift 2
  run "$@"
  [[ $rc -eq 1 ]] || fail "$name: exit $rc (want 1), stderr: $(cat "$TMP/err")"
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
}

every_command_refuses() {
  local what="$1" needle="$2" cmd
  for cmd in clear verify repair stats inspect; do
    refused "$what: $cmd" "$needle" "$cmd" "$C"
  done
  refused "$what: run" "$needle" run -m "$GGUF" -p "$PROMPT" -n 4 --cache-dir "$C"
}

# LOCK replaced by a link to a file outside the cache.
make_cache
rm "$C/LOCK"; ln -s "$V" "$C/LOCK"
every_command_refuses lock_link "$C/LOCK is a symbolic link"
victim_untouched lock_link

# A dangling LOCK link: nothing is created where it points.
make_cache
rm "$C/LOCK"; ln -s "$TMP/created" "$C/LOCK"
every_command_refuses dangling_lock "$C/LOCK is a symbolic link"
[[ ! -e "$TMP/created" ]] || fail "dangling_lock: $TMP/created was created"

# The cache directory itself a link.
make_cache
ln -s "$C" "$TMP/cache-link"
refused dir_link "is a symbolic link" verify "$TMP/cache-link"
refused dir_link_run "is a symbolic link" run -m "$GGUF" -p "$PROMPT" -n 4 \
  --cache-dir "$TMP/cache-link"

# Another user's directory, and one that others can write.
make_cache
chown 54321 "$C"
every_command_refuses foreign_dir "(owner uid 54321"
chown 0 "$C"; chmod 0777 "$C"
every_command_refuses world_writable "mode 0777"
chmod 0700 "$C"

# A LOCK left by a process killed with SIGKILL: its pid stays in LOCK, its flock went with it.
make_cache
bash -c 'exit 0' & dead=$!; wait "$dead"
echo "$dead" >"$C/LOCK"
run run -m "$GGUF" -p "$PROMPT" -n 4 --cache-dir "$C"
[[ $rc -eq 0 ]] || fail "stale_lock: exit $rc: $(cat "$TMP/err")"
grep -qF "was left by process $dead" "$TMP/err" ||
  fail "stale_lock: no line naming pid $dead: $(cat "$TMP/err")"

# --metrics-file: a FIFO and a link are refused and left in place; a link planted at the old
# temporary name is not followed.
mkfifo "$TMP/fifo"
refused metrics_fifo "--metrics-file $TMP/fifo is a FIFO" run -m "$GGUF" -p "$PROMPT" -n 4 \
  --metrics-file "$TMP/fifo"
[[ -p "$TMP/fifo" ]] || fail "metrics_fifo: the FIFO was replaced"
ln -s "$V" "$TMP/metrics-link"
refused metrics_link "is a symbolic link" run -m "$GGUF" -p "$PROMPT" -n 4 \
  --metrics-file "$TMP/metrics-link"
victim_untouched metrics_link
ln -s "$V" "$TMP/m.prom.tmp"
run run -m "$GGUF" -p "$PROMPT" -n 4 --metrics-file "$TMP/m.prom"
[[ $rc -eq 0 ]] || fail "metrics_planted_tmp: exit $rc: $(cat "$TMP/err")"
grep -q '^kvtier_' "$TMP/m.prom" || fail "metrics_planted_tmp: no metrics in $TMP/m.prom"
victim_untouched metrics_planted_tmp
[[ -L "$TMP/m.prom.tmp" ]] || fail "metrics_planted_tmp: the planted link was replaced"
# Refused before the run, not at its end: a FIFO, a directory, a missing directory. Nothing
# was generated (stdout empty).
for target in "$TMP/fifo" "$TMP" "$TMP/missing-dir/m.prom"; do
  refused "metrics_early $target" "--metrics-file $target" run -m "$GGUF" -p "$PROMPT" -n 4 \
    --metrics-file "$target"
  [[ ! -s "$TMP/out" ]] || fail "metrics_early $target: the run went first: $(cat "$TMP/out")"
done

# A device node, as /dev/null is (made here: replacing the real one would break the machine).
if mknod "$TMP/null" c 1 3 2>/dev/null; then
  refused metrics_device "is a character device" run -m "$GGUF" -p "$PROMPT" -n 4 \
    --metrics-file "$TMP/null"
  [[ -c "$TMP/null" ]] || fail "metrics_device: the device node was replaced"
else
  echo "SKIP: metrics_device (mknod not permitted)"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "cache_links_test: all checks passed"
