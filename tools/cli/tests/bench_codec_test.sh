#!/usr/bin/env bash
# Goal: `kvtier bench codec` prints one row per codec and data set with exactly the keys codec,
# data, ratio, encode_bytes_per_s, decode_bytes_per_s, rel_rmse, attn_cosine, attn_cosine_min,
# values in range (lossless: rel_rmse 0, cosines 1, shuffle-zstd and zstd-cli ratio >= 1; lossy:
# rel_rmse in (0, 1), int4 worse than int8, cosines in (0, 1], the minimum at most the mean;
# throughputs > 0), for every codec (the rotated and mixed-width ones included), for the
# synthetic data sets and the real model's KV, with a zstd-cli row per data set and a ladder row
# (lossy beyond the recent window, so compressing more than shuffle-zstd);
# without a model the real-model rows are left out with a line on stderr, and without the zstd
# program its rows are; text output is a table; Ctrl-C exits 130 and leaves no scratch files;
# bad flags exit 2; --save-model-kv writes the model's blocks as a NumPy array of the blocks' shape
# that equal what the model computed (bench/ecq_bounds.py reads it) and refuses a directory, a
# symbolic link and a run without a model.
# Method: small sizes (1 MiB data sets, a 4096-token ladder: lossless, then int8; 2 repetitions); the JSON is parsed
# with python3. The model-less run uses a copy of the binary in a temporary directory, away from
# any shared/models; the zstd-less one runs with an empty PATH.
# Usage: bench_codec_test.sh <path to kvtier> <shared models directory>
# The real-model check is skipped (with a line) when the shared model is absent, unless
# KVTIER_REQUIRE_RESOURCES=1 (CI), which makes that a failure.
set -u
KVTIER="$1"
MODELS="$2"
GGUF="$MODELS/stories260K.gguf"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
SMALL=(--bytes 1MiB --ladder-tokens 4096 --repeat 2)

# check_json <file> <expect model rows: 0|1> <expect zstd rows: 0|1>
check_json() {
  python3 - "$@" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
want_model, want_zstd = sys.argv[2] == "1", sys.argv[3] == "1"
keys = ["codec", "data", "ratio", "encode_bytes_per_s", "decode_bytes_per_s", "rel_rmse",
        "attn_cosine", "attn_cosine_min"]
codecs = ["identity", "shuffle-zstd", "int8", "int8+zstd", "int4", "int4+zstd", "int8-rot",
          "int4-rot", "int4-rot+zstd", "k8v4", "k8v4-rot", "ecq5", "ecq6",
          "ecq6v5"]
lossless = {"identity", "shuffle-zstd", "zstd-cli"}
errors = []
assert isinstance(rows, list) and rows, "not a non-empty array"
for r in rows:
    if list(r.keys()) != keys:
        errors.append(f"keys {list(r.keys())}")
        continue
    name = f"{r['codec']}/{r['data']}"
    if not (r["encode_bytes_per_s"] > 0 and r["decode_bytes_per_s"] > 0):
        errors.append(f"{name}: throughput not > 0")
    if not (0 < r["attn_cosine"] <= 1):
        errors.append(f"{name}: attn_cosine {r['attn_cosine']} not in (0, 1]")
    if not (0 < r["attn_cosine_min"] <= r["attn_cosine"] + 1e-12):
        errors.append(f"{name}: attn_cosine_min {r['attn_cosine_min']} not in (0, mean]")
    if r["codec"] in lossless:
        if r["rel_rmse"] != 0 or r["attn_cosine"] != 1:
            errors.append(f"{name}: lossless but rel_rmse {r['rel_rmse']}, cos {r['attn_cosine']}")
        low = 0.99 if r["codec"] == "identity" else 1.0  # identity: the header's bytes
        if not (low <= r["ratio"] <= (1.0 if r["codec"] == "identity" else 100)):
            errors.append(f"{name}: ratio {r['ratio']}")
    else:
        if not (0 < r["rel_rmse"] < 1):
            errors.append(f"{name}: rel_rmse {r['rel_rmse']} not in (0, 1)")
        if not r["ratio"] > 1:
            errors.append(f"{name}: lossy ratio {r['ratio']} not > 1")
def by_set_ratio(data, codec):
    return [r["ratio"] for r in rows if r["data"] == data and r["codec"] == codec][0]
sets = sorted({r["data"] for r in rows if r["codec"] != "ladder"})
expect_sets = ["gaussian", "synthetic-outliers"] + (["stories260K"] if want_model else [])
if sets != sorted(expect_sets):
    errors.append(f"data sets {sets}, expected {sorted(expect_sets)}")
for d in expect_sets:
    got = [r["codec"] for r in rows if r["data"] == d]
    want = codecs + (["zstd-cli"] if want_zstd else [])
    if got != want:
        errors.append(f"{d}: codecs {got}, expected {want}")
    by = {r["codec"]: r for r in rows if r["data"] == d}
    if "int4" in by and "int8" in by and not by["int4"]["rel_rmse"] > by["int8"]["rel_rmse"]:
        errors.append(f"{d}: int4 not worse than int8")
    if "k8v4" in by and not by["int4"]["ratio"] > by["k8v4"]["ratio"] > by["int8"]["ratio"]:
        errors.append(f"{d}: k8v4's ratio not between int8's and int4's")
    # The entropy-coded codecs: each finer step halves the error, ecq5 both smaller than k8v4
    # and closer than int4, ecq6 smaller than int8.
    if "ecq5" in by and not (by["ecq6"]["rel_rmse"] < by["ecq5"]["rel_rmse"] <
                             by["int4"]["rel_rmse"] * 0.75):
        errors.append(f"{d}: errors not ecq6 < ecq5 < 0.75 int4")
    if "ecq5" in by and not (by["ecq5"]["ratio"] > by["k8v4"]["ratio"] and
                             by["ecq6"]["ratio"] > by["int8"]["ratio"]):
        errors.append(f"{d}: ratios not ecq5 > k8v4 and ecq6 > int8")
    # ecq6v5: ecq6's keys and coarser values: between ecq6 and ecq5 in size and in error.
    if "ecq6v5" in by and not (by["ecq6"]["ratio"] < by["ecq6v5"]["ratio"] < by["ecq5"]["ratio"]
                               and by["ecq6"]["rel_rmse"] < by["ecq6v5"]["rel_rmse"] <
                               by["ecq5"]["rel_rmse"]):
        errors.append(f"{d}: ecq6v5 not between ecq6 and ecq5")
ladder = [r for r in rows if r["codec"] == "ladder"]
if len(ladder) != 1 or ladder[0]["data"] != "synthetic-outliers-4096-tokens":
    errors.append(f"ladder rows {ladder}")
elif not ladder[0]["ratio"] > by_set_ratio("synthetic-outliers", "shuffle-zstd"):
    errors.append(f"ladder ratio {ladder[0]['ratio']} not above shuffle-zstd's")
if errors:
    print("\n".join(errors))
    sys.exit(1)
PY
}

