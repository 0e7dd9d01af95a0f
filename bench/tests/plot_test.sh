#!/usr/bin/env bash
# Goal: bench/plot.py draws every kind of plot docs/benchmarks.md shows (ssd, decode, codec, ttft,
# mooncake, llama, lmcache, serve) from its benchmark's JSON report, as PNG or SVG, with the same
# bytes for the same report, also when started by a Python without matplotlib (it runs itself
# again with /usr/bin/python3); a serve row that failed its correctness gate gets no bar; a report
# it cannot plot, a missing file or a bad output name gets one line on stderr, a non-zero exit and
# no image; and bench/ssd_vs_fio.sh --json gives a report that plot.py draws. matplotlib missing
# is a failure, not a skip (scripts/install_deps.sh installs it).
# Method: run plot.py on the fixture reports in tests/fixtures and check each output's PNG or SVG
# signature; run it again under python3 -S (no site-packages) with the report on stdin; feed it
# wrong reports and arguments and check the exit status and the message; run ssd_vs_fio.sh for
# two short rounds (16 MiB, fio and `kvtier bench ssd`) and plot its report.
# Usage: plot_test.sh <python3 with matplotlib> <bench directory> <path to kvtier>
set -u
PYTHON="$1"
BENCH="$2"
KVTIER="$3"
FIXTURES="$BENCH/tests/fixtures"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

if ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
  echo "FAIL: $PYTHON cannot import matplotlib: run scripts/install_deps.sh" >&2
  exit 1
fi

plot() { "$PYTHON" "$BENCH/plot.py" "$@"; }

is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

# Every kind, from its fixture, as PNG.
for kind in ssd decode codec ttft mooncake llama lmcache serve; do
  out="$TMP/$kind.png"
  if ! plot "$kind" "$FIXTURES/$kind.json" -o "$out" 2>"$TMP/err"; then
    fail "$kind: exit $? ($(cat "$TMP/err"))"
  elif ! is_png "$out"; then
    fail "$kind: $out is not a PNG"
  elif [ "$(stat -c %s "$out")" -lt 10000 ]; then
    fail "$kind: $out is only $(stat -c %s "$out") bytes"
  fi
done

# A serve row that failed its gate against recompute's tokens gets no bar: the plot differs from
# the one of the whole report, and the row's figures, though present, are not read.
"$PYTHON" - "$FIXTURES/serve.json" "$TMP/serve_failed.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r["rows"]:
    if row["mode"] == "lmcache" and row["concurrency"] == 8:
        row["correct"], row["ttft_p50_s"] = False, "not timed"
json.dump(r, open(sys.argv[2], "w"))
PY
if ! plot serve "$TMP/serve_failed.json" -o "$TMP/serve_failed.png" 2>"$TMP/err"; then
  fail "serve with a row that failed its gate: $(cat "$TMP/err")"
elif cmp -s "$TMP/serve.png" "$TMP/serve_failed.png"; then
  fail "serve: a row that failed its gate was drawn"
fi

# The same report gives the same bytes (no timestamp in the file).
plot decode "$FIXTURES/decode.json" -o "$TMP/again.png" 2>/dev/null
cmp -s "$TMP/decode.png" "$TMP/again.png" || fail "two plots of one report differ"

# SVG by extension; the report from stdin.
if ! plot ttft - -o "$TMP/ttft.svg" <"$FIXTURES/ttft.json" 2>"$TMP/err"; then
  fail "ttft to SVG from stdin: $(cat "$TMP/err")"
elif ! grep -q '<svg' "$TMP/ttft.svg"; then
  fail "ttft.svg is not an SVG"
fi

# Started by a Python that cannot import matplotlib (here: without site-packages, -S), plot.py
# runs itself again with /usr/bin/python3, and the report still arrives from stdin.
if ! "$PYTHON" -S "$BENCH/plot.py" llama - -o "$TMP/llama2.png" <"$FIXTURES/llama.json" \
    2>"$TMP/err"; then
  fail "plot.py under python3 -S: $(cat "$TMP/err")"
elif ! cmp -s "$TMP/llama.png" "$TMP/llama2.png"; then
  fail "plot.py under python3 -S drew another image"
fi

# expect_error <status> <needle> <args...>: that exit status, one line on stderr containing the
# needle, and no image written.
expect_error() {
  local want="$1" needle="$2"; shift 2
  rm -f "$TMP/bad.png"
  plot "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "plot.py $*: exit $rc, expected $want ($(cat "$TMP/err"))"
  elif ! grep -qF -- "$needle" "$TMP/err"; then
    fail "plot.py $*: stderr lacks '$needle': $(cat "$TMP/err")"
  elif [ "$want" -eq 1 ] && [ "$(wc -l <"$TMP/err")" -ne 1 ]; then
    fail "plot.py $*: more than one line on stderr: $(cat "$TMP/err")"
  fi
  [ -e "$TMP/bad.png" ] && fail "plot.py $*: wrote an image anyway"
}
expect_error 1 "plot.py decode: not a kvtier bench decode --json report: no 'configs'" \
  decode "$FIXTURES/ssd.json" -o "$TMP/bad.png"
