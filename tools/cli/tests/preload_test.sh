#!/usr/bin/env bash
# Goal: `kvtier preload` warms a cache directory so that a later `kvtier run` with the same model
# finds every full chunk of its prompt on the SSD; a second preload stores nothing new; a preload
# of a trace after one of its first half stores only the rest; Ctrl-C (SIGINT) stops it with exit
# 130, keeps what it stored, and the same command then finishes the rest; `kvtier stats` counts
# the preloaded blocks; a missing model, an empty document, a trace line that is not JSON, a
# prompt longer than the context and a cache directory another process holds are one-line
# errors, and a command line without exactly one input or without --cache-dir exits 2.
# Method: run the binary on the shared stories260K model (../shared/models beside the repository)
# with documents and traces written here; read the --json outputs of preload, run and stats with
# python3; send SIGINT to a preload of a long trace as soon as it says it started.
# Usage: preload_test.sh <path to kvtier> <shared models directory>
# Exit 77 (skipped) when the shared model files are absent; exit 1 instead when
# KVTIER_REQUIRE_RESOURCES=1 (CI), so a run without the models cannot pass by skipping.
set -u

KVTIER="$1"
MODELS="$2"
GGUF="$MODELS/stories260K.gguf"
BIN="$MODELS/stories260K.bin"
TOK="$MODELS/tok512.bin"
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
require_files "$GGUF" "$BIN" "$TOK"
# The cache settings come from the command lines below only.
unset KVTIER_CONFIG KVTIER_CACHE_DIR KVTIER_SALT KVTIER_CODEC KVTIER_HOST_BYTES KVTIER_SSD_BYTES
TMP="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

# field <json file> <key>: one value of a JSON object.
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# A document of several chunks (under the GGUF model's 128-token context).
DOC="$TMP/doc.txt"
printf '%s' "Once upon a time, there was a little girl named Lily. She loved to play outside in \
the park. One day, she saw a big red ball under a tree. She ran to the ball and kicked it high \
into the sky. Her friend Tom came to play with her, and they laughed all day long." >"$DOC"

# 1. Preload the document, then run on it: every full chunk of the prompt comes from the SSD.
run preload -m "$GGUF" --cache-dir "$TMP/c1" --document "$DOC" --json
if [[ $rc -ne 0 ]]; then
  fail "preload document: exit $rc: $(cat "$TMP/err")"
else
  cp "$TMP/out" "$TMP/p1.json"
  python3 - "$TMP/p1.json" <<'PY' || fail "preload document --json: $(cat "$TMP/p1.json")"
import json, sys
j = json.load(open(sys.argv[1]))
keys = ["prompts", "prompts_done", "tokens", "tokens_done", "computed_tokens", "block_tokens",
        "chunks", "chunks_stored", "chunks_present", "bytes_written", "seconds",
        "compute_seconds", "store_seconds", "flush_seconds", "computed_tokens_per_s",
        "interrupted", "cache_dir"]
assert list(j) == keys, list(j)
assert j["prompts"] == j["prompts_done"] == 1 and j["tokens"] == j["tokens_done"] > 32, j
assert j["chunks"] == j["tokens"] // 16 and j["chunks_stored"] == j["chunks"], j
assert j["chunks_present"] == 0 and j["interrupted"] is False and j["bytes_written"] > 0, j
assert j["computed_tokens"] == j["chunks"] * 16, j
assert 0 < j["compute_seconds"] and 0 < j["store_seconds"], j
PY
fi
chunks=$(field "$TMP/p1.json" chunks 2>/dev/null || echo 0)
run run -m "$GGUF" -f "$DOC" -n 4 --cache-dir "$TMP/c1" --json
if [[ $rc -ne 0 ]]; then
  fail "run after preload: exit $rc: $(cat "$TMP/err")"
else
  python3 - "$TMP/out" "$chunks" <<'PY' || fail "run after preload: $(cat "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
chunks = int(sys.argv[2])
assert chunks > 0 and j["cached_tokens"] == chunks * 16, (chunks, j)
assert j["cached_chunks_per_tier"] == {"ssd": chunks}, j
PY
fi

