#!/usr/bin/env bash
# Goal: `kvtier run` and `kvtier chat` serve the real stories260K model through the KV cache:
# greedy decoding prints the text the models README documents (llama2.c checkpoint and GGUF);
# a second run with the same prompt in a new process finds the prompt's chunks on the SSD under
# --cache-dir and prints the same text; chat loads earlier turns from the cache and stops with a
# clear message when the context is full, says why a reply has no tokens, and with --json
# prints every turn as one JSON document (also when the chat ends on an error); `demo` with the
# real model decodes the same greedy continuation with and without the cache; missing or hostile
# model files give one line on stderr and a non-zero exit status, never a crash; a chat turn is
# bounded in bytes (`chat < /dev/zero` ends with the limit).
# Method: run the binary on the shared model files (../shared/models beside the repository) and
# on damaged copies made here; compare stdout with the expected text and parse the stderr stats.
# Usage: run_chat_test.sh <path to kvtier> <shared models directory>
# Exit 77 (skipped) when the shared model files are absent; exit 1 instead when
# KVTIER_REQUIRE_RESOURCES=1 (CI), so a run without the models cannot pass by skipping.
set -u

KVTIER="$1"
MODELS="$2"
BIN="$MODELS/stories260K.bin"
TOK="$MODELS/tok512.bin"
GGUF="$MODELS/stories260K.gguf"
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
require_files "$BIN" "$TOK" "$GGUF"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
EXPECTED="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

# run_ok <name> <args>...: exit 0; stdout in $TMP/out, stderr in $TMP/err.
run_ok() {
  local name="$1"; shift
  local rc=0
  "$KVTIER" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [[ $rc -eq 0 ]] || fail "$name: exit $rc, stderr: $(cat "$TMP/err")"
  return $rc
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

# The number N in "prompt of <P> tokens: N loaded from the cache" of run's stderr.
cached_tokens() { sed -n 's/.*tokens: \([0-9]*\) loaded from the cache.*/\1/p' "$TMP/err" | head -n 1; }

# Greedy decoding from BOS, llama2.c checkpoint and GGUF.
if run_ok greedy_bin run --model "$BIN" --tokenizer "$TOK" --temperature 0 --steps 200; then
  [[ "$(head -c ${#EXPECTED} "$TMP/out")" == "$EXPECTED" ]] ||
    fail "greedy_bin: stdout does not start with the expected text: $(head -c 300 "$TMP/out")"
  grep -q "generated" "$TMP/err" || fail "greedy_bin: no decode stats on stderr"
fi
if run_ok greedy_gguf run --model "$GGUF" --steps 200; then
  [[ "$(head -c ${#EXPECTED} "$TMP/out")" == "$EXPECTED" ]] ||
    fail "greedy_gguf: stdout does not start with the expected text: $(head -c 300 "$TMP/out")"
fi

# A prompt of several chunks: the first run computes and stores it, a second process loads it
# from the SSD tier and prints the same text.
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside"
if run_ok cache_first run --model "$BIN" --tokenizer "$TOK" --prompt "$PROMPT" --steps 40 \
    --cache-dir "$TMP/cache"; then
  cp "$TMP/out" "$TMP/first.txt"
  [[ "$(cached_tokens)" == "0" ]] || fail "cache_first: expected 0 cached tokens: $(cat "$TMP/err")"
  [[ "$(head -c ${#PROMPT} "$TMP/out")" == "$PROMPT" ]] ||
    fail "cache_first: stdout does not start with the prompt: $(cat "$TMP/out")"
fi
if run_ok cache_second run --model "$BIN" --tokenizer "$TOK" --prompt "$PROMPT" --steps 40 \
    --cache-dir "$TMP/cache"; then
  n="$(cached_tokens)"
  [[ -n "$n" && "$n" -gt 0 ]] || fail "cache_second: no cached tokens: $(cat "$TMP/err")"
  cmp -s "$TMP/out" "$TMP/first.txt" || fail "cache_second: text differs from the first run"
fi
# Another salt shares nothing.
if run_ok cache_salt run --model "$BIN" --tokenizer "$TOK" --prompt "$PROMPT" --steps 4 \
    --cache-dir "$TMP/cache" --salt other; then
  [[ "$(cached_tokens)" == "0" ]] || fail "cache_salt: another salt saw cached tokens"
fi

# Chat: three turns from a pipe; turns 2 and 3 find the earlier turns in the cache.
printf 'Once upon a time, there was a little dog.\n\nThe dog liked to run.\nOne day, it saw a cat.\n' \
  >"$TMP/turns.txt"
rc=0
"$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --steps 30 <"$TMP/turns.txt" >"$TMP/out" \
  2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "chat: exit $rc, stderr: $(cat "$TMP/err")"
else
  [[ $(grep -c '^\[turn ' "$TMP/err") -eq 3 ]] || fail "chat: expected 3 stat lines: $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/out") -eq 3 ]] || fail "chat: expected 3 reply lines: $(cat "$TMP/out")"
  for turn in 2 3; do
    n=$(sed -n "s/^\[turn $turn\] \([0-9]*\) cached.*/\1/p" "$TMP/err")
    [[ -n "$n" && "$n" -gt 0 ]] || fail "chat: turn $turn found nothing cached: $(cat "$TMP/err")"
  done
