#!/bin/bash
# Goal: bench/ecq_bounds.py (docs/codecs.md, "What bounds ecq on small blocks") keeps running and
# keeps replicating kvtier's ecq quantization: on the shared model's blocks, for ecq5, ecq6 and
# ecq6v5, its replicated stage through the zstd program comes within 1 % of kvtier's encoded
# payload, the ideal coders order as they must (the one-table entropy below zstd's codes, the
# per-channel model below one table, the temporal choice at most the model), the finer codecs take
# more bytes, and the ratios it derives lie above kvtier's; a kvtier that fails is one line and
# exit 1.
# Method: the script's --json report read back with Python. The shared model is required
# (KVTIER_REQUIRE_RESOURCES=1, as CI sets) or the test is skipped with a line.
# Usage: ecq_bounds_test.sh <python> <bench dir> <kvtier> <shared models directory>
set -euo pipefail
python="$1"
script="$2/ecq_bounds.py"
kvtier="$3"
model="$4/stories260K.gguf"
if [[ ! -f "$model" ]]; then
  if [[ "${KVTIER_REQUIRE_RESOURCES:-}" == 1 ]]; then
    echo "FAIL: shared model $model is missing; KVTIER_REQUIRE_RESOURCES=1"; exit 1
  fi
  echo "SKIP: shared model $model is missing"; exit 0
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$python" "$script" --kvtier "$kvtier" --model "$model" --json > "$out"
"$python" - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["model"] == "stories260K" and r["blocks"] > 0 and r["block_bytes"] == 8192, r
rows = r["codecs"]
assert list(rows) == ["ecq5", "ecq6", "ecq6v5"], rows.keys()
for name, c in rows.items():
    assert c["replica_within_1pct"] is True, (name, c)
    assert c["codes_one_table"] < c["codes_zstd"] < c["stage_zstd"] < c["kvtier_bytes"], (name, c)
    assert c["codes_per_channel_model"] < c["codes_one_table"], (name, c)
    assert c["codes_temporal"] <= c["codes_per_channel_model"], (name, c)
    assert (c["kvtier_ratio"] < c["ratio_codes_at_model_cost"]
            < c["ratio_codes_at_model_cost_no_header"] <= c["ratio_codes_temporal_no_header"]), c
    assert all(0 <= g < 2 for g in c["klt_bits_per_code"]), (name, c)
assert rows["ecq5"]["kvtier_bytes"] < rows["ecq6v5"]["kvtier_bytes"] < rows["ecq6"]["kvtier_bytes"]
PY
if err="$("$python" "$script" --kvtier /nonexistent/kvtier --json 2>&1)"; then
  echo "a missing kvtier was accepted"; exit 1
fi
grep -q "^ecq_bounds: " <<<"$err" && [[ "$(wc -l <<<"$err")" == 1 ]] \
  || { echo "unclear failure: $err"; exit 1; }
echo "ecq_bounds_test: ok"
