# Functions shared by CLI test scripts; sourced, not run. The script sets KVTIER (the binary) and
# TMP (its scratch directory) first. Failures are counted in `failures`; finish() reports them
# and exits.

failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run <args>: runs kvtier under a time limit (RUN_TIMEOUT seconds, default 120) with stdin from
# /dev/null; sets rc; the output lands in $TMP/out and $TMP/err. A hang fails instead of stalling.
run() {
  rc=0
  timeout "${RUN_TIMEOUT:-120}" "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [[ $rc -ne 124 ]] || fail "kvtier $*: timed out (hung)"
}

# expect_fail <name> <exit status> <stderr needle> <args>...: kvtier exits with that status, says
# one line on stderr holding the needle, and prints nothing on stdout. RUNNER names the function
# that runs it (default run).
expect_fail() {
  local name="$1" want="$2" needle="$3"; shift 3
  "${RUNNER:-run}" "$@"
  [[ $rc -eq $want ]] || { fail "$name: exit $rc (want $want), stderr: $(cat "$TMP/err")"; return; }
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
  [[ ! -s "$TMP/out" ]] || fail "$name: stdout is not empty: $(cat "$TMP/out")"
}

# require_files <file>...: exits 77 (skipped) when one is missing, or 1 when
# KVTIER_REQUIRE_RESOURCES=1 (CI), so that a run without the shared models cannot pass by skipping.
require_files() {
  local f msg
  for f in "$@"; do
    [[ -f "$f" ]] && continue
    msg="shared model file $f is missing (expected ../shared/models beside the repository)"
    if [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
      echo "FAIL: $msg; KVTIER_REQUIRE_RESOURCES=1 makes a missing resource fail" >&2
      exit 1
    fi
    echo "SKIP: $msg"
    exit 77
  done
}

# finish <what>: exit 1 with a count when anything failed, else 0 with "<what> tests passed".
finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$failures $1 check(s) failed" >&2
    exit 1
  fi
  echo "$1 tests passed"
  exit 0
}
