#!/usr/bin/env bash
# Compares the SSD tier with fio on the same directory, block size, queue depth and O_DIRECT.
# The two alternate for several rounds (fio first in odd rounds, kvtier first in even ones)
# because the disk's speed swings within minutes; the script prints every pair with its ratios,
# the medians of each side, and the median of the per-round ratios (kvtier / fio), which is the
# figure to quote (docs/benchmarks.md). Not a test: it only measures.
# With --json the round lines go to stderr and stdout gets one JSON document: the configuration,
# every round (fio's bytes/s and kvtier's whole `bench ssd --json` report), the medians and the
# median ratios; `bench/plot.py ssd` draws it.
#
# usage: bench/ssd_vs_fio.sh [--dir D] [--rounds N] [--total-bytes 1GiB] [--block-bytes 1MiB]
#                            [--queue-depth 16] [--kvtier PATH] [--fio-iomem MODE] [--json]
# --fio-iomem: fio's --iomem for its buffers (default malloc). kvtier's reads land in buffers on
# transparent huge pages, so each O_DIRECT request is a few segments for the device; fio's malloc
# buffers are 4 KiB pages, which on a virtio disk understate its reads. `shmhuge` gives fio huge
# pages too; it needs reserved ones (sysctl vm.nr_hugepages, at least 2 x queue depth x block / 2 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${TMPDIR:-/var/tmp}/kvtier-bench"
rounds=5
total=1GiB
block=1MiB
qd=16
kvtier=build/tools/cli/kvtier
fio_iomem=malloc
json=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --total-bytes) total="$2"; shift 2 ;;
    --block-bytes) block="$2"; shift 2 ;;
    --queue-depth) qd="$2"; shift 2 ;;
    --kvtier) kvtier="$2"; shift 2 ;;
    --fio-iomem) fio_iomem="$2"; shift 2 ;;
    --json) json=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
command -v fio >/dev/null || { echo "fio is missing: run scripts/install_deps.sh" >&2; exit 1; }
case "$fio_iomem" in
  malloc|shm|mmap) ;;
  shmhuge)
    [ "$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)" -gt 0 ] || {
      echo "--fio-iomem shmhuge needs reserved huge pages: sysctl -w vm.nr_hugepages=64" >&2; exit 2; } ;;
  *) echo "--fio-iomem: '$fio_iomem' is not malloc, shm, mmap or shmhuge" >&2; exit 2 ;;
esac
[ -x "$kvtier" ] || { echo "$kvtier is missing: run ./run.sh build" >&2; exit 1; }

# fio takes sizes as 1g / 1m; kvtier takes 1GiB / 1MiB.
fio_size() { echo "$1" | sed -E 's/([0-9]+)GiB/\1g/; s/([0-9]+)MiB/\1m/; s/([0-9]+)KiB/\1k/'; }
mkdir -p "$dir/fio" "$dir/kvtier"
results="$(mktemp)"
trap 'rm -rf "$dir/fio" "$dir/kvtier" "$results" "$results".kvtier.*; rmdir "$dir" 2>/dev/null || true' EXIT

run_fio() {  # $1 = write|read; prints bytes/s
  fio --name=seq --directory="$dir/fio" --rw="$1" --bs="$(fio_size "$block")" --iodepth="$qd" \
      --ioengine=io_uring --direct=1 --size="$(fio_size "$total")" --numjobs=1 \
      --iomem="$fio_iomem" \
      --end_fsync=1 --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["'"$1"'"]["bw_bytes"])'
}

run_kvtier() {  # $1 = round; prints "write_bytes_per_s read_bytes_per_s", keeps the report
  rm -rf "$dir/kvtier"/*
  "$kvtier" bench ssd --dir "$dir/kvtier" --block-bytes "$block" --queue-depth "$qd" \
      --total-bytes "$total" --json > "$results.kvtier.$1"
  python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["write_bytes_per_s"], j["read_bytes_per_s"])' \
      < "$results.kvtier.$1"
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
    f=$(run_fio_pair); k=$(run_kvtier "$r")
  else
    k=$(run_kvtier "$r"); f=$(run_fio_pair)
  fi
  # Command substitutions (not process substitutions), so set -e stops on a failed run.
  read -r fw fr <<<"$f"; read -r kw kr <<<"$k"
  echo "$r $fw $fr $kw $kr" >> "$results"
  awk -v r="$r" -v fw="$fw" -v kw="$kw" -v fr="$fr" -v kr="$kr" 'BEGIN {
    printf "round %d: write fio %.0f MB/s kvtier %.0f MB/s (%.2fx) | read fio %.0f MB/s kvtier %.0f MB/s (%.2fx)\n",
      r, fw / 1e6, kw / 1e6, kw / fw, fr / 1e6, kr / 1e6, kr / fr }' >&"$((json ? 2 : 1))"
done
python3 - "$results" "$json" "$block" "$qd" "$total" "$fio_iomem" <<'PY'
import json, statistics, sys
path, as_json, block, qd, total, iomem = sys.argv[1], sys.argv[2] == "1", *sys.argv[3:]
rows = [list(map(float, l.split())) for l in open(path)]
med = lambda i: statistics.median(r[i] for r in rows) / 1e6
w = [r[3] / r[1] for r in rows]
rd = [r[4] / r[2] for r in rows]
summary = (f"median MB/s: write fio {med(1):.0f} kvtier {med(3):.0f} | read fio {med(2):.0f} "
           f"kvtier {med(4):.0f}\nmedian ratio kvtier/fio: write {statistics.median(w):.2f}x, "
           f"read {statistics.median(rd):.2f}x over {len(rows)} rounds")
if not as_json:
    print(summary)
    sys.exit(0)
print(summary, file=sys.stderr)
rounds = []
for r in rows:
    n = int(r[0])
    rounds.append({"round": n, "first": "fio" if n % 2 == 1 else "kvtier",
                   "fio": {"write_bytes_per_s": r[1], "read_bytes_per_s": r[2]},
                   "kvtier": json.load(open(f"{path}.kvtier.{n}"))})
print(json.dumps({
    "config": {"block_bytes": block, "queue_depth": int(qd), "total_bytes": total,
               "rounds": len(rows), "fio": "--rw=write|read --ioengine=io_uring --direct=1 "
                                           "--numjobs=1 --end_fsync=1 --iomem=" + iomem},
    "rounds": rounds,
    "median_bytes_per_s": {"fio_write": med(1) * 1e6, "fio_read": med(2) * 1e6,
                           "kvtier_write": med(3) * 1e6, "kvtier_read": med(4) * 1e6},
    "median_ratio_kvtier_over_fio": {"write": statistics.median(w),
                                     "read": statistics.median(rd)}}, indent=1))
PY
