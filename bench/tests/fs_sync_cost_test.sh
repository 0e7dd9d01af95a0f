#!/bin/bash
# Goal: bench/fs_sync_cost.py (docs/benchmarks.md, fs tier command B) keeps running: a short real
# run on a fresh directory reports every mode with a time and an interrupt count per round, leaves
# no file of its own behind, and refuses a directory that is not there with a message naming it.
# Not a measurement: 4 files in groups of 2, one round.
# Method: the script on a temporary directory, its JSON read back with Python.
set -euo pipefail
python="$1"
script="$2/fs_sync_cost.py"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$python" "$script" --dir "$dir" --files 4 --file-bytes 4096 --group 2 --rounds 1 --json \
  > "$dir/report.json"
"$python" - "$dir/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["benchmark"] == "fs_sync_cost" and r["files"] == 4 and r["group"] == 2, r
assert sorted(r["modes"]) == ["fdatasync", "none", "syncfs"], r["modes"].keys()
for mode, m in r["modes"].items():
    assert len(m["round_s"]) == 1 and m["round_s"][0] > 0, (mode, m)
    assert len(m["interrupts"]) == 1 and m["interrupts"][0] >= 0, (mode, m)
    assert m["round_s_median"] == m["round_s"][0], (mode, m)
PY
left="$(find "$dir" -name 'syncbench.*' | wc -l)"
[[ "$left" == 0 ]] || { echo "files left behind: $left"; exit 1; }
if out="$("$python" "$script" --dir "$dir/missing" 2>&1)"; then
  echo "a missing directory was accepted"; exit 1
fi
grep -q "missing: not a directory" <<<"$out" || { echo "unclear refusal: $out"; exit 1; }
echo "fs_sync_cost_test: ok"
