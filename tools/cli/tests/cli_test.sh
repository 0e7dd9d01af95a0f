#!/usr/bin/env bash
# Goal: the `kvtier` binary prints its version and help, computes the documented key vectors
# (docs/key_format.md, vectors N1/C1 and N2/C2), benchmarks, inspects and verifies an SSD cache
# directory (verify names a flipped byte's record by file and offset), and answers every kind of
# bad input with one line on stderr naming the problem and a non-zero exit status, never a crash.
# Method: run the binary on fixtures and generated inputs; compare stdout with the vectors and
# check each failure's exit status (non-zero, below 128 so not a signal) and its message.
# Usage: cli_test.sh <path to kvtier> <this tests directory>
set -u

KVTIER="$1"
FIXTURES="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
LAYOUT="layers=2,kv_heads=1,head_dim=16,dtype=f16,block_tokens=16"
TOKENS="$FIXTURES/tokens_0_39.txt"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_ok <name> <needle>... -- <args>: exit 0 and stdout contains every needle.
expect_ok() {
  local name="$1"; shift
  local needles=()
  while [[ "$1" != "--" ]]; do needles+=("$1"); shift; done
  shift
  local rc=0
  "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || { fail "$name: exit $rc, stderr: $(cat "$TMP/err")"; return; }
  local n
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$TMP/out" || fail "$name: stdout lacks '$n'"
  done
}

# expect_fail <name> <needle> <args>...: non-zero exit that is not a signal, and stderr is one
# line containing the needle.
expect_fail() {
  local name="$1" needle="$2"; shift 2
  local rc=0
  "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  if [[ $rc -eq 0 ]]; then fail "$name: exit 0"; return; fi
  if [[ $rc -ge 128 ]]; then fail "$name: killed by a signal (exit $rc)"; return; fi
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
  local lines
  lines=$(wc -l <"$TMP/err")
  [[ $lines -eq 1 ]] || fail "$name: stderr has $lines lines: $(cat "$TMP/err")"
}

# Version and help.
expect_ok version "kvtier 0.1.0" -- --version
expect_ok help "hash" "--version" -- --help
expect_ok hash_help "--layout" "--salt" "--tokens" "--extra-key" -- hash --help
expect_ok help_word "Usage: kvtier" "bench" -- help
expect_ok help_word_run "--max-tokens" "-p,--prompt" "=256" -- help run

# Usage errors: exit 2 (not CLI11's 100+ codes), one line, naming the subcommands where useful.
# expect_usage <name> <needle> <args>...
expect_usage() {
  local name="$1" needle="$2"; shift 2
  local rc=0
  "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [[ $rc -eq 2 ]] || { fail "$name: exit $rc (want 2): $(cat "$TMP/err")"; return; }
  grep -qF -- "$needle" "$TMP/err" || fail "$name: stderr lacks '$needle': $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
}
expect_usage no_subcommand "subcommands: demo, run, chat" 
expect_usage unknown_subcommand "subcommands: demo, run" bogus
expect_usage help_unknown "no subcommand 'bogus'" help bogus
expect_usage unknown_flag "--bogus" demo --bogus
expect_usage steps_not_a_number "'abc' is not a whole number" run -m x --steps abc
expect_usage block_tokens_rule "multiple of 16 from 16 to 1024" run -m x --block-tokens 20
expect_usage seed_below_minus_one "-1 (random)" run -m x --seed -2
expect_usage top_p_not_a_number "'high' is not a number" chat -m x --top-p high
expect_usage log_level "not in {debug,info,warn,error}" selfcheck --log-level loud
expect_ok quiet_root "namespace_digest" -- -q hash --layout "$LAYOUT" --salt t --tokens "$TOKENS"
expect_ok quiet_after "namespace_digest" -- hash --layout "$LAYOUT" --salt t --tokens "$TOKENS" --quiet

# Vectors N1/C1 of docs/key_format.md.
C1_NS=84c1edcdc4a8dab4f3b3d4a4b5af738b2655426d8bad726fc78973136c2a330c
C1_H0=354858e41e3ed729af884a6f5d429572751e908550e51871cb267d177c103ad2
C1_H1=e9dc156b2cbea04456563fb738f9eafadb45c44ec6868523a4bc223afdeb603d
L2_DIGEST=422668ad3af683c2b8249b937b62554c6084790a0c855ad464033707457c0329
expect_ok hash_c1 "\"namespace_digest\": \"$C1_NS\"" "\"layout_digest\": \"$L2_DIGEST\"" \
  "\"token_count\": 40" "\"tail_token_count\": 8" "\"block_tokens\": 16" \
  "\"$C1_H0\"" "\"$C1_H1\"" -- \
  hash --layout "$LAYOUT" --salt tenant-a --model tiny --tokens "$TOKENS"