# 2. A second preload finds every chunk and stores nothing.
run preload -m "$GGUF" --cache-dir "$TMP/c1" --document "$DOC" --json
python3 - "$TMP/out" "$chunks" <<'PY' || fail "second preload: exit $rc: $(cat "$TMP/out" "$TMP/err")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["chunks_stored"] == 0 and j["chunks_present"] == int(sys.argv[2]) > 0, j
assert j["computed_tokens"] == 0 and j["bytes_written"] == 0, j
PY
# The text summary, with the llama2.c checkpoint and its tokenizer, the document from stdin; run
# with the same model finds it.
rc=0
"$KVTIER" preload -m "$BIN" --tokenizer "$TOK" --cache-dir "$TMP/c0" --document - <"$DOC" \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] && grep -qF "preload: 1 of 1 prompts" "$TMP/out" &&
  grep -qF "chunks stored, 0 already in the cache" "$TMP/out" ||
  fail "preload text summary: exit $rc: $(cat "$TMP/out" "$TMP/err")"
run run -m "$BIN" --tokenizer "$TOK" -f "$DOC" -n 2 --cache-dir "$TMP/c0" --json
[[ $rc -eq 0 && "$(field "$TMP/out" cached_tokens)" == $((chunks * 16)) ]] ||
  fail "run on the llama2.c checkpoint after preload: $(cat "$TMP/out" "$TMP/err")"

# stats counts the preloaded blocks: chunks x layers, one layout.
run stats "$TMP/c1" --json
python3 - "$TMP/out" "$chunks" <<'PY' || fail "stats after preload: exit $rc: $(cat "$TMP/out" "$TMP/err")"
import json, sys
j = json.load(open(sys.argv[1]))
chunks = int(sys.argv[2])
assert len(j["layouts"]) == 1, j["layouts"]
l = j["layouts"][0]
assert l["chunks"] == chunks == j["chunks"] and l["layers"] == 5, l
assert j["blocks"] == l["blocks"] == chunks * l["layers"], j
assert l["codecs"] == {"identity": j["blocks"]}, l
PY

# 3. A trace: its first half, then the whole; the second run stores only the second half. Each
# prompt starts with its own number, so no two share a chunk.
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
story = ("Once upon a time, there was a little dog named Max. Max liked to run in the green "
         "park with his friend, a small cat. One day they found a big box.")
lines = [json.dumps({"prompt": f"{i} {story}", "id": i}) for i in range(400)]
open(f"{tmp}/half.jsonl", "w").write("\n".join(lines[:10]) + "\n")
open(f"{tmp}/trace.jsonl", "w").write("\n".join(lines[:20]) + "\n")
open(f"{tmp}/long.jsonl", "w").write("\n".join(lines) + "\n")
open(f"{tmp}/plain.txt", "w").write("\n".join(f"{i} {story}" for i in range(3)) + "\n")
PY
run preload -m "$GGUF" --cache-dir "$TMP/c2" --trace "$TMP/half.jsonl" --json
cp "$TMP/out" "$TMP/half.json"
[[ $rc -eq 0 ]] || fail "preload half trace: exit $rc: $(cat "$TMP/err")"
run preload -m "$GGUF" --cache-dir "$TMP/c2" --trace "$TMP/trace.jsonl" --json
[[ $rc -eq 0 ]] || fail "preload whole trace: exit $rc: $(cat "$TMP/err")"
python3 - "$TMP/half.json" "$TMP/out" <<'PY' || fail "trace resume: $(cat "$TMP/half.json" "$TMP/out")"
import json, sys
h = json.load(open(sys.argv[1]))
w = json.load(open(sys.argv[2]))
assert h["prompts"] == 10 and w["prompts"] == 20, (h, w)
assert h["chunks_stored"] == h["chunks"] > 0 and h["chunks_present"] == 0, h
assert w["chunks_present"] == h["chunks"], (h, w)
assert w["chunks_stored"] == w["chunks"] - h["chunks"] > 0, (h, w)
PY

