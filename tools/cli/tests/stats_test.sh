#!/usr/bin/env bash
# Goal: `kvtier stats DIR...` reports on an SSD cache striped over two directories, in text and as
# one JSON document whose documented keys are all there, with block counts and live/dead bytes
# equal to `kvtier inspect`'s and ages, layouts and codecs of the live blocks, and no key material;
# it never changes a byte of the cache; it refuses, with exit 1 and one line naming the problem, a
# missing directory, one that is not a cache, directories of two caches, a cache another process
# holds and a damaged cache (saying what verify says); a command line without a directory exits 2.
# Method: make caches with `kvtier bench ssd --keep` (16 records of 64 KiB, no model needed), run
# stats and inspect on them, check the JSON with python3, compare checksums and timestamps of
# every file before and after, hold the LOCK with flock(1), flip a byte with python3. Each run is
# under `timeout`, so a hang fails instead of stalling.
# Usage: stats_test.sh <path to kvtier>
set -u

KVTIER="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=cli_test_lib.sh
source "$(dirname "$0")/cli_test_lib.sh"
RUN_TIMEOUT=60

# Every file of the given directories with its size, modification time and checksum.
snapshot() {
  find "$@" -type f -printf '%p %s %T@\n' | sort
  find "$@" -type f -exec sha256sum {} + | sort
}

mkdir -p "$TMP/a" "$TMP/b"
"$KVTIER" bench ssd --dir "$TMP/a" --dir "$TMP/b" --block-bytes 64KiB --queue-depth 4 \
  --total-bytes 1MiB --json --keep >"$TMP/bench.json" 2>"$TMP/err" ||
  { echo "FAIL: bench ssd --keep: $(cat "$TMP/err")" >&2; exit 1; }