cp "$TMP/out" "$TMP/c1.json"
"$KVTIER" hash --layout "$LAYOUT" --salt tenant-a --model tiny --tokens - <"$TOKENS" \
  >"$TMP/stdin.json" 2>&1 || fail "hash from stdin failed"
cmp -s "$TMP/c1.json" "$TMP/stdin.json" || fail "hash from stdin differs from hash of the file"

# Vectors N2/C2: extra keys in order.
expect_ok hash_c2 "f122c2c237d38e9a14e297fd0abb09fe25ce7544498f2c14637a26ca8d58cdec" \
  "8975ee0c6beb4110dcfe28a57a16814bc47c421dcc0c371c36500e641a76ea48" \
  "214391d73f735382ecb5dfed3d786c446b8ee375f6b9c9af36a6a2e3244134b9" -- \
  hash --layout "$LAYOUT" --salt tenant-a --model tiny --extra-key lora:sql \
  --extra-key img:7f3a --tokens "$TOKENS"

# An empty token file has no chunk.
: >"$TMP/empty.txt"
expect_ok hash_empty "\"token_count\": 0" "\"chunk_hashes\": []" -- \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/empty.txt"

# Bad command lines.
expect_fail no_subcommand "a subcommand is required"
expect_fail unknown_subcommand "not expected: frobnicate" frobnicate
expect_fail unknown_flag "--bogus" hash --layout "$LAYOUT" --salt s --tokens "$TOKENS" --bogus
expect_fail missing_tokens_flag "--tokens is required" hash --layout "$LAYOUT" --salt s
expect_fail missing_salt_flag "--salt is required" hash --layout "$LAYOUT" --tokens "$TOKENS"

# Bad layouts.
expect_fail layout_block_tokens "block_tokens is 24, not a multiple of 16" \
  hash --layout "${LAYOUT/block_tokens=16/block_tokens=24}" --salt s --tokens "$TOKENS"
expect_fail layout_unknown_key "unknown layout key 'rope'" \
  hash --layout "$LAYOUT,rope=1" --salt s --tokens "$TOKENS"
expect_fail layout_missing_key "layout key 'dtype' missing" \
  hash --layout "layers=2,kv_heads=1,head_dim=16,block_tokens=16" --salt s --tokens "$TOKENS"
expect_fail layout_overflow "out of range for u32" \
  hash --layout "${LAYOUT/layers=2/layers=99999999999}" --salt s --tokens "$TOKENS"
expect_fail layout_too_big "block bytes" \
  hash --layout "layers=2,kv_heads=1024,head_dim=4096,dtype=f32,block_tokens=1024" --salt s \
  --tokens "$TOKENS"
expect_fail weights_digest "--weights-digest: expected 64 hex digits" \
  hash --layout "$LAYOUT" --salt s --weights-digest xyz --tokens "$TOKENS"

# Bad token files.
expect_fail missing_file "No such file or directory" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/does-not-exist.txt"
expect_fail directory "a directory, not a regular file" hash --layout "$LAYOUT" --salt s --tokens "$TMP"
printf '1 2 three 4\n' >"$TMP/word.txt"
expect_fail non_numeric "token 3: 'three' is not a decimal token id" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/word.txt"
# Bytes of the file are shown escaped: no terminal escape or NUL reaches stderr.
printf '1 a\033[2J\000b\n' >"$TMP/escape.txt"
expect_fail escaped_token "token 2: 'a\\x1b[2J\\x00b' is not a decimal token id" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/escape.txt"
if LC_ALL=C grep -q '[^[:print:]]' "$TMP/err"; then fail "escaped_token: stderr holds a control byte"; fi
printf '1\n-2\n' >"$TMP/negative.txt"
expect_fail negative "token 2: '-2' is not a decimal token id" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/negative.txt"
printf '4294967295 4294967296\n' >"$TMP/big.txt"
expect_fail out_of_range "token 2: '4294967296' is out of range" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/big.txt"
printf '1 %s\n' "$(printf '9%.0s' $(seq 1 100))" >"$TMP/huge.txt"
expect_fail very_long_number "is out of range" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/huge.txt"
yes 7 | head -n 4194305 >"$TMP/too_many.txt"
expect_fail too_many_tokens "more than 4194304 tokens" \
  hash --layout "$LAYOUT" --salt s --tokens "$TMP/too_many.txt"