have_zstd=0
command -v zstd >/dev/null && have_zstd=1

# 1. With the real model (when present).
if [[ -f "$GGUF" ]]; then
  rc=0
  "$KVTIER" bench codec "${SMALL[@]}" --model "$GGUF" --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "bench codec --model: exit $rc: $(cat "$TMP/err")"
  else
    check_json "$TMP/out" 1 "$have_zstd" || fail "bench codec --model: $(check_json "$TMP/out" 1 "$have_zstd")"
  fi
elif [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
  fail "shared model $GGUF is missing; KVTIER_REQUIRE_RESOURCES=1 makes that a failure"
else
  echo "SKIP (real-model rows): $GGUF is missing (expected ../shared/models beside the repository)"
fi

# 1a. --save-model-kv: a .npy of [blocks][K, V][64 tokens][4 heads][8], FP16, finite, not all
# zero, K and V different (read without numpy); a directory, a symbolic link and no model refused with one line.
if [[ -f "$GGUF" ]]; then
  rc=0
  "$KVTIER" bench codec "${SMALL[@]}" --no-zstd-cli --model "$GGUF" --save-model-kv "$TMP/kv.npy" \
    --json >"$TMP/out" 2>"$TMP/err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "bench codec --save-model-kv: exit $rc: $(cat "$TMP/err")"
  else
    # Read as the .npy format defines it, with the standard library only.
    python3 - "$TMP/kv.npy" <<'PY' || fail "bench codec --save-model-kv: see above"
import array, ast, struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x93NUMPY\x01\x00", data[:8]
(n,) = struct.unpack("<H", data[8:10])
assert (10 + n) % 64 == 0, n
header = ast.literal_eval(data[10:10 + n].decode("latin-1"))
shape = header["shape"]
assert header["descr"] == "<f2" and header["fortran_order"] is False, header
assert len(shape) == 5 and shape[0] > 0 and shape[1:] == (2, 64, 4, 8), shape
halves = array.array("H", data[10 + n:])
if sys.byteorder == "big":
    halves.byteswap()
assert len(halves) == shape[0] * 2 * 64 * 32, len(halves)
assert all(h & 0x7C00 != 0x7C00 for h in halves), "an element is not finite"
assert any(h & 0x7FFF for h in halves), "all zero"
per = 64 * 32
assert any(halves[(2 * b) * per:(2 * b + 1) * per] != halves[(2 * b + 1) * per:(2 * b + 2) * per]
           for b in range(shape[0])), "K equals V"
PY
  fi
  for target in "$TMP" "$TMP/link.npy"; do
    ln -sfn "$TMP/kv.npy" "$TMP/link.npy"
    rc=0
    "$KVTIER" bench codec "${SMALL[@]}" --no-zstd-cli --model "$GGUF" --save-model-kv "$target" \
      >"$TMP/out" 2>"$TMP/err" || rc=$?
    [[ $rc -eq 1 && "$(wc -l <"$TMP/err")" -eq 1 ]] && grep -q -- "--save-model-kv" "$TMP/err" ||
      fail "--save-model-kv $target: exit $rc: $(cat "$TMP/err")"
  done
fi

# 1b. --cpu-time (thread CPU time) and the ladder's rungs and ages: the same rows, rates > 0; a
# k8v4 middle rung from 2048 tokens on (4096-token sequence: two thirds of it) compresses more
# than the default ladder, which keeps all of a 4096-token sequence at full precision or int8.
rc=0
"$KVTIER" bench codec "${SMALL[@]}" --no-zstd-cli --cpu-time --ladder-int8 k8v4 \
  --ladder-recent 1024 --ladder-int4-age 2048 --json >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench codec --cpu-time: exit $rc: $(cat "$TMP/err")"
else
  python3 - "$TMP/out" <<'PY' || fail "bench codec --cpu-time with ladder flags: see above"
import json, sys
rows = json.load(open(sys.argv[1]))
assert all(r["encode_bytes_per_s"] > 0 and r["decode_bytes_per_s"] > 0 for r in rows), rows
ladder = [r for r in rows if r["codec"] == "ladder"][0]
int8 = [r for r in rows if r["codec"] == "int8" and r["data"] == "synthetic-outliers"][0]
assert ladder["ratio"] > int8["ratio"], (ladder, int8)
PY
fi
# Entropy-coded rungs at rest (ecq6, then ecq5 from 2048 tokens): more compression than the
# default ladder and a closer attention output (both run here, same sequence and query).
rc=0
"$KVTIER" bench codec "${SMALL[@]}" --no-zstd-cli --ladder-int8 ecq6 --ladder-int4 ecq5 \
  --ladder-recent 1024 --ladder-int4-age 2048 --json >"$TMP/ecq" 2>"$TMP/err" || rc=$?
"$KVTIER" bench codec "${SMALL[@]}" --no-zstd-cli --ladder-recent 1024 --ladder-int4-age 2048 \
  --json >"$TMP/grouped" 2>>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench codec with ecq rungs: exit $rc: $(cat "$TMP/err")"
else
  python3 - "$TMP/ecq" "$TMP/grouped" <<'PY' || fail "bench codec with ecq rungs: see above"
import json, sys
ecq, grouped = ([r for r in json.load(open(p)) if r["codec"] == "ladder"][0] for p in sys.argv[1:])
assert ecq["ratio"] > grouped["ratio"], (ecq, grouped)
assert ecq["attn_cosine"] > grouped["attn_cosine"], (ecq, grouped)
PY
fi
# A bad rung is refused before any measurement, with one line naming it.
rc=0
"$KVTIER" bench codec "${SMALL[@]}" --ladder-int8 int4 >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -ne 0 ]] || fail "bench codec --ladder-int8 int4: exit 0"
grep -q "ladder: the int8 rung must have 8-bit keys" "$TMP/err" || fail "bad rung: $(cat "$TMP/err")"
[[ "$(wc -l <"$TMP/err")" -eq 1 && ! -s "$TMP/out" ]] || fail "bad rung: $(cat "$TMP/err" "$TMP/out")"

