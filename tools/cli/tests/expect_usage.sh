# Sourced by CLI test scripts (not a test itself). expect_usage NAME NEEDLE COMMAND...: runs
# COMMAND and records a failure (through the caller's `fail`) unless it exits 2 with one line on
# stderr that contains NEEDLE, as every command-line mistake must. Needs $TMP from the caller.
expect_usage() {
  local name="$1" needle="$2"; shift 2
  local rc=0
  "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 2 ]] || { fail "$name: exit $rc, expected 2: $(cat "$TMP/err")"; return; }
  [[ "$(wc -l <"$TMP/err")" -eq 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
}