# SSD tools: a tiny kept benchmark directory is inspected, verified, damaged and verified again.
mkdir -p "$TMP/bench"
expect_ok bench_keep "\"blocks\": 16" "\"write_bytes_per_s\"" "\"read_bytes_per_s\"" \
  "\"read_p99_us\"" "\"sync_mode\": \"periodic\"" "\"kept_dirs\"" -- \
  bench ssd --dir "$TMP/bench" --block-bytes 64KiB --queue-depth 4 --total-bytes 1MiB --json --keep
CACHE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kept_dirs"][0])' \
  "$TMP/out" 2>/dev/null)
if [[ -d "$CACHE" ]]; then
  expect_ok inspect_json "\"blocks\": 16" "\"live_bytes\": 1048576" "\"dead_bytes\": 0" \
    "\"checkpoint_valid\": true" -- inspect "$CACHE" --json
  expect_ok inspect_text "blocks 16" "layout b5b5" -- inspect "$CACHE"
  expect_ok verify_clean "16 records verified, 0 problems" -- verify "$CACHE"
  SEG=$(ls "$CACHE"/seg-*.kvs | head -n 1)
  # Record 2 starts after the 4 KiB segment header and two 64 KiB records; flip a payload byte.
  python3 - "$SEG" $((4096 + 2 * 65536 + 1000)) <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x5A]))
PY
  expect_fail verify_damaged "2 problems (listed above)" verify "$CACHE"
  grep -qF "$(basename "$SEG") offset $((4096 + 2 * 65536))..$((4096 + 3 * 65536))" "$TMP/out" ||
    fail "verify_damaged: stdout does not name the record: $(cat "$TMP/out")"
else
  fail "bench --keep did not report a kept directory"
fi
expect_ok bench_reopen "\"recovered_checkpoint\": 300" "\"recovered_scan\": 300" \
  "\"checkpoint_used\": true" -- bench ssd-reopen --dir "$TMP/bench" --blocks 300 --json
[[ $(ls "$TMP/bench" | wc -l) -eq 1 ]] || fail "bench left directories behind: $(ls "$TMP/bench")"

# numa: a fake sysfs tree with a CPU node and a CPU-less one (how a CXL expander shows up).
mkdir -p "$TMP/sys/devices/system/node/node0" "$TMP/sys/devices/system/node/node1"
echo "0-1" >"$TMP/sys/devices/system/node/node0/cpulist"
printf 'Node 0 MemTotal: 8388608 kB\nNode 0 MemFree: 4194304 kB\n' \
  >"$TMP/sys/devices/system/node/node0/meminfo"
echo "" >"$TMP/sys/devices/system/node/node1/cpulist"
printf 'Node 1 MemTotal: 16777216 kB\nNode 1 MemFree: 16000000 kB\n' \
  >"$TMP/sys/devices/system/node/node1/meminfo"
expect_ok numa "CXL candidate" "8.0 GiB" "4.0 GiB" -- numa --sysfs "$TMP/sys"
expect_ok numa_json '"cxl_candidate": true' '"memory_free_bytes": 4294967296' -- \
  numa --sysfs "$TMP/sys" --json
expect_fail numa_no_sysfs "no NUMA information" numa --sysfs "$TMP/nope"

# Bad SSD tool input.
expect_fail inspect_missing "no such directory" inspect "$TMP/nope"
expect_fail inspect_foreign "not a kvtier cache directory" inspect "$FIXTURES"
expect_fail verify_missing "no such directory" verify "$TMP/nope"
expect_fail verify_no_dir "dir is required" verify
expect_fail bench_nothing "name what to measure" bench
expect_fail bench_no_dir "--dir is required" bench ssd
expect_fail bench_uncreatable_dir "cannot create" bench ssd --dir "$TOKENS/nope" --total-bytes 1MiB
grep -q "bench: bench:" "$TMP/err" && fail "bench_uncreatable_dir: repeated prefix: $(cat "$TMP/err")"
expect_fail bench_same_dir_twice "given twice" bench ssd --dir "$TMP" --dir "$TMP/" --total-bytes 1m
expect_fail bench_bad_size "'1.5MiB' is not a size" bench ssd --dir "$TMP" --block-bytes 1.5MiB
expect_fail bench_bad_unit "'4kx' is not a size" bench ssd --dir "$TMP" --total-bytes 4kx
expect_fail bench_bad_unit2 "'4 MiB' is not a size" bench ssd --dir "$TMP" --total-bytes "4 MiB"
# fio's spellings: 64k, 1m, 1MB are binary sizes too.
expect_ok bench_fio_sizes "write" -- bench ssd --dir "$TMP" --block-bytes 64k --total-bytes 1m \
  --queue-depth 2