fi

# Chat beyond a small context: stops with a clear last line and a failing status.
rc=0
"$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --steps 30 --context 48 <"$TMP/turns.txt" \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -eq 0 || $rc -ge 128 ]]; then
  fail "chat_context: exit $rc"
else
  tail -n 1 "$TMP/err" | grep -qF "does not fit" ||
    fail "chat_context: last stderr line lacks 'does not fit': $(cat "$TMP/err")"
fi
expect_fail run_prompt_too_long "the context holds" run --model "$BIN" --tokenizer "$TOK" \
  --context 8 --prompt "$PROMPT"

# A reply of no tokens (greedy, the model's first token after turn 4 is a line break) says why
# on its line instead of printing an empty one.
printf 'Once upon a time, there was a little dog.\nThe end.\n.\nLily said, "Bye!"\n' \
  >"$TMP/empty_reply.txt"
rc=0
"$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --temp 0 -n 8 <"$TMP/empty_reply.txt" \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "chat_empty_reply: exit $rc, stderr: $(cat "$TMP/err")"
else
  [[ $(wc -l <"$TMP/out") -eq 4 ]] || fail "chat_empty_reply: expected 4 lines: $(cat "$TMP/out")"
  grep -q '^$' "$TMP/out" && fail "chat_empty_reply: an empty reply line: $(cat "$TMP/out")"
  sed -n 4p "$TMP/out" | grep -qF "(no tokens: the model's first token was a line break" ||
    fail "chat_empty_reply: line 4 does not say why: $(cat "$TMP/out")"
fi

# chat --json: one JSON document on stdout with every turn (the empty reply and its reason), no
# per-turn lines; a chat that ends on an error still prints it, with "error" set, and exits 1.
# check_chat_json <file> <turns> <error needle or "">
check_chat_json() {
  python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
turns, needle = int(sys.argv[2]), sys.argv[3]
for k in ("turns", "context_tokens", "persistent", "cache_error", "error"):
    assert k in d, k
assert len(d["turns"]) == turns, d["turns"]
for t in d["turns"]:
    for k in ("turn", "user", "reply", "reply_tokens", "stop", "prompt_tokens", "cached_tokens",
              "computed_tokens", "cached_chunks_per_tier", "fell_back", "prefill_ms",
              "decode_ms", "stored_chunks", "context_used_tokens"):
        assert k in t, k
assert (needle in d["error"]) if needle else d["error"] == "", d["error"]
PY
}
rc=0
"$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --temp 0 -n 8 --json <"$TMP/empty_reply.txt" \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "chat_json: exit $rc, stderr: $(cat "$TMP/err")"
check_chat_json "$TMP/out" 4 "" || fail "chat_json: $(cat "$TMP/out")"
python3 -c 'import json,sys; t=json.load(sys.stdin)["turns"]
assert t[3]["reply_tokens"] == 0 and t[3]["stop"] == "end_of_line", t[3]
assert t[1]["cached_tokens"] > 0, t[1]' <"$TMP/out" || fail "chat_json: turns: $(cat "$TMP/out")"
grep -q '^\[turn ' "$TMP/err" && fail "chat_json: per-turn lines on stderr: $(cat "$TMP/err")"
rc=0
"$KVTIER" chat --model "$BIN" --tokenizer "$TOK" --steps 30 --context 48 --json \
  <"$TMP/turns.txt" >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "chat_json_context: exit $rc (want 1)"
check_chat_json "$TMP/out" 1 "does not fit" || fail "chat_json_context: $(cat "$TMP/out")"

