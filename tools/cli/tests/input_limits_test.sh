#!/usr/bin/env bash
# Goal: the files and streams a user names are read only when they are regular files (or "-",
# stdin) and only up to a bound, and configuration the CLI would otherwise ignore is an error:
#   - --prompt-file, --prompt -, preload --document/--trace and hash --tokens refuse /dev/zero, a
#     FIFO and a directory at once (no hang, no bad_alloc), and a file or stream over its limit
#     (64 MiB for a prompt or a token file, 256 MiB for a trace), naming the file and the limit;
#   - a model that is a FIFO or a directory is refused at once, and so is a key file
#     (--ssd-key-file, --remote-key-file) that is a FIFO or readable by others, naming the option;
#   - --config and KVTIER_CONFIG refuse /dev/zero, a FIFO and a file over 64 KiB before reading,
#     and a 16 KB file of 8,000 nested tables fails at once naming its depth (it cost 2 GB);
#   - an unknown key or table in the config file, and a KVTIER_* variable no option reads, is a
#     usage error naming it and the nearest valid one, in the spelling the user used; a key of a
#     subcommand at the top level, or a top-level key in a table, says where it belongs;
#   - every KVTIER_* variable kvtier's scripts, tests and tools read is accepted (scanned from the
#     sources, so a new one that the CLI would refuse fails here), and --help still answers.
# Method: run the binary (no model needed: these inputs are read before the model is opened)
# under a time limit and a 1 GiB address-space limit, and check each exit status and message.
# Usage: input_limits_test.sh <path to kvtier> <repository root>
set -u

KVTIER="$1"
ROOT="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
RUN_TIMEOUT=30
LAYOUT="layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"
TOKENS="$ROOT/tools/cli/tests/tokens_0_39.txt"
HASH=(hash --layout "$LAYOUT" --salt s)

# in_limits <args>: like run (cli_test_lib.sh), with stdin from $STDIN (default /dev/null) and at
# most 1 GiB of address space, so a read without a bound fails instead of swapping.
in_limits() {
  rc=0
  (ulimit -v 1048576; timeout "$RUN_TIMEOUT" "$KVTIER" "$@" <"${STDIN:-/dev/null}" \
    >"$TMP/out" 2>"$TMP/err") || rc=$?
  [[ $rc -ne 124 ]] || fail "kvtier $*: timed out (hung)"
}

# refused <name> <exit status> <needle> <args>...: expect_fail of cli_test_lib.sh, under in_limits.
refused() { RUNNER=in_limits expect_fail "$@"; }

mkfifo "$TMP/fifo"
mkdir "$TMP/dir"
truncate -s $((64 * 1024 * 1024 + 1)) "$TMP/big64"
truncate -s $((256 * 1024 * 1024 + 1)) "$TMP/big256"

# Prompt files: only regular files, at most 64 MiB; stdin at most 64 MiB too.
refused prompt_zero 1 "--prompt-file /dev/zero: a character device, not a regular file" \
  run -m none --prompt-file /dev/zero
refused prompt_fifo 1 "--prompt-file $TMP/fifo: a FIFO, not a regular file" \
  run -m none --prompt-file "$TMP/fifo"
refused prompt_dir 1 "a directory, not a regular file" run -m none --prompt-file "$TMP/dir"
refused prompt_big 1 "--prompt-file $TMP/big64: 67108865 bytes, more than the limit of 64 MiB" \
  run -m none --prompt-file "$TMP/big64"
STDIN=/dev/zero refused prompt_stdin 1 "--prompt - (stdin): more than the limit of 64 MiB" \
  run -m none --prompt -
# A prompt file within the limit is read: the error is then about the missing model.
printf 'Once upon a time' >"$TMP/prompt.txt"
refused prompt_ok 1 "none" run -m none --prompt-file "$TMP/prompt.txt"
grep -q "prompt-file" "$TMP/err" && fail "prompt_ok: the prompt file was refused: $(cat "$TMP/err")"

# preload's document and trace.
refused trace_zero 1 "--trace /dev/zero: a character device, not a regular file" \
  preload -m none --cache-dir "$TMP/c" --trace /dev/zero
refused document_zero 1 "--document /dev/zero: a character device, not a regular file" \
  preload -m none --cache-dir "$TMP/c" --document /dev/zero