expect_fail bench_unaligned "multiple of 4 KiB" bench ssd --dir "$TMP" --block-bytes 1000
expect_fail bench_too_big "at most 64 MiB" bench ssd --dir "$TMP" --block-bytes 128MiB
expect_fail bench_block0 "block bytes must be a positive multiple" bench ssd --dir "$TMP" \
  --block-bytes 0
expect_fail bench_qd0 "queue depth must be 1..256" bench ssd --dir "$TMP" --queue-depth 0
expect_fail bench_qd_big "queue depth must be 1..256" bench ssd --dir "$TMP" --queue-depth 257
expect_fail bench_total_small "at least one block" bench ssd --dir "$TMP" --total-bytes 4KiB
expect_fail bench_overflow "is not a size" bench ssd --dir "$TMP" --total-bytes 99999999999GiB
# An engine option's bad size names its flag once; P (PiB), the unit of the options' bounds, is
# accepted (the model, opened first, is then what fails).
expect_fail engine_bad_size "kvtier: --host-bytes: '4kx' is not a size" run -m none -p hi \
  --host-bytes 4kx
grep -qF -- "--host-bytes: --host-bytes" "$TMP/err" && fail "engine_bad_size: repeated flag"
expect_fail engine_size_pib "open none" run -m none -p hi --host-bytes 1PiB
expect_fail engine_size_bound "must be from 1 to 1 PiB" run -m none -p hi --host-bytes 2pib
expect_fail reopen_blocks "blocks must be 1..16777216" bench ssd-reopen --dir "$TMP" --blocks 0

# Decode benchmark: a small synthetic model through every configuration, JSON keys present, the
# lossless offload identical to resident; its bad input named.
mkdir -p "$TMP/decode"
expect_ok bench_decode "\"resident_ms_per_token\"" "\"offload_ms_per_token\"" \
  "\"ladder_ms_per_token\"" "\"topk_ms_per_token\"" "\"roofline_ms_per_token\"" \
  "\"offload_over_roofline\"" "\"logits_identical\": true" -- \
  bench decode --model synthetic:tinyllama-1.1b --layers 2 --dim 64 --context 1024 \
  --block-tokens 16 --tokens 2 --top-k 8 --dir "$TMP/decode" --json
[[ -z "$(ls "$TMP/decode")" ]] || fail "bench decode left files behind: $(ls "$TMP/decode")"
# The ladder attends its int8/int4 blocks (older than 2,048 tokens; 4 layers, so that the device
# budget of two layers' working sets sends blocks down) quantized, ladder-dequant decodes them.
expect_ok bench_decode_ladder "\"quantized_attention\"" "\"attended_quantized\": true" \
  "\"attended_quantized\": false" "\"ladder_dequant_ms_per_token\"" "\"ladder_over_offload\"" \
  "\"ladder_over_roofline\"" -- \
  bench decode --model synthetic:tinyllama-1.1b --layers 4 --dim 64 --context 4096 \
  --block-tokens 16 --tokens 2 --configs resident,offload,ladder,ladder-dequant \
  --dir "$TMP/decode" --json
expect_fail decode_model "unknown" bench decode --model synthetic:nope --dir "$TMP/decode"
expect_fail decode_file "$TMP/nope.bin" bench decode --model "$TMP/nope.bin" --dir "$TMP/decode"
expect_fail decode_config "unknown configuration 'fast'" bench decode --configs resident,fast \
  --dir "$TMP/decode"
expect_fail decode_budget "device budget" bench decode --model synthetic:tinyllama-1.1b \
  --layers 2 --dim 64 --context 1024 --block-tokens 16 --tokens 1 --configs offload \
  --device-budget 64KiB --no-probe --dir "$TMP/decode"
expect_fail decode_dram "DRAM budget" bench decode --model synthetic:tinyllama-1.1b \
  --layers 2 --dim 64 --context 1024 --block-tokens 16 --tokens 1 --configs offload \
  --dram-budget 1MiB --no-probe --dir "$TMP/decode"
expect_fail decode_size "is not a size" bench decode --dram-budget 2GX --dir "$TMP/decode"
expect_fail decode_codec_threads "codec_threads must be in [1, 16]" bench decode \
  --codec-threads 0 --dir "$TMP/decode"

if [[ $failures -ne 0 ]]; then
  echo "$failures CLI check(s) failed" >&2
  exit 1
fi
echo "all CLI checks passed"
