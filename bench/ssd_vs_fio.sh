#!/usr/bin/env bash
# Compares the SSD tier with fio on the same directory, block size, queue depth and O_DIRECT.
# The two alternate for several rounds (fio first in odd rounds, kvtier first in even ones)
# because the disk's speed swings within minutes; the script prints every pair with its ratios,
# the medians of each side, and the median of the per-round ratios (kvtier / fio), which is the
# figure to quote (docs/benchmarks.md). Not a test: it only measures.
#
# usage: bench/ssd_vs_fio.sh [--dir D] [--rounds N] [--total-bytes 1GiB] [--block-bytes 1MiB]
#                            [--queue-depth 16] [--kvtier PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${TMPDIR:-/var/tmp}/kvtier-bench"
rounds=5
total=1GiB
block=1MiB
qd=16
kvtier=build/tools/cli/kvtier
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --total-bytes) total="$2"; shift 2 ;;
    --block-bytes) block="$2"; shift 2 ;;
    --queue-depth) qd="$2"; shift 2 ;;
    --kvtier) kvtier="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
command -v fio >/dev/null || { echo "fio is missing: run scripts/install_deps.sh" >&2; exit 1; }
[ -x "$kvtier" ] || { echo "$kvtier is missing: run ./run.sh build" >&2; exit 1; }

# fio takes sizes as 1g / 1m; kvtier takes 1GiB / 1MiB.
fio_size() { echo "$1" | sed -E 's/([0-9]+)GiB/\1g/; s/([0-9]+)MiB/\1m/; s/([0-9]+)KiB/\1k/'; }
mkdir -p "$dir/fio" "$dir/kvtier"
results="$(mktemp)"
trap 'rm -rf "$dir/fio" "$dir/kvtier" "$results"; rmdir "$dir" 2>/dev/null || true' EXIT

run_fio() {  # $1 = write|read; prints bytes/s
  fio --name=seq --directory="$dir/fio" --rw="$1" --bs="$(fio_size "$block")" --iodepth="$qd" \
      --ioengine=io_uring --direct=1 --size="$(fio_size "$total")" --numjobs=1 \
      --end_fsync=1 --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["'"$1"'"]["bw_bytes"])'
}

run_kvtier() {  # prints "write_bytes_per_s read_bytes_per_s"
  rm -rf "$dir/kvtier"/*
  "$kvtier" bench ssd --dir "$dir/kvtier" --block-bytes "$block" --queue-depth "$qd" \
      --total-bytes "$total" --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["write_bytes_per_s"], j["read_bytes_per_s"])'
}

run_fio_pair() {  # prints "write read" bytes/s; the read job reads the file the write job made
  rm -rf "$dir/fio"/*
  local w r
  w=$(run_fio write); r=$(run_fio read)
  rm -rf "$dir/fio"/*
  echo "$w $r"
}

# Odd rounds run fio first, even rounds kvtier first, so a drift of the disk within a round does
# not always favour the same side.
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    f=$(run_fio_pair); k=$(run_kvtier)
  else
    k=$(run_kvtier); f=$(run_fio_pair)
  fi
  # Command substitutions (not process substitutions), so set -e stops on a failed run.
  read -r fw fr <<<"$f"; read -r kw kr <<<"$k"
  echo "$r $fw $fr $kw $kr" >> "$results"
  awk -v r="$r" -v fw="$fw" -v kw="$kw" -v fr="$fr" -v kr="$kr" 'BEGIN {
    printf "round %d: write fio %.0f MB/s kvtier %.0f MB/s (%.2fx) | read fio %.0f MB/s kvtier %.0f MB/s (%.2fx)\n",
      r, fw / 1e6, kw / 1e6, kw / fw, fr / 1e6, kr / 1e6, kr / fr }'
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows) / 1e6
w = [r[3] / r[1] for r in rows]
rd = [r[4] / r[2] for r in rows]
print(f"median MB/s: write fio {med(1):.0f} kvtier {med(3):.0f} | read fio {med(2):.0f} kvtier {med(4):.0f}")
print(f"median ratio kvtier/fio: write {statistics.median(w):.2f}x, read {statistics.median(rd):.2f}x "
      f"over {len(rows)} rounds")
PY