# 2. No model anywhere near the binary or the working directory: rows left out, a line on stderr.
mkdir -p "$TMP/alone"
cp "$KVTIER" "$TMP/alone/kvtier"
near_model=0
dir="$TMP"
while [[ "$dir" != / && -n "$dir" ]]; do
  [[ -f "$dir/shared/models/stories260K.gguf" ]] && near_model=1
  dir="$(dirname "$dir")"
done
rc=0
(cd "$TMP/alone" && ./kvtier bench codec "${SMALL[@]}" --json) >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $near_model -eq 1 ]]; then
  echo "SKIP (model-less run): a shared model lies above $TMP"
elif [[ $rc -ne 0 ]]; then
  fail "bench codec without a model: exit $rc: $(cat "$TMP/err")"
else
  grep -q "real-model rows left out" "$TMP/err" || fail "no note about the missing model: $(cat "$TMP/err")"
  check_json "$TMP/out" 0 "$have_zstd" || fail "bench codec without a model: $(check_json "$TMP/out" 0 "$have_zstd")"
fi

# 2b. --save-model-kv without a model: refused before any measurement.
if [[ $near_model -eq 0 ]]; then
  rc=0
  (cd "$TMP/alone" && ./kvtier bench codec "${SMALL[@]}" --save-model-kv kv.npy) \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 && ! -e "$TMP/alone/kv.npy" ]] && grep -q -- "-model-kv: no model" "$TMP/err" ||
    fail "--save-model-kv without a model: exit $rc: $(cat "$TMP/err")"
