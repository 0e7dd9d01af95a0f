#!/usr/bin/env bash
# Goal: a `--json` result is never lost to bytes that are not UTF-8 (README.md, "JSON output"):
#   - `run --prompt-file P --json` with a byte 0xff in P prints one JSON document (it ended with
#     nlohmann's type_error.316 and printed nothing): "text" holds U+FFFD for the byte, and
#     "text_hex" the exact bytes, 0xff included;
#   - runs sampled at --temperature 5 --top-p 1, where the model emits single bytes of multi-byte
#     characters, print valid JSON for every seed, with "text_hex" exactly when "text" had to be
#     repaired;
#   - `chat --json` with 0xff in a user line: "user_hex";
#   - every JSON document of the CLI is printed through JsonText (json_output.h), the one place
#     that sets the replacement: no other dump() call in tools/cli.
# Method: the shared stories260K GGUF model (../shared/models beside the repository); Python's
# json module parses stdout as strict UTF-8 bytes. Exit 77 (skipped) without the model, 1 when
# KVTIER_REQUIRE_RESOURCES=1. The dump() check runs in any case.
# Usage: json_utf8_test.sh <path to kvtier> <shared models directory> <repository root>
set -u

KVTIER="$1"
MODELS="$2"
ROOT="$3"
GGUF="$MODELS/stories260K.gguf"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"

# Every dump() of the CLI goes through JsonText, which replaces invalid UTF-8 instead of throwing.
bare="$(grep -n '\.dump(' "$ROOT"/tools/cli/*.cc "$ROOT"/tools/cli/*.h | grep -v 'json_output.h')"
[[ -z "$bare" ]] || fail "dump() outside JsonText (json_output.h): $bare"

require_files "$GGUF"

# check_json <file> <field>: stdout parses as strict UTF-8 JSON; prints "hex" when <field>_hex is
# present (and then checks that its bytes are not UTF-8 and that <field> has U+FFFD), else "utf8".
check_json() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
raw = open(sys.argv[1], "rb").read()
doc = json.loads(raw.decode("utf-8"))  # Strict: invalid UTF-8 raises.
turn = doc["turns"][0] if "turns" in doc else doc
field = sys.argv[2]
text = turn[field]
if field + "_hex" not in turn:
    print("utf8")
    sys.exit(0)
exact = bytes.fromhex(turn[field + "_hex"])
try:
    exact.decode("utf-8")
    sys.exit("the _hex bytes are valid UTF-8: no _hex field was due")
except UnicodeDecodeError:
    pass
assert "\ufffd" in text, "no U+FFFD in " + repr(text)
print("hex")
EOF
}

# A prompt file with a byte 0xff: deterministic.
printf 'Once upon a time \xff there was' >"$TMP/ff.txt"
run run -m "$GGUF" --prompt-file "$TMP/ff.txt" --temperature 0 --steps 8 --json
if [[ $rc -ne 0 ]]; then
  fail "prompt_ff: exit $rc, stderr: $(cat "$TMP/err")"
else
  kind="$(check_json "$TMP/out" text)" || fail "prompt_ff: $(head -c 400 "$TMP/out")"
  [[ "$kind" == hex ]] || fail "prompt_ff: no text_hex: $(head -c 400 "$TMP/out")"
  python3 - "$TMP/out" <<'EOF' || fail "prompt_ff: text_hex does not hold the prompt's bytes"
import json, sys
doc = json.load(open(sys.argv[1], "rb"))
exact = bytes.fromhex(doc["text_hex"])
assert b"\xff there was" in exact, exact
# The repaired text is the exact bytes with that one byte replaced.
assert doc["text"] == exact.decode("utf-8", errors="replace"), (doc["text"], exact)
EOF
fi

# Sampled runs: every seed prints valid JSON; some emit partial characters (32 of 40 did, and
# each lost its result).
repaired=0
for seed in $(seq 1 40); do
  run run -m "$GGUF" -p "Once upon a time" --temperature 5 --top-p 1 --steps 32 --seed "$seed" \
    --json
  if [[ $rc -ne 0 ]]; then
    fail "seed $seed: exit $rc, stderr: $(cat "$TMP/err")"
    continue
  fi
  if ! kind="$(check_json "$TMP/out" text)"; then
    fail "seed $seed: $(head -c 400 "$TMP/out")"
    continue
  fi
  [[ "$kind" == hex ]] && repaired=$((repaired + 1))
done
echo "sampled runs: $repaired of 40 emitted bytes that are not UTF-8 (text_hex present)"
# At temperature 5 about a quarter of the vocabulary is bytes 0x80-0xff: 40 runs without a single
# one would mean the path under test was not exercised.
[[ $repaired -ge 1 ]] || fail "sampled runs: none emitted invalid UTF-8; the check proved nothing"

# chat: the user's line with 0xff.
printf 'Once upon a time \xff there was\n' >"$TMP/chat.txt"
rc=0
timeout 120 "$KVTIER" chat -m "$GGUF" --temperature 0 --steps 4 --json <"$TMP/chat.txt" \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "chat_ff: exit $rc, stderr: $(cat "$TMP/err")"
else
  kind="$(check_json "$TMP/out" user)" || fail "chat_ff: $(head -c 400 "$TMP/out")"
  [[ "$kind" == hex ]] || fail "chat_ff: no user_hex: $(head -c 400 "$TMP/out")"
fi

finish "JSON UTF-8"
