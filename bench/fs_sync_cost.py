#!/usr/bin/env python3
"""What making a group of new files durable costs on a directory's file system, three ways.

The fs tier (docs/fs_tier.md) publishes values by writing temporaries, making them durable and
renaming them. This measures the three ways of the middle step on the same directory, alternated
round by round: one fdatasync per file, one syncfs per group of files, and none. For each it
reports the median wall time of a round and the interrupts the machine took during it (from
/proc/interrupts, every CPU: a device's flush completions are interrupts, and they preempt
whatever runs, an inference engine's forward pass included).

    python3 bench/fs_sync_cost.py --dir /var/tmp/kvtier-fsbench --json

Not a test: it times a shared disk. Linux only (syncfs, /proc/interrupts).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)


def interrupts():
    total = 0
    with open("/proc/interrupts") as f:
        cpus = len(f.readline().split())
        for line in f:
            fields = line.split()
            total += sum(int(x) for x in fields[1:1 + cpus] if x.isdigit())
    return total


def one_round(directory, mode, files, group, data):
    for name in os.listdir(directory):
        if name.startswith("syncbench."):
            os.unlink(os.path.join(directory, name))
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        irq0, t0 = interrupts(), time.perf_counter()
        for first in range(0, files, group):
            opened = []
            for i in range(first, min(files, first + group)):
                temp = os.path.join(directory, f"syncbench.{i}.tmp")
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, data)
                opened.append((i, fd, temp))
            if mode == "syncfs" and LIBC.syncfs(dir_fd) != 0:
                raise OSError(ctypes.get_errno(), "syncfs")
            for i, fd, temp in opened:
                if mode == "fdatasync":
                    os.fdatasync(fd)
                os.close(fd)
                os.rename(temp, os.path.join(directory, f"syncbench.{i}"))
        return time.perf_counter() - t0, interrupts() - irq0
    finally:
        os.close(dir_fd)
        for name in os.listdir(directory):
            if name.startswith("syncbench."):
                os.unlink(os.path.join(directory, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True,
                    help="an existing directory on the file system to measure")
    ap.add_argument("--files", type=int, default=160, help="files per round (default 160)")
    ap.add_argument("--file-bytes", type=int, default=48 * 1024,
                    help="bytes per file (default 48 KiB)")
    ap.add_argument("--group", type=int, default=8,
                    help="files per group (default 8, the engine's write batch)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per mode, alternated (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        sys.exit(f"fs_sync_cost: --dir {args.dir}: not a directory")
    if min(args.files, args.file_bytes, args.group, args.rounds) < 1:
        sys.exit("fs_sync_cost: --files, --file-bytes, --group and --rounds must be at least 1")
    data = os.urandom(args.file_bytes)
    modes = ("fdatasync", "syncfs", "none")
    seen = {m: {"s": [], "interrupts": []} for m in modes}
    for _ in range(args.rounds):
        for m in modes:
            s, irq = one_round(args.dir, m, args.files, args.group, data)
            seen[m]["s"].append(s)
            seen[m]["interrupts"].append(irq)
    report = {
        "benchmark": "fs_sync_cost",
        "files": args.files, "file_bytes": args.file_bytes, "group": args.group,
        "rounds": args.rounds, "loadavg_1m": os.getloadavg()[0],
        "modes": {m: {"round_s_median": statistics.median(v["s"]),
                      "interrupts_median": statistics.median(v["interrupts"]),
                      "round_s": v["s"], "interrupts": v["interrupts"]} for m, v in seen.items()},
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for m in modes:
            r = report["modes"][m]
            print(f"{m:10s} {r['round_s_median'] * 1e3:8.1f} ms  "
                  f"{r['interrupts_median']:8.0f} interrupts")


if __name__ == "__main__":
    main()