fi

# 3. Without the zstd program: its rows are left out, with a line on stderr.
rc=0
(cd "$TMP/alone" && PATH="$TMP/alone/empty" ./kvtier bench codec "${SMALL[@]}" --json) \
  >"$TMP/out" 2>"$TMP/err" || rc=$?
if [[ $rc -ne 0 ]]; then
  fail "bench codec without zstd: exit $rc: $(cat "$TMP/err")"
else
  grep -q "zstd not found" "$TMP/err" || fail "no note about the missing zstd: $(cat "$TMP/err")"
  check_json "$TMP/out" "$near_model" 0 ||
    fail "bench codec without zstd: $(check_json "$TMP/out" "$near_model" 0)"
fi

# 4. Text output: a table with a header line and a row per codec.
rc=0
(cd "$TMP/alone" && ./kvtier bench codec "${SMALL[@]}" --no-zstd-cli) >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 0 ]] || fail "bench codec (text): exit $rc: $(cat "$TMP/err")"
head -1 "$TMP/out" | grep -q "^codec .*ratio.*attn_cosine" || fail "no table header: $(cat "$TMP/out")"
[[ "$(grep -c '^int4 ' "$TMP/out")" == $((2 + near_model)) ]] || fail "text table lacks the int4 rows: $(cat "$TMP/out")"
grep -q '^ladder ' "$TMP/out" || fail "text table lacks the ladder row: $(cat "$TMP/out")"

# 5. Ctrl-C while measuring: exit 130, the zstd scratch files removed.
if [[ $have_zstd -eq 1 ]]; then
  mkdir -p "$TMP/ctmp"
  TMPDIR="$TMP/ctmp" "$KVTIER" bench codec --bytes 32MiB --repeat 1000 \
    >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  for _ in $(seq 1 200); do
    [[ -n "$(ls -A "$TMP/ctmp")" ]] && break
    sleep 0.1
  done
  sleep 0.5
  kill -INT "$pid"
  rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 130 ]] || fail "Ctrl-C: exit $rc, expected 130: $(cat "$TMP/err")"
  grep -q "interrupted" "$TMP/err" || fail "Ctrl-C: no message: $(cat "$TMP/err")"
  [[ -z "$(ls -A "$TMP/ctmp")" ]] || fail "scratch data left after Ctrl-C: $(ls -A "$TMP/ctmp")"
fi

# 6. Bad flags: one line on stderr, exit 2.
source "$(dirname "$0")/expect_usage.sh"
expect_usage zero_repeat "--repeat" "$KVTIER" bench codec --repeat 0
expect_usage word_repeat "--repeat" "$KVTIER" bench codec --repeat many
expect_usage short_ladder "--ladder-tokens" "$KVTIER" bench codec --ladder-tokens 10
expect_usage small_bytes "--bytes" "$KVTIER" bench codec --bytes 4KiB
expect_usage bad_bytes "--bytes" "$KVTIER" bench codec --bytes lots
expect_usage unknown_flag "--frobnicate" "$KVTIER" bench codec --frobnicate

# 7. A model file that is not one: one line, exit 1.
printf 'not a model' >"$TMP/bad.gguf"
rc=0
"$KVTIER" bench codec "${SMALL[@]}" --model "$TMP/bad.gguf" >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "bad model: exit $rc: $(cat "$TMP/err")"
grep -q "^kvtier bench: .*bad.gguf" "$TMP/err" || fail "bad model: $(cat "$TMP/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "bench_codec_test: all checks passed"