refused trace_fifo 1 "a FIFO, not a regular file" preload -m none --cache-dir "$TMP/c" \
  --trace "$TMP/fifo"
refused trace_big 1 "more than the limit of 256 MiB" preload -m none --cache-dir "$TMP/c" \
  --trace "$TMP/big256"
refused document_big 1 "more than the limit of 64 MiB" preload -m none --cache-dir "$TMP/c" \
  --document "$TMP/big64"
STDIN=/dev/zero refused trace_stdin 1 "--trace -: more than the limit of 256 MiB" \
  preload -m none --cache-dir "$TMP/c" --trace -

# Token files (a run of NULs was one endless token: the read never ended).
refused tokens_zero 1 "token file /dev/zero: a character device, not a regular file" \
  "${HASH[@]}" --tokens /dev/zero
refused tokens_big 1 "more than the limit of 64 MiB" "${HASH[@]}" --tokens "$TMP/big64"
STDIN=/dev/zero refused tokens_stdin 1 "token file <stdin>: more than the limit of 64 MiB" \
  "${HASH[@]}" --tokens -
in_limits "${HASH[@]}" --tokens "$TOKENS"
[[ $rc -eq 0 ]] || fail "tokens_ok: exit $rc: $(cat "$TMP/err")"

# The config file: a regular file of at most 64 KiB, checked before it is opened.
refused config_zero 2 "config file /dev/zero: a character device, not a regular file" \
  --config /dev/zero "${HASH[@]}" --tokens "$TOKENS"
KVTIER_CONFIG=/dev/zero refused config_env_zero 2 "a character device, not a regular file" \
  "${HASH[@]}" --tokens "$TOKENS"
refused config_fifo 2 "a FIFO, not a regular file" --config "$TMP/fifo" "${HASH[@]}" \
  --tokens "$TOKENS"
{ echo '[run]'; head -c 70000 /dev/zero | tr '\0' '#'; echo; } >"$TMP/big.toml"
refused config_big 2 "$(stat -c %s "$TMP/big.toml") bytes, more than the limit of 64 KiB" \
  --config "$TMP/big.toml" "${HASH[@]}" --tokens "$TOKENS"
# 8,000 nested tables in 16 KB: refused on the text, before CLI11's reader builds its lists.
{ printf '[a'; for _ in $(seq 7999); do printf '.a'; done; printf ']\nx = 1\n'; } >"$TMP/deep.toml"
refused config_deep 2 "line 1: tables nested 8000 deep (at most 4)" --config "$TMP/deep.toml" \
  "${HASH[@]}" --tokens "$TOKENS"

# Unknown keys and tables name the nearest valid one, in the file's spelling.
printf '[run]\nssd-keyfile = "keys"\n' >"$TMP/typo.toml"
refused config_typo 2 "unknown key 'ssd-keyfile' in [run]; did you mean 'ssd-key-file'?" \
  --config "$TMP/typo.toml" "${HASH[@]}" --tokens "$TOKENS"
printf '[run]\nssd_keyfile = "keys"\n' >"$TMP/snake.toml"
refused config_snake 2 "unknown key 'ssd_keyfile' in [run]; did you mean 'ssd_key_file'?" \
  --config "$TMP/snake.toml" "${HASH[@]}" --tokens "$TOKENS"
printf '[runn]\ncache-dir = "/tmp/x"\n' >"$TMP/table.toml"
refused config_table 2 "unknown table [runn]; did you mean [run]?" --config "$TMP/table.toml" \
  "${HASH[@]}" --tokens "$TOKENS"
printf 'cache-dir = "/tmp/x"\n' >"$TMP/top.toml"
refused config_top 2 "unknown key 'cache-dir' at the top level; it belongs in [run], [chat]" \
  --config "$TMP/top.toml" "${HASH[@]}" --tokens "$TOKENS"
printf '[run]\nlog-level = "info"\n' >"$TMP/root_key.toml"
refused config_root_key 2 "unknown key 'log-level' in [run]; it belongs at the top level" \
  --config "$TMP/root_key.toml" "${HASH[@]}" --tokens "$TOKENS"
printf '[bench.ssd]\nqueue-depht = 4\n' >"$TMP/nested.toml"
refused config_nested 2 "unknown key 'queue-depht' in [bench.ssd]; did you mean 'queue-depth'?" \
  --config "$TMP/nested.toml" "${HASH[@]}" --tokens "$TOKENS"