# A plain-text trace (one prompt per line); run finds a line's chunks.
run preload -m "$GGUF" --cache-dir "$TMP/c2" --trace "$TMP/plain.txt" --json
[[ $rc -eq 0 && "$(field "$TMP/out" prompts)" == 3 ]] || fail "plain trace: $(cat "$TMP/out" "$TMP/err")"
line2=$(sed -n 2p "$TMP/plain.txt")
run run -m "$GGUF" -p "$line2" -n 2 --cache-dir "$TMP/c2" --json
python3 - "$TMP/out" <<'PY' || fail "run on a plain trace line: $(cat "$TMP/out" "$TMP/err")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["cached_tokens"] == j["prompt_tokens"] // 16 * 16 > 0, j
PY

# 4. Ctrl-C: SIGINT to a preload of a long trace once it has started; exit 130, the message, and
# what it stored is found by the next run, which stores only the rest. A preload that finished
# before the signal came is tried again on a fresh cache (a few times).
interrupted=0
for attempt in 1 2 3 4 5; do
  rm -rf "$TMP/c3"
  : >"$TMP/int.err"
  "$KVTIER" preload -m "$GGUF" --cache-dir "$TMP/c3" --trace "$TMP/long.jsonl" --json \
    >"$TMP/int.json" 2>"$TMP/int.err" </dev/null &
  pid=$!
  for _ in $(seq 3000); do
    grep -qF "kvtier preload: 400 prompts" "$TMP/int.err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  kill -INT "$pid" 2>/dev/null
  rc=0
  wait "$pid" || rc=$?
  if [[ $rc -eq 130 ]]; then
    interrupted=1
    break
  fi
  [[ $rc -eq 0 ]] || { fail "interrupt: exit $rc: $(cat "$TMP/int.err")"; break; }
done
if [[ $interrupted -ne 1 ]]; then
  fail "interrupt: every preload finished before SIGINT reached it"
else
  grep -qF "kvtier preload: interrupted; stopped after" "$TMP/int.err" ||
    fail "interrupt: no message: $(cat "$TMP/int.err")"
  run preload -m "$GGUF" --cache-dir "$TMP/c3" --trace "$TMP/long.jsonl" --json
  [[ $rc -eq 0 ]] || fail "resume: exit $rc: $(cat "$TMP/err")"
  python3 - "$TMP/int.json" "$TMP/out" <<'PY' || fail "resume: $(cat "$TMP/int.json" "$TMP/out")"
import json, sys
i = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert i["interrupted"] is True and r["interrupted"] is False, (i, r)
assert 0 < i["chunks_stored"] < i["chunks"] and 0 < i["prompts_done"] < i["prompts"], i
assert r["chunks_present"] == i["chunks_stored"], (i, r)
assert r["chunks_stored"] == r["chunks"] - i["chunks_stored"], (i, r)
PY
fi

# 5. Errors.
expect_fail missing_model 1 "no-such-model.gguf" preload -m "$TMP/no-such-model.gguf" \
  --cache-dir "$TMP/c4" --document "$DOC"
printf ' \n\n' >"$TMP/blank.txt"
expect_fail empty_document 1 "the document is empty" preload -m "$GGUF" --cache-dir "$TMP/c4" \
  --document "$TMP/blank.txt"
printf '{"prompt": "Once upon a time"}\n\n{"prompt": "A dog"\n' >"$TMP/bad.jsonl"
expect_fail bad_json_line 1 "--trace $TMP/bad.jsonl line 3: not valid JSON" preload -m "$GGUF" \
  --cache-dir "$TMP/c4" --trace "$TMP/bad.jsonl"
expect_fail too_long 1 "the document has" preload -m "$GGUF" --cache-dir "$TMP/c4" \
  --document "$DOC" --context 32
grep -qF "the context holds 32" "$TMP/err" || fail "too_long: $(cat "$TMP/err")"
expect_fail no_input 2 "kvtier:" preload -m "$GGUF" --cache-dir "$TMP/c4"
expect_fail two_inputs 2 "kvtier:" preload -m "$GGUF" --cache-dir "$TMP/c4" --document "$DOC" \
  --trace "$TMP/plain.txt"
expect_fail no_cache_dir 2 "--cache-dir" preload -m "$GGUF" --document "$DOC"
exec {lockfd}<"$TMP/c1/LOCK"
flock -x "$lockfd"
expect_fail in_use 1 "$TMP/c1 is in use by another process" preload -m "$GGUF" \
  --cache-dir "$TMP/c1" --document "$DOC"
exec {lockfd}<&-

finish preload
