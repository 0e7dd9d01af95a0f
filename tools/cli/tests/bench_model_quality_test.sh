#!/usr/bin/env bash
# Goal: `kvtier bench quality` judges codecs by the model's predictions: one JSON row per codec
# with exactly the keys codec, model, windows, rows, ratio, kl_mean, kl_max, top1_agreement,
# top1_flips, near_ties, top1_flips_beyond_near_ties, flip_gap_max (consistent with the flips and
# the 0.01-logit near-tie line), perplexity_exact, perplexity, perplexity_change, meets_99_9 (the
# rotated and mixed-width codecs included); the lossless codecs (identity,
# shuffle-zstd) give bit-identical predictions (KL 0, agreement 1, no perplexity change, the
# target met); the lossy ones a KL above 0 and an agreement in (0, 1], int4 compressing more than
# int8; rows = windows x --continue-tokens; the text table names every codec; bad input (an
# unknown codec, a prefix that is not whole blocks, a window longer than the model's context, a
# text that is not a regular file or too short, no model) gets one clear line and a non-zero exit;
# --per-layer adds a row codec/L per layer (its KL below the whole codec's) and
# --ladder-finer-layers keeps a layer one rung finer (a lower ratio); a bad layer list is refused;
# --windows-json writes the windows' token ids (and refuses a path that is not a file).
# Method: the shared stories260K checkpoint with small windows (2 windows of 128 + 32 tokens);
# the JSON is parsed with python3. The model-less run uses a copy of the binary in a temporary
# directory, away from any shared/models.
# Usage: bench_model_quality_test.sh <path to kvtier> <shared models directory>
# The checks that need the model are skipped (with a line) when it is absent, unless
# KVTIER_REQUIRE_RESOURCES=1 (CI), which makes that a failure.
set -u
KVTIER="$1"
MODELS="$2"
BIN="$MODELS/stories260K.bin"
TOK="$MODELS/tok512.bin"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
SMALL=(--prefix-tokens 128 --continue-tokens 32 --windows-max 2)

# expect_fail <what> <text the error must contain> <args...>
expect_fail() {
  local what="$1" text="$2"; shift 2
  local rc=0
  "$KVTIER" bench quality "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -ne 0 ]] || fail "$what: exit 0"
  grep -qF -- "$text" "$TMP/err" || fail "$what: no '$text' in: $(cat "$TMP/err")"
  [[ $(wc -l <"$TMP/err") -le 2 ]] || fail "$what: more than a line or two: $(cat "$TMP/err")"
}

if [[ -f "$BIN" && -f "$TOK" ]]; then
  M=(--model "$BIN" --tokenizer "$TOK")
  rc=0
  "$KVTIER" bench quality "${M[@]}" "${SMALL[@]}" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "bench quality: exit $rc: $(cat "$TMP/err")"
  else
    python3 - "$TMP/out" <<'PY' || fail "bench quality --json: see above"
import json, sys
rows = json.load(open(sys.argv[1]))
keys = ["codec", "model", "windows", "rows", "ratio", "kl_mean", "kl_max", "top1_agreement",
        "top1_flips", "near_ties", "top1_flips_beyond_near_ties", "flip_gap_max",
        "perplexity_exact", "perplexity", "perplexity_change", "meets_99_9"]
want = ["identity", "shuffle-zstd", "int8", "int8+zstd", "int4", "int4+zstd", "int8-rot",
        "int4-rot", "k8v4", "k8v4-rot", "ecq5", "ecq6", "ecq6v5",
        "ladder-short"]
errors = []
if [r.get("codec") for r in rows] != want:
    errors.append(f"codecs {[r.get('codec') for r in rows]}")
by = {}
for r in rows:
    if list(r) != keys:
        errors.append(f"keys {list(r)}")
        continue
    by[r["codec"]] = r
    if r["windows"] != 2 or r["rows"] != 2 * 32 or r["model"] != "stories260K.bin":
        errors.append(f"{r['codec']}: windows {r['windows']}, rows {r['rows']}, {r['model']}")
    if not r["perplexity_exact"] > 1:
        errors.append(f"{r['codec']}: perplexity_exact {r['perplexity_exact']}")
    if r["top1_flips"] != round((1 - r["top1_agreement"]) * r["rows"]) or \
            not 0 <= r["near_ties"] <= r["rows"]:
        errors.append(f"{r['codec']}: flips {r['top1_flips']}, near ties {r['near_ties']}")
    # A flip beyond the near ties has an exact gap of at least 0.01 logits; none: gap max 0.
    beyond, gap = r["top1_flips_beyond_near_ties"], r["flip_gap_max"]
    if not (0 <= beyond <= r["top1_flips"] and gap >= 0 and (r["top1_flips"] > 0 or gap == 0)
            and (beyond == 0 or gap >= 0.01) and (beyond > 0 or gap < 0.01)):
        errors.append(f"{r['codec']}: flips beyond near ties {beyond}, flip gap max {gap}")
    if r["codec"] in ("identity", "shuffle-zstd"):
        if (r["kl_mean"], r["kl_max"], r["top1_agreement"], r["perplexity_change"],
                r["meets_99_9"]) != (0, 0, 1, 0, True):
            errors.append(f"{r['codec']}: lossless but {r}")
        if r["perplexity"] != r["perplexity_exact"]:
            errors.append(f"{r['codec']}: perplexity {r['perplexity']} differs")
    elif r["codec"] != "ladder-short":
        if not (r["kl_mean"] > 0 and r["kl_max"] >= r["kl_mean"]):
            errors.append(f"{r['codec']}: KL {r['kl_mean']} / {r['kl_max']}")
        if not (0 < r["top1_agreement"] <= 1) or not r["ratio"] > 1:
            errors.append(f"{r['codec']}: agreement {r['top1_agreement']}, ratio {r['ratio']}")