# Valid files still work: keys of every kind, tables of subcommands not run.
printf '%s\n' 'log-level = "warn"' '[run]' 'ssd_io_depth = 8' 'cache-dir = "/tmp/x"' \
  '[bench.ssd]' 'queue-depth = 4' >"$TMP/good.toml"
in_limits --config "$TMP/good.toml" "${HASH[@]}" --tokens "$TOKENS"
[[ $rc -eq 0 ]] || fail "config_good: exit $rc: $(cat "$TMP/err")"

# Model files: only regular files, refused at once (a FIFO without a writer made the open wait
# for one; the tokenizer's case is Llama2cLoaderTest.RefusesFilesThatAreNotRegular).
refused model_fifo 1 "$TMP/fifo is not a regular file" run -m "$TMP/fifo" --prompt hi
refused model_dir 1 "$TMP/dir is not a regular file" run -m "$TMP/dir" --prompt hi

# Key files: refused at once, naming the option that gave them (an SSD key file's error read
# "remote key file" before).
printf '1 %064d\n' 7 >"$TMP/open.keys"
chmod 644 "$TMP/open.keys"
refused ssd_key_fifo 1 "--ssd-key-file $TMP/fifo is not a regular file" \
  serve --layout "$LAYOUT" --model-name m --socket "$TMP/s.sock" --cache-dir "$TMP/kc" \
  --ssd-key-file "$TMP/fifo"
refused remote_key_mode 1 "--remote-key-file $TMP/open.keys has mode 0644" \
  serve --layout "$LAYOUT" --model-name m --socket "$TMP/s.sock" --redis 127.0.0.1:1 \
  --remote-key-file "$TMP/open.keys"
refused bench_key_fifo 1 "--remote-key-file $TMP/fifo is not a regular file" \
  bench remote --redis 127.0.0.1:1 --remote-key-file "$TMP/fifo"

# Variables: an unknown KVTIER_* one is a usage error naming the nearest.
want="the environment variable KVTIER_SSD_KEYFILE is not one kvtier reads; did you mean"
KVTIER_SSD_KEYFILE=keys refused env_typo 2 "$want KVTIER_SSD_KEY_FILE?" \
  "${HASH[@]}" --tokens "$TOKENS"
KVTIER_CAHCE_DIR=/tmp/x refused env_cache_dir 2 "did you mean KVTIER_CACHE_DIR?" \
  "${HASH[@]}" --tokens "$TOKENS"
KVTIER_SSD_KEYFILE=keys "$KVTIER" run --help >/dev/null 2>&1 ||
  fail "env_help: run --help fails with an unknown variable set"
# Every variable the sources read from the environment (C/C++ getenv, Python os.environ/getenv,
# shell expansions; in CMake files only the ENVIRONMENT of tests, "NAME=value") is accepted, and
# so are the options' own.
cmake_files='(^|/)CMakeLists\.txt$|\.cmake$'
mapfile -t read_vars < <(cd "$ROOT" && {
  git ls-files | grep -vE "\.md\$|$cmake_files|input_limits_test\.sh\$" | xargs grep -hoE \
    'getenv\( *"KVTIER_[A-Z0-9_]+|environ(\.get)?[(\[] *"KVTIER_[A-Z0-9_]+|\$\{?KVTIER_[A-Z0-9_]+'
  git ls-files | grep -E "$cmake_files" | xargs grep -hoE '[";]KVTIER_[A-Z0-9_]+='
} 2>/dev/null | grep -oE 'KVTIER_[A-Z0-9_]+' | sort -u)
[[ ${#read_vars[@]} -ge 8 ]] || fail "env_scan: only ${#read_vars[@]} variables found in $ROOT"
for v in "${read_vars[@]}" KVTIER_CODEC KVTIER_REDIS KVTIER_SSD_IO_DEPTH KVTIER_SALT; do
  out="$(env "$v=1" "$KVTIER" "${HASH[@]}" --tokens "$TOKENS" 2>&1 >/dev/null)"
  [[ "$out" != *"not one kvtier reads"* ]] || fail "env_scan: $v is refused: $out"
done
echo "env_scan: ${#read_vars[@]} variables read by the sources, all accepted"

finish "input limits"