mapfile -t DIRS < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["kept_dirs"]))' "$TMP/bench.json")
if [[ ${#DIRS[@]} -ne 2 || ! -d "${DIRS[0]}" || ! -d "${DIRS[1]}" ]]; then
  echo "FAIL: bench --keep made no two-directory cache: $(cat "$TMP/bench.json")" >&2
  exit 1
fi

before=$(snapshot "${DIRS[@]}")

# Text: the occupancy, blocks, age and layout lines.
run stats "${DIRS[@]}"
if [[ $rc -ne 0 ]]; then
  fail "stats: exit $rc, stderr: $(cat "$TMP/err")"
else
  for needle in "2 directories" "blocks 16 (16 chunks)" "age of the live blocks" "< 1m" \
      ">= 30d" "layout " "codecs: none 16" "tenants: not recorded" "capacity: not recorded"; do
    grep -qF -- "$needle" "$TMP/out" || fail "stats: stdout lacks '$needle': $(cat "$TMP/out")"
  done
  [[ ! -s "$TMP/err" ]] || fail "stats: stderr is not empty: $(cat "$TMP/err")"
fi

# JSON: one document with the documented keys; the counts agree with inspect's.
run inspect "${DIRS[@]}" --json
cp "$TMP/out" "$TMP/inspect.json"
run stats "${DIRS[@]}" --json
[[ $rc -eq 0 ]] || fail "stats --json: exit $rc, stderr: $(cat "$TMP/err")"
cp "$TMP/out" "$TMP/stats.json"
python3 - "$TMP/stats.json" "$TMP/inspect.json" "$TMP/bench.json" <<'PY' ||
import json, sys
s = json.load(open(sys.argv[1]))
i = json.load(open(sys.argv[2]))
b = json.load(open(sys.argv[3]))
keys = ["directories", "cache_id", "segments", "segment_bytes", "disk_bytes", "capacity_bytes",
        "filesystems", "blocks", "chunks", "live_bytes", "dead_bytes", "raw_bytes",
        "expired_blocks", "erased_keys", "sequence_min", "sequence_max", "now_wall_us",
        "oldest_segment_wall_us", "newest_segment_wall_us", "age_basis", "age", "layouts",
        "tenants_recorded", "checkpoint_present"]
assert list(s) == keys, list(s)
assert s["directories"] == 2 and len(s["cache_id"]) == 32, s
assert s["blocks"] == i["blocks"] == b["blocks"] == 16, (s["blocks"], i["blocks"], b["blocks"])
assert s["live_bytes"] == i["live_bytes"] == 16 * 65536, (s["live_bytes"], i["live_bytes"])
assert s["dead_bytes"] == i["dead_bytes"], (s["dead_bytes"], i["dead_bytes"])
assert s["segments"] == len(i["segments"]) and s["disk_bytes"] > s["live_bytes"], s
assert s["capacity_bytes"] is None and s["tenants_recorded"] is False, s
assert [f["dir"] for f in s["filesystems"]] == b["kept_dirs"], s["filesystems"]
assert all(f["capacity_bytes"] >= f["available_bytes"] > 0 for f in s["filesystems"])
assert s["chunks"] == 16 and s["expired_blocks"] == 0 and s["erased_keys"] == 0, s
assert s["sequence_min"] == 1 and s["sequence_max"] == 16, s
assert 0 < s["oldest_segment_wall_us"] <= s["newest_segment_wall_us"] <= s["now_wall_us"], s
assert s["age_basis"] == "segment_created"
bounds = [60, 600, 3600, 86400, 604800, 2592000, None]
assert [a["max_age_s"] for a in s["age"]] == bounds, s["age"]
assert s["age"][0]["blocks"] == 16 and s["age"][0]["live_bytes"] == s["live_bytes"], s["age"]
assert sum(a["blocks"] for a in s["age"]) == s["blocks"]
assert len(s["layouts"]) == 1, s["layouts"]
l = s["layouts"][0]
assert list(l) == ["id", "blocks", "chunks", "layers", "live_bytes", "raw_bytes", "sealed_blocks",
                   "codecs"], l
assert len(l["id"]) == 16 and l["id"] in list(i["records_per_layout"])[0], (l, i)
assert l["blocks"] == 16 and l["codecs"] == {"none": 16} and l["sealed_blocks"] == 0, l
# No key material: no 64-hex-digit string (a chunk hash or a full digest) anywhere.
import re
assert not re.search(r"[0-9a-f]{64}", open(sys.argv[1]).read())
PY
  fail "stats --json: $(cat "$TMP/stats.json")"

[[ "$(snapshot "${DIRS[@]}")" == "$before" ]] || fail "stats or inspect changed the cache's files"

# Refusals.
expect_fail missing 1 "kvtier stats: $TMP/nope: no such directory" stats "$TMP/nope"
mkdir -p "$TMP/empty" && echo hello >"$TMP/empty/notes.txt"
expect_fail not_a_cache 1 "not a kvtier cache directory" stats "$TMP/empty"
expect_fail usage 2 "dir is required" stats
expect_fail one_of_two 1 "kvtier stats:" stats "${DIRS[1]}"

# Another cache's directory given as the second stripe.
mkdir -p "$TMP/c"
"$KVTIER" bench ssd --dir "$TMP/c" --block-bytes 64KiB --queue-depth 4 --total-bytes 256KiB \
  --json --keep >"$TMP/bench2.json" 2>/dev/null
OTHER=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kept_dirs"][0])' "$TMP/bench2.json")
expect_fail two_caches 1 "kvtier stats:" stats "${DIRS[0]}" "$OTHER"
expect_fail twice 1 "is given twice" stats "$OTHER" "$OTHER"

# In use: another process holds the LOCK of the second directory, as a running tier does.
exec {lockfd}<"${DIRS[1]}/LOCK"
flock -x "$lockfd"
expect_fail in_use 1 "${DIRS[1]} is in use by another process (LOCK held); stop it first" \
  stats "${DIRS[@]}" --json
exec {lockfd}<&-

# Damaged: a flipped byte in the first record of a segment; stats says what verify says.
SEG=$(ls "${DIRS[0]}"/seg-*.kvs | head -n 1)
python3 -c '
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4096 + 1000); b = f.read(1); f.seek(4096 + 1000); f.write(bytes([b[0] ^ 1]))' "$SEG"
run verify "${DIRS[@]}"
problem=$(head -n 1 "$TMP/out")
expect_fail damaged 1 "the cache is damaged: $problem" stats "${DIRS[@]}"
grep -qF "kvtier verify lists them all" "$TMP/err" || fail "damaged: no pointer to verify: $(cat "$TMP/err")"

finish stats