if len(by) == len(want) and not by["int4"]["ratio"] > by["int8"]["ratio"] > by["shuffle-zstd"]["ratio"]:
    errors.append("ratios not int4 > int8 > shuffle-zstd")
if len(by) == len(want) and not by["int4"]["ratio"] > by["k8v4"]["ratio"] > by["int8"]["ratio"]:
    errors.append("ratios not int4 > k8v4 > int8")
if len(by) == len(want) and not (by["ecq6"]["kl_mean"] < by["ecq5"]["kl_mean"] <
                                 by["int4"]["kl_mean"] and by["ecq5"]["ratio"] > by["k8v4"]["ratio"]):
    errors.append("not KL ecq6 < ecq5 < int4 with ecq5 smaller than k8v4")
if len(by) == len(want) and len({r["near_ties"] for r in rows}) != 1:
    errors.append("near ties differ between codecs (they are the exact KV's)")
if errors:
    print("\n".join(errors))
    sys.exit(1)
PY
  fi
  rc=0
  "$KVTIER" bench quality "${M[@]}" "${SMALL[@]}" --codecs identity,int8,ladder >"$TMP/out" \
    2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || fail "bench quality (text): exit $rc: $(cat "$TMP/err")"
  for c in identity int8 ladder; do
    grep -q "^$c " "$TMP/out" || fail "the table has no $c row: $(cat "$TMP/out")"
  done
  grep -q "64 predictions per codec" "$TMP/out" || fail "no prediction count: $(cat "$TMP/out")"
  # --windows-json: the windows the rows were computed on, BOS first, each prefix + continuation
  # + 1 tokens long (what bench/vllm_quality.py sends to vLLM).
  rc=0
  "$KVTIER" bench quality "${M[@]}" "${SMALL[@]}" --codecs identity --windows-json "$TMP/w.json" \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || fail "bench quality --windows-json: exit $rc: $(cat "$TMP/err")"
  python3 - "$TMP/w.json" <<'PY' || fail "bench quality --windows-json: see above"
import json, sys
w = json.load(open(sys.argv[1]))
assert list(w) == ["prefix_tokens", "continue_tokens", "windows"], list(w)
assert (w["prefix_tokens"], w["continue_tokens"], len(w["windows"])) == (128, 32, 2), w
for seq in w["windows"]:
    assert len(seq) == 128 + 32 + 1 and seq[0] == 1 and all(0 <= t < 512 for t in seq), seq
# The second window starts --stride (64) tokens of the text later.
assert w["windows"][0][65:] == w["windows"][1][1:-64], "windows not 64 tokens apart"
PY
  expect_fail "windows-json into a directory" "--windows-json" "${M[@]}" "${SMALL[@]}" \
    --codecs identity --windows-json "$TMP"
  expect_fail "unknown codec" "--codecs" "${M[@]}" "${SMALL[@]}" --codecs int8,int3
  expect_fail "bad group" "the group after @ is a number" "${M[@]}" "${SMALL[@]}" --codecs int4@x
  expect_fail "bad rung" "ladder: the int8 rung" "${M[@]}" "${SMALL[@]}" --codecs ladder-short \
    --ladder-int8 int4-rot
  rc=0
  # 256-token prefixes (4 blocks): the short ladder keeps the sink and the newest block exact and
  # takes its middle rung (k8v4-rot) for block 2 and its coarsest (int4-rot) for block 1.
  "$KVTIER" bench quality "${M[@]}" --prefix-tokens 256 --continue-tokens 32 --windows-max 2 \
    --codecs int4@16,k8v4-rot+zstd,ladder-short --ladder-int8 k8v4-rot --ladder-int4 int4-rot \
    --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || fail "bench quality (groups, rungs): exit $rc: $(cat "$TMP/err")"
  python3 - "$TMP/out" <<'PY' || fail "bench quality with @group and ladder rungs: see above"
