#!/usr/bin/env bash
# Goal: `kvtier run` and `kvtier chat` have exactly one flag per CLI row of the engine's options
# table (docs/options.md, which options_table_test keeps equal to the table), each with its
# KVTIER_<NAME> variable and its config-file key (snake_case as in the table, or dashed); a value
# out of range is a usage error naming the range, from a flag, a variable or the config file;
# and the options reach the engine: a run with several of them set works (a codec's zstd level
# and group size of 0 among them: the codec's defaults), and an SSD option without --cache-dir is
# a one-line error.
# Method: read the CLI rows from docs/options.md, compare them with the "Cache engine options"
# section of `run --help` and `chat --help` both ways, then give each typed row a bad value in a
# config file and check that the error names it; the runs use the shared stories260K model and
# are left out (not failed) when it is absent.
# Usage: options_test.sh <path to kvtier> <docs/options.md> <shared models directory>
set -u

KVTIER="$1"
DOC="$2"
MODELS="$3"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Rows of the table: "name type surfaces".
rows="$(awk -F'|' '/^\| `/ { gsub(/[ `]/, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $7)
                             print $2, $3, $7 }' "$DOC")"
[[ -n "$rows" ]] || fail "no rows read from $DOC"
cli_names="$(echo "$rows" | awk '$3 ~ /CLI/ { print $1 }')"
[[ $(echo "$cli_names" | wc -l) -ge 40 ]] || fail "fewer than 40 CLI rows in $DOC"

for sub in run chat; do
  help="$("$KVTIER" "$sub" --help)" || fail "$sub --help failed"
  section="$(echo "$help" | awk '/^Cache engine options/ { on = 1; next } /^[^ ]/ { on = 0 } on')"
  [[ -n "$section" ]] || fail "$sub --help has no 'Cache engine options' section"
  for name in $cli_names; do
    flag="--${name//_/-}"
    env="KVTIER_${name^^}"
    grep -qE -- "(^|[ ,])$flag([ ,=]|$)" <<<"$section" || fail "$sub --help lacks $flag"
    grep -q -- "$env" <<<"$section" || fail "$sub --help lacks the variable $env"
  done
  # Every flag of the section is a row (or a row's older spelling, listed in its description).
  for flag in $(grep -oE -- '^ +--[a-z0-9-]+' <<<"$section"); do
    name="${flag#--}"
    name="${name//-/_}"
    grep -qx -- "$name" <<<"$cli_names" || fail "$sub --help has $flag, which is no CLI row"
  done
done

# A bad value through the config file, under the table's own name: a usage error that names the
# value (so the key was read as that option's).
for row in $(echo "$rows" | awk '$3 ~ /CLI/ && $2 !~ /string/ { print $1 ":" $2 }'); do
  name="${row%%:*}"
  printf '[run]\n%s = "bogus-value"\n' "$name" >"$TMP/bad.toml"
  out="$("$KVTIER" --config "$TMP/bad.toml" run --model none 2>&1)"
  status=$?
  [[ $status -eq 2 ]] || fail "config key $name: exit $status, expected 2 ($out)"
  grep -q "bogus-value" <<<"$out" || fail "config key $name: the error does not name it: $out"
done
# Dashed keys too, variables, and ranges in the message.
printf '[run]\nssd-io-depth = 999\n' >"$TMP/dashed.toml"
out="$("$KVTIER" --config "$TMP/dashed.toml" run --model none 2>&1)"
[[ $? -eq 2 && "$out" == *"from 1 to 256"* ]] || fail "dashed config key: $out"
out="$(KVTIER_PREDICTION_WINDOW=17 "$KVTIER" run --model none 2>&1)"
[[ $? -eq 2 && "$out" == *"prediction_window=17: must be from 1 to 16"* ]] ||
  fail "KVTIER_PREDICTION_WINDOW=17: $out"
out="$("$KVTIER" run --model none --device-backend gpu 2>&1)"
[[ $? -eq 2 && "$out" == *"one of auto, cpu, cuda"* ]] || fail "--device-backend gpu: $out"
[[ $(echo "$out" | wc -l) -eq 1 ]] || fail "a bad value takes more than one line: $out"
out="$("$KVTIER" run --model none --ssd-io-depth abc 2>&1)"
[[ $? -eq 2 && "$out" == "kvtier: --ssd-io-depth: 'abc' is not a whole number from 1 to 256"* ]] ||
  fail "--ssd-io-depth abc: $out"
# The variables of older spellings still work (KVTIER_CODEC for --ssd-codec).
out="$(KVTIER_CODEC=gzip "$KVTIER" run --model none 2>&1)"
[[ $? -eq 2 && "$out" == *"'gzip' is not one of identity"* ]] || fail "KVTIER_CODEC=gzip: $out"

BIN="$MODELS/stories260K.bin"
TOK="$MODELS/tok512.bin"
if [[ -f "$BIN" && -f "$TOK" ]]; then
  run=("$KVTIER" run --model "$BIN" --tokenizer "$TOK" --temperature 0 --steps 8
       --prompt "Once upon a time, there was a little girl named Lily.")
  out="$("${run[@]}" --ssd-io-depth 8 2>&1)"
  [[ $? -eq 1 && "$out" == "kvtier run: --ssd-io-depth needs --cache-dir" ]] ||
    fail "--ssd-io-depth without --cache-dir: $out"
  out="$("${run[@]}" --remote-command-timeout-ms 100 2>&1)"
  [[ $? -eq 1 && "$out" == *"--remote-command-timeout-ms needs --redis"* ]] ||
    fail "a remote option without --redis: $out"
  # Options from every kind of source, on a run that stores and then loads its prompt.
  printf '[run]\nssd_io_backend = "thread_pool"\nssd-checkpoint-interval-ms = 1000\n' \
    >"$TMP/good.toml"
  for i in 1 2; do
    out="$(KVTIER_STAGING_BUFFERS=16 "$KVTIER" --config "$TMP/good.toml" "${run[@]:1}" \
             --cache-dir "$TMP/cache" --ssd-io-depth 4 --device-backend cpu \
             --writeback-dirty-fraction 0.75 --ssd-file-mode 0640 --host-huge-pages off \
             --prediction-enabled --json 2>"$TMP/err")"
    [[ $? -eq 0 ]] || fail "run $i with engine options: $(cat "$TMP/err")"
  done
  [[ "$out" == *'"cached_tokens":'* ]] || fail "second run's JSON: $out"
  grep -qE '"cached_tokens": *0[,}]' <<<"$out" && fail "second run loaded nothing: $out"
  mode="$(find "$TMP/cache" -name 'seg-*' | head -1 | xargs -r stat -c %a)"
  [[ "$mode" == 640 ]] || fail "--ssd-file-mode 0640 gave segment files of mode '$mode'"
  # A zstd level and group size of 0 are the codec's defaults, from a flag and from the file.
  printf '[run]\nssd_codec = "int8"\nssd_codec_zstd_level = 0\nssd_codec_group_size = 0\n' \
    >"$TMP/codec.toml"
  out="$("${run[@]}" --cache-dir "$TMP/zstd" --ssd-codec shuffle-zstd --ssd-codec-zstd-level 0 \
           2>&1 >/dev/null)" || fail "--ssd-codec shuffle-zstd --ssd-codec-zstd-level 0: $out"
  out="$("$KVTIER" --config "$TMP/codec.toml" "${run[@]:1}" --cache-dir "$TMP/int8" 2>&1 \
           >/dev/null)" || fail "ssd_codec_zstd_level = 0 in the config file: $out"
else
  echo "NOTE: $BIN or $TOK absent: the runs with engine options are left out"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