# The demo with the real model: the greedy continuation of turn 2 is the same with and without
# the cache.
if run_ok demo_real demo --model "$BIN" --tokenizer "$TOK"; then
  grep -qF "the 32 greedy tokens are identical" "$TMP/out" ||
    fail "demo_real: no continuation check in stdout: $(cat "$TMP/out")"
  grep -qF "demo passed" "$TMP/out" || fail "demo_real: stdout lacks 'demo passed'"
fi

# Missing and hostile model files.
expect_fail missing_model "no-such-model.bin" run --model "$TMP/no-such-model.bin" \
  --tokenizer "$TOK" --prompt hi
: >"$TMP/empty.bin"
expect_fail empty_model "kvtier run:" run --model "$TMP/empty.bin" --tokenizer "$TOK"
head -c 100000 "$BIN" >"$TMP/truncated.bin"
expect_fail truncated_model "kvtier run:" run --model "$TMP/truncated.bin" --tokenizer "$TOK"
{ cat "$BIN"; printf 'trailing'; } >"$TMP/trailing.bin"
expect_fail trailing_model "kvtier run:" run --model "$TMP/trailing.bin" --tokenizer "$TOK"
# A header claiming a huge model: dim 2^30 (bytes 00 00 00 40), the rest of the real header.
{ printf '\x00\x00\x00\x40'; tail -c +5 "$BIN" | head -c 24; } >"$TMP/huge.bin"
expect_fail huge_header "kvtier run:" run --model "$TMP/huge.bin" --tokenizer "$TOK"
head -c 4096 /dev/urandom >"$TMP/random.bin"
expect_fail random_model "kvtier run:" run --model "$TMP/random.bin" --tokenizer "$TOK"
{ printf 'GGUF\x03\x00\x00\x00'; head -c 64 /dev/urandom; } >"$TMP/bad.gguf"
expect_fail bad_gguf "kvtier run:" run --model "$TMP/bad.gguf"
expect_fail no_tokenizer "--tokenizer" run --model "$BIN"
head -c 3000 "$TOK" >"$TMP/tok-truncated.bin"
expect_fail truncated_tokenizer "kvtier run:" run --model "$BIN" --tokenizer "$TMP/tok-truncated.bin"
expect_fail chat_missing_model "no-such-model.bin" chat --model "$TMP/no-such-model.bin"
expect_fail bad_top_p "top_p" run --model "$BIN" --tokenizer "$TOK" --temperature 1 --top-p 0
expect_fail gguf_with_tokenizer "carries its own tokenizer" run -m "$GGUF" --tokenizer "$TOK"
expect_fail prompt_and_file "not both" run -m "$GGUF" -p x -f "$TMP/random.bin"
expect_fail missing_prompt_file "no-such-prompt" run -m "$GGUF" -f "$TMP/no-such-prompt"

# --json: one object on stdout with the text and the statistics; a second run with the same
# prompt under --cache-dir reports its chunks loaded from the SSD tier, and what each tier holds.
rm -rf "$TMP/json-cache"
"$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 8 --cache-dir "$TMP/json-cache" >/dev/null 2>&1
"$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 8 --cache-dir "$TMP/json-cache" --json \
  >"$TMP/run.json" 2>"$TMP/err" || fail "run --json: exit $?: $(cat "$TMP/err")"
python3 - "$TMP/run.json" "$EXPECTED" <<'PY' || fail "run --json: $(cat "$TMP/run.json")"
import json, sys
j = json.load(open(sys.argv[1]))
for key in ("text", "prompt_tokens", "cached_tokens", "computed_tokens", "cached_chunks_per_tier",
            "ttft_ms", "generated_tokens", "tokens_per_s", "stop", "stored_chunks", "persistent"):
    assert key in j, key
assert j["text"].startswith(sys.argv[2]), j["text"]
assert j["cached_tokens"] > 0 and j["cached_chunks_per_tier"].get("ssd", 0) > 0, j
assert j["persistent"] is True and j["stop"] in ("max_tokens", "end_of_text"), j
# What each tier holds after the run: the SSD has the prompt's blocks (chunks x layers).
tiers = j["tiers"]
assert list(tiers)[:1] == ["host"] and "ssd" in tiers, tiers
for t in tiers.values():
    assert set(t) == {"blocks", "used_bytes", "evictions", "writebacks", "write_failures"}, t