import json, sys
rows = {r["codec"]: r for r in json.load(open(sys.argv[1]))}
# Group 16 has twice int4's scales (ratio 8192 / (48 + 3072) for 64-token blocks of 32 channels).
assert abs(rows["int4@16"]["ratio"] - 8192 / 3120) < 1e-9, rows["int4@16"]["ratio"]
assert rows["k8v4-rot+zstd"]["ratio"] > 2, rows["k8v4-rot+zstd"]
# Per 5 layers: two lossless blocks (shuffle-zstd), one k8v4-rot (8192 / 3632), one int4-rot
# (8192 / 2608): the ratio lies between shuffle-zstd's and k8v4's, and the KL is above 0.
assert 1.2 < rows["ladder-short"]["ratio"] < 8192 / 3632, rows["ladder-short"]
assert rows["ladder-short"]["kl_mean"] > 0, rows["ladder-short"]
PY
  # --per-layer: a row int4/L for each of the 5 layers (with its "layer"), none for a ladder;
  # only that layer's blocks go through int4, so its ratio is int4's and its KL below the whole
  # codec's. ladder-flat (every block but the sink at the coarsest rung) with layer 4 kept one
  # rung finer (ecq6 instead of ecq5) stores more bytes than without.
  rc=0
  "$KVTIER" bench quality "${M[@]}" --prefix-tokens 256 --continue-tokens 32 --windows-max 2 \
    --codecs int4,ladder-flat --ladder-int8 ecq6 --ladder-int4 ecq5 --per-layer \
    --json >"$TMP/per_layer" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || fail "bench quality --per-layer: exit $rc: $(cat "$TMP/err")"
  "$KVTIER" bench quality "${M[@]}" --prefix-tokens 256 --continue-tokens 32 --windows-max 2 \
    --codecs ladder-flat --ladder-int8 ecq6 --ladder-int4 ecq5 --ladder-finer-layers 4 \
    --json >"$TMP/finer" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 0 ]] || fail "bench quality --ladder-finer-layers: exit $rc: $(cat "$TMP/err")"
  python3 - "$TMP/per_layer" "$TMP/finer" <<'PY' || fail "bench quality per layer: see above"
import json, sys
rows = json.load(open(sys.argv[1]))
names = [r["codec"] for r in rows]
assert names == ["int4", "ladder-flat"] + [f"int4/{l}" for l in range(5)], names
whole = rows[0]
for l, r in enumerate(rows[2:]):
    assert r["layer"] == l, r
    assert r["ratio"] == whole["ratio"], (r, whole)
    assert 0 < r["kl_mean"] < whole["kl_mean"], (r, whole)
assert "layer" not in rows[0] and "layer" not in rows[1], rows[:2]
finer = json.load(open(sys.argv[2]))[0]
assert finer["codec"] == "ladder-flat" and finer["finer_layers"] == [4], finer
assert "finer_layers" not in rows[1], rows[1]
assert finer["ratio"] < rows[1]["ratio"], (finer, rows[1])
PY
  expect_fail "bad layer list" "is not a layer number" "${M[@]}" "${SMALL[@]}" \
    --codecs ladder-flat --ladder-finer-layers 4,x
  expect_fail "layer twice" "names layer 4 twice" "${M[@]}" "${SMALL[@]}" \
    --codecs ladder-flat --ladder-finer-layers 4,4
  expect_fail "layer too large" "is not below 1024" "${M[@]}" "${SMALL[@]}" \
    --codecs ladder --ladder-finer-layers 1024
  expect_fail "partial block" "a multiple of 64" "${M[@]}" --prefix-tokens 100
  expect_fail "too long" "exceeds the model's context of 512" "${M[@]}" --prefix-tokens 512
  expect_fail "not a file" "not a regular file" "${M[@]}" "${SMALL[@]}" --text-file /dev/zero
  printf 'Once upon a time.\n' >"$TMP/short.txt"
  expect_fail "short text" "a window needs 160" "${M[@]}" "${SMALL[@]}" --text-file "$TMP/short.txt"
elif [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
  fail "shared model $BIN or $TOK is missing; KVTIER_REQUIRE_RESOURCES=1 makes that a failure"
else
  echo "SKIP (model checks): $BIN or $TOK is missing (expected ../shared/models)"
fi

# No model anywhere near the binary or the working directory: a clear error.
mkdir -p "$TMP/alone"
cp "$KVTIER" "$TMP/alone/kvtier"
near_model=0
dir="$TMP"
while [[ "$dir" != / && -n "$dir" ]]; do
  [[ -f "$dir/shared/models/stories260K.bin" ]] && near_model=1
  dir="$(dirname "$dir")"
done
if [[ $near_model -eq 1 ]]; then
  echo "SKIP (model-less run): a shared model lies above $TMP"
else
  rc=0
  (cd "$TMP/alone" && ./kvtier bench quality) >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -ne 0 ]] && grep -q "no model: shared/models/stories260K.bin" "$TMP/err" ||
    fail "bench quality without a model: exit $rc: $(cat "$TMP/err")"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures bench quality check(s) failed" >&2
  exit 1
fi
echo "bench quality: all checks passed"
