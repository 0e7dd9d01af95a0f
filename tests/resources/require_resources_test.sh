#!/usr/bin/env bash
# Goal: with KVTIER_REQUIRE_RESOURCES=1 a test that needs the shared model or redis-server FAILS
# when the resource is missing, and without the variable the same test still skips and passes, so
# CI (which sets the variable) cannot pass vacuously while a plain `./run.sh test` on a machine
# without the model or redis-server still succeeds.
# Method: run real test programs with the resource made absent (KVTIER_SHARED_MODELS_DIR and the
# models-directory argument pointed at an empty directory; PATH without redis-server), once with
# the variable and once without, and check exit status and output.
# Usage: require_resources_test.sh <runtime_tokenizer_test> <redis_store_test> <run_chat_test.sh>
#                                  <kvtier>
set -u
TOKENIZER_TEST="$1"
REDIS_TEST="$2"
RUN_CHAT_TEST="$3"
KVTIER="$4"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/no-models" "$TMP/empty-path"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# check <name> <expected: fail|skip> <needle> <command>...: with "fail", a non-zero exit that is
# not a signal and the needle in the output; with "skip", exit 0 and the needle in the output.
check() {
  local name="$1" expect="$2" needle="$3"; shift 3
  local rc=0
  "$@" >"$TMP/out" 2>&1 || rc=$?
  if [[ $expect == fail ]] && [[ $rc -eq 0 || $rc -ge 128 ]]; then
    fail "$name: expected a failure, got exit $rc: $(tail -n 5 "$TMP/out")"
  elif [[ $expect == skip ]] && [[ $rc -ne 0 ]]; then
    fail "$name: expected a skip (exit 0), got exit $rc: $(tail -n 5 "$TMP/out")"
  elif ! grep -qF -- "$needle" "$TMP/out"; then
    fail "$name: output lacks '$needle': $(tail -n 5 "$TMP/out")"
  fi
}

model_test=(env KVTIER_SHARED_MODELS_DIR="$TMP/no-models" "$TOKENIZER_TEST"
            --gtest_filter=TokenizerTest.Tok512RoundTripsAndMatchesQuadraticMerge)
check model_required fail "KVTIER_REQUIRE_RESOURCES=1" env KVTIER_REQUIRE_RESOURCES=1 \
  "${model_test[@]}"
check model_optional skip "[  SKIPPED ]" env -u KVTIER_REQUIRE_RESOURCES "${model_test[@]}"

# `command -v` runs in /bin/sh, found by its absolute path; an empty PATH hides redis-server.
redis_test=(env PATH="$TMP/empty-path" "$REDIS_TEST" --gtest_filter=RedisStoreTest.ExistsAndDelete)
check redis_required fail "KVTIER_REQUIRE_RESOURCES=1" env KVTIER_REQUIRE_RESOURCES=1 \
  "${redis_test[@]}"
check redis_optional skip "[  SKIPPED ]" env -u KVTIER_REQUIRE_RESOURCES "${redis_test[@]}"

# The CLI's model test: exit 77 (CTest's skip code there) without the variable, 1 with it.
rc=0
env -u KVTIER_REQUIRE_RESOURCES bash "$RUN_CHAT_TEST" "$KVTIER" "$TMP/no-models" >"$TMP/out" 2>&1 ||
  rc=$?
[[ $rc -eq 77 ]] || fail "cli_optional: expected exit 77 (skip), got $rc: $(cat "$TMP/out")"
check cli_required fail "KVTIER_REQUIRE_RESOURCES=1" env KVTIER_REQUIRE_RESOURCES=1 \
  bash "$RUN_CHAT_TEST" "$KVTIER" "$TMP/no-models"

if [[ $failures -ne 0 ]]; then
  echo "$failures resource-requirement check(s) failed" >&2
  exit 1
fi
echo "resource-requirement checks passed"