assert tiers["ssd"]["blocks"] > 0 and tiers["ssd"]["used_bytes"] > 0, tiers
assert tiers["ssd"]["write_failures"] == 0, tiers
PY
grep -q '^kvtier run: cache tiers: host [0-9]* blocks (.* MiB), [0-9]* evicted; ssd [1-9]' \
  <("$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 2 --cache-dir "$TMP/json-cache" 2>&1 >/dev/null) ||
  fail "run: no line on what the tiers hold"
# --repeat: the prompt prefilled again in the same process loads every full chunk from host
# memory (no --cache-dir: no SSD tier), computes only the tail, and the text is unchanged.
"$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 8 --repeat 3 --json >"$TMP/repeat.json" 2>"$TMP/err" ||
  fail "run --repeat: exit $?: $(cat "$TMP/err")"
python3 - "$TMP/repeat.json" "$EXPECTED" <<'PY' || fail "run --repeat: $(cat "$TMP/repeat.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["text"].startswith(sys.argv[2]), j["text"]
assert j["cached_tokens"] == 0, j  # The first prefill finds an empty cache.
reps = j["repeats"]
assert len(reps) == 2, reps
for r in reps:
    assert r["prompt_tokens"] == j["prompt_tokens"], r
    assert r["cached_tokens"] > 0 and r["cached_tokens"] % 16 == 0, r
    # A prompt of whole chunks still runs its last token (for its logits).
    assert r["prompt_tokens"] <= r["cached_tokens"] + r["computed_tokens"] <= r["prompt_tokens"] + 1, r
    assert 1 <= r["computed_tokens"] <= 16, r
    assert r["cached_chunks_per_tier"] == {"host": r["cached_tokens"] // 16}, r
    assert r["ttft_ms"] > 0 and not r["fell_back"], r
PY
grep -q '^kvtier run: repeat 2: prompt of [0-9]* tokens: [1-9][0-9]* loaded from the cache (chunks: [0-9]* host)' \
  <("$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 2 --repeat 2 2>&1 >/dev/null) ||
  fail "run --repeat: no line for the repeat"
expect_fail repeat_zero "--repeat" run -m "$GGUF" -p x --repeat 0
# --metrics-file: the cache's counters in the Prometheus text format, written at exit.
"$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 4 --metrics-file "$TMP/metrics.prom" >/dev/null 2>&1 ||
  fail "run --metrics-file: exit $?"
grep -q '^# TYPE kvtier_tier_hits_total counter$' "$TMP/metrics.prom" &&
  grep -q '^kvtier_tier_blocks{tier="host",name="host"} [1-9]' "$TMP/metrics.prom" ||
  fail "run --metrics-file: $(head -c 400 "$TMP/metrics.prom" 2>&1)"
echo "A dog." | "$KVTIER" chat -m "$GGUF" -n 4 --metrics-file "$TMP/chat.prom" >/dev/null 2>&1 ||
  fail "chat --metrics-file: exit $?"
grep -q '^kvtier_lookups_total [1-9]' "$TMP/chat.prom" || fail "chat --metrics-file: no lookups"

# Cache settings as flags and KVTIER_* variables: codec, sizes; --redis shares the prompt's chunks
# with a process that has no SSD tier.
rm -rf "$TMP/codec-cache"
KVTIER_CODEC=shuffle-zstd "$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 4 --cache-dir "$TMP/codec-cache" \
  --ssd-bytes 64m --host-bytes 32MiB >/dev/null 2>&1 || fail "run --codec/--ssd-bytes: exit $?"
KVTIER_CACHE_DIR="$TMP/codec-cache" "$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 4 --json \
  >"$TMP/codec.json" 2>"$TMP/err" || fail "run KVTIER_CACHE_DIR: exit $?: $(cat "$TMP/err")"
grep -q '"ssd": [1-9]' "$TMP/codec.json" || fail "KVTIER_CACHE_DIR: no SSD chunks: $(cat "$TMP/codec.json")"
# A TOML config file ([run] table, keys named as the long flags), also through KVTIER_CONFIG.
printf '[run]\ncache-dir = "%s"\nmax-tokens = 3\n' "$TMP/toml-cache" >"$TMP/kvtier.toml"
"$KVTIER" --config "$TMP/kvtier.toml" run -m "$GGUF" -p "$EXPECTED" >/dev/null 2>&1 ||
  fail "--config: exit $?"
KVTIER_CONFIG="$TMP/kvtier.toml" "$KVTIER" run -m "$GGUF" -p "$EXPECTED" --json >"$TMP/toml.json" \
  2>"$TMP/err" || fail "KVTIER_CONFIG: exit $?: $(cat "$TMP/err")"
grep -q '"generated_tokens": 3' "$TMP/toml.json" && grep -q '"ssd": [1-9]' "$TMP/toml.json" ||
  fail "config file not applied: $(cat "$TMP/toml.json")"
expect_fail host_bytes_small "less than twice the KV" run -m "$GGUF" -p x --host-bytes 1k
expect_fail redis_without_key "--remote-key-file" run -m "$GGUF" -p x --redis 127.0.0.1:1
expect_fail redis_empty_item "empty item in the endpoint list" run -m "$GGUF" -p x \
  --redis "127.0.0.1:1,,127.0.0.1:2" --remote-insecure-plaintext
if command -v redis-server >/dev/null; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    >/dev/null 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  python3 -c 'import secrets; print("1 " + secrets.token_hex(32))' >"$TMP/remote.keys"
  chmod 600 "$TMP/remote.keys"
  "$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 4 --redis "127.0.0.1:$port" \
    --remote-key-file "$TMP/remote.keys" >/dev/null 2>&1 || fail "run --redis (store): exit $?"
  "$KVTIER" run -m "$GGUF" -p "$EXPECTED" -n 4 --redis "127.0.0.1:$port" \
    --remote-key-file "$TMP/remote.keys" --json >"$TMP/redis.json" 2>"$TMP/err" ||
    fail "run --redis (load): exit $?: $(cat "$TMP/err")"
  grep -q '"remote": [1-9]' "$TMP/redis.json" || fail "run --redis: no remote chunks: $(cat "$TMP/redis.json")"
  kill "$redis_pid"; wait "$redis_pid" 2>/dev/null
elif [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
  fail "redis-server is missing; KVTIER_REQUIRE_RESOURCES=1 makes a missing resource fail"
fi

# The context limit is said, not silent; without --cache-dir the stored chunks are said to vanish.
"$KVTIER" run -m "$BIN" --tokenizer "$TOK" -n 500 -c 64 >/dev/null 2>"$TMP/err" || true
grep -q "stopped at the context limit" "$TMP/err" || fail "context limit not said: $(cat "$TMP/err")"
grep -q "in memory only" "$TMP/err" || fail "memory-only chunks not said: $(cat "$TMP/err")"

# llama.cpp's short flags and prompt sources: -p, -f FILE, -p - (stdin), -n/--max-tokens, -s -1.
short=$("$KVTIER" run -m "$BIN" --tokenizer "$TOK" -p "Once upon a time" -n 20 2>/dev/null)
[[ "$short" == "Once upon a time, there was a little girl named Lily"* ]] || fail "short flags: got '$short'"
printf 'Once upon a time' >"$TMP/prompt.txt"
from_file=$("$KVTIER" run -m "$BIN" --tokenizer "$TOK" -f "$TMP/prompt.txt" --max-tokens 20 \
  2>/dev/null)
[[ "$from_file" == "$short" ]] || fail "--prompt-file: got '$from_file', want '$short'"
from_stdin=$(printf 'Once upon a time' | "$KVTIER" run -m "$BIN" --tokenizer "$TOK" -p - -n 20 \
  2>/dev/null)
[[ "$from_stdin" == "$short" ]] || fail "--prompt -: got '$from_stdin', want '$short'"
seeded=0
for _ in 1 2 3; do
  a=$("$KVTIER" run -m "$BIN" --tokenizer "$TOK" -p "Once" -n 30 --temp 1 -s -1 2>/dev/null)
  b=$("$KVTIER" run -m "$BIN" --tokenizer "$TOK" -p "Once" -n 30 --temp 1 -s -1 2>/dev/null)
  [[ "$a" != "$b" ]] && seeded=1
done
[[ $seeded -eq 1 ]] || fail "--seed -1: three pairs of sampled runs were identical (not random)"

# A turn is bounded in bytes, NULs included: `chat < /dev/zero` was read forever (fgets cannot
# measure a line of NULs); now one line says the limit, under a time and memory limit.
rc=0
(ulimit -v 1048576; timeout 30 "$KVTIER" chat -m "$GGUF" </dev/zero >/dev/null 2>"$TMP/err") ||
  rc=$?
[[ $rc -eq 1 ]] || fail "chat < /dev/zero: exit $rc (124: hung), stderr: $(cat "$TMP/err")"
grep -q "a turn is longer than 65536 bytes" "$TMP/err" ||
  fail "chat < /dev/zero: stderr lacks the limit: $(cat "$TMP/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures run/chat check(s) failed" >&2
  exit 1
fi
echo "run/chat tests passed"