expect_error 1 "plot.py ssd: not a bench/ssd_vs_fio.sh --json report: no 'rounds'" \
  ssd "$FIXTURES/decode.json" -o "$TMP/bad.png"
expect_error 1 "plot.py codec: not a kvtier bench codec --json report: no rows with a 'codec'" \
  codec "$FIXTURES/llama.json" -o "$TMP/bad.png"
expect_error 1 "plot.py lmcache: not a bench/peers/lmcache_vllm.py --json report: no 'comparisons'" \
  lmcache "$FIXTURES/mooncake.json" -o "$TMP/bad.png"
expect_error 1 "plot.py serve: not a bench/serve_trace.py --json report: no 'rows'" \
  serve "$FIXTURES/lmcache.json" -o "$TMP/bad.png"
printf '{"rows": [{"mode": "kvtier", "concurrency": 4, "correct": true, "ttft_p50_s": null}]}' \
  >"$TMP/serve_null.json"
expect_error 1 "plot.py serve: kvtier at concurrency 4: ttft_p50_s is not a number: None" \
  serve "$TMP/serve_null.json" -o "$TMP/bad.png"
printf '{"rows": [{"mode": {"x": 1}, "concurrency": 4}]}' >"$TMP/serve_mode.json"
expect_error 1 "plot.py serve: not a bench/serve_trace.py --json report: a row's mode {'x': 1}" \
  serve "$TMP/serve_mode.json" -o "$TMP/bad.png"
expect_error 1 "plot.py llama: $TMP/missing.json: No such file or directory" \
  llama "$TMP/missing.json" -o "$TMP/bad.png"
printf '{"rounds": [' >"$TMP/truncated.json"
expect_error 1 "plot.py ssd: $TMP/truncated.json: not JSON" \
  ssd "$TMP/truncated.json" -o "$TMP/bad.png"
printf '{"configs": [{"config": "offload", "ms_per_token": "slow"}]}' >"$TMP/text.json"
expect_error 1 "plot.py decode: offload: ms_per_token is not a number: 'slow'" \
  decode "$TMP/text.json" -o "$TMP/bad.png"
expect_error 2 "invalid choice: 'pie'" pie "$FIXTURES/ssd.json" -o "$TMP/bad.png"
expect_error 2 "the output must end in .png or .svg" \
  ssd "$FIXTURES/ssd.json" -o "$TMP/bad.jpg"
expect_error 2 "the following arguments are required: -o/--output" ssd "$FIXTURES/ssd.json"
expect_error 1 "plot.py ssd: $TMP/no/such/dir/x.png: No such file or directory" \
  ssd "$FIXTURES/ssd.json" -o "$TMP/no/such/dir/x.png"

# A real, short run of the fio comparison, and its plot. O_DIRECT needs a real file system, so
# not a tmpfs /tmp.
if ! command -v fio >/dev/null; then
  fail "fio is missing: run scripts/install_deps.sh"
else
  dir="$(mktemp -d "${KVTIER_BENCH_TMPDIR:-/var/tmp}/kvtier-plot-test.XXXXXX")"
  if ! "$BENCH/ssd_vs_fio.sh" --dir "$dir/ssd" --rounds 2 --total-bytes 16MiB \
      --kvtier "$KVTIER" --json >"$TMP/ssd_run.json" 2>"$TMP/ssd_run.err"; then
    fail "ssd_vs_fio.sh --json: $(tail -n 3 "$TMP/ssd_run.err")"
  elif ! "$PYTHON" - "$TMP/ssd_run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["rounds"]) == 2, r["rounds"]
assert [x["first"] for x in r["rounds"]] == ["fio", "kvtier"]
for x in r["rounds"]:
    assert x["fio"]["write_bytes_per_s"] > 0 and x["fio"]["read_bytes_per_s"] > 0
    assert x["kvtier"]["write_bytes_per_s"] > 0 and x["kvtier"]["read_bytes_per_s"] > 0
    assert x["kvtier"]["total_bytes"] == 16 << 20, x["kvtier"]
assert r["median_ratio_kvtier_over_fio"]["read"] > 0
assert r["config"]["queue_depth"] == 16
PY
  then
    fail "ssd_vs_fio.sh --json: unexpected report: $(head -c 400 "$TMP/ssd_run.json")"
  elif ! grep -q "^round 2: write fio" "$TMP/ssd_run.err"; then
    fail "ssd_vs_fio.sh --json: the round lines are not on stderr"
  elif ! plot ssd "$TMP/ssd_run.json" -o "$TMP/ssd_run.png" 2>"$TMP/err" ||
       ! is_png "$TMP/ssd_run.png"; then
    fail "plot.py ssd on a real run: $(cat "$TMP/err")"
  fi
  [ -e "$dir/ssd" ] && fail "ssd_vs_fio.sh left $dir/ssd behind"
  rm -rf "$dir"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "plot_test: OK"
