#!/usr/bin/env python3
"""Storage tiers without an engine: LMCache's `lmcache bench l2` beside kvtier's tier benchmarks.

Goal: put and get throughput and per-value time of the storage below each cache, on the same
object sizes, the same directory and the same Redis, in one run that alternates the two sides.

What runs, per object size (--sizes, default 256 KiB, 1 MiB and 2 MiB) and round (--rounds; which
side goes first alternates between rounds):
  disk   LMCache's `fs` L2 adapter (`lmcache bench l2 --l2-adapter '{"type": "fs", ...}'`: one file
         per key, buffered I/O) and its `fs_native` adapter (its native file I/O), each on a fresh
         directory under --dir; kvtier's SSD tier (`kvtier bench ssd`: a log of segments, O_DIRECT,
         io_uring, queue depth 16, then a cold read) on another fresh directory under --dir.
  files  the same LMCache `fs` runs against kvtier's fs tier (`kvtier bench remote --fs-dir
         --no-fsync`: one file per block through the page cache, published by rename without a
         sync, as LMCache's adapter writes; sealed and plaintext, every read verified) and plain
         files of the same sizes written, renamed and read back without checks (the directory's
         own rate for this pattern), on a fresh directory under --dir.
  Redis  LMCache's `resp` adapter and kvtier's remote tier (`kvtier bench remote`: sealed with
         AES-256-GCM and plaintext, beside redis-benchmark's SET and GET of the same value size,
         the server's own limit) on one redis-server of this script's, flushed between runs.
kvtier's commands run --lmcache-rounds + 1 rounds and report their medians (LMCache's run has a
warmup round and --lmcache-rounds timed ones). Each LMCache run stores --keys keys per submit,
--in-flight submits per round, --lmcache-rounds
timed rounds after a warmup round, then looks them up and loads them back, verifying the bytes
(--no-skip-verify); kvtier moves the same bytes per run (keys x in-flight x size, 256 MiB at 1 MiB).
LMCache reports per-round durations: its throughput here is the round bytes over the median round
(the p50 it reports), its per-value time the median round over the keys of a round. kvtier's
figures are its commands' own (bytes over the timed phase; per-value time: size over throughput).

Honest differences, which the report keeps beside the numbers: LMCache's `fs` adapter writes
through the page cache and reads what it just wrote back (from memory unless evicted); kvtier's
SSD tier reads with O_DIRECT after a cold reopen, so its get is the disk's, never the page
cache's. `fio` on the same directory gives the disk's own limit in the same run.

  /usr/bin/python3 bench/peers/lmcache_l2.py [--json] [--sizes 256KiB,1MiB,2MiB] [--rounds 3]
      [--dir DIR] [--smoke]

Environment: .venv-lmcache (bench/peers/lmcache_vllm.py's; made on first use by
peerlib.ensure_overlay_venv), redis-server and redis-benchmark on PATH, fio, kvtier built in build/.
A benchmark, not a test.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peerlib  # noqa: E402
from peerlib import log  # noqa: E402

sys.path.insert(0, str(peerlib.REPO / "bench"))
import lmcache_vllm  # noqa: E402  (LMCache's environment: packages, imports, venv)

MIB = 1 << 20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--sizes", default="256KiB,1MiB,2MiB")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keys", type=int, default=32, help="LMCache: keys per submit")
    p.add_argument("--in-flight", type=int, default=8, help="LMCache: submits per round")
    p.add_argument("--lmcache-rounds", type=int, default=2, help="LMCache: timed rounds per run")
    p.add_argument("--dir", type=Path, help="where the disk runs write (default: a temporary "
                   "directory under /var/tmp, which is on the disk here)")
    p.add_argument("--kvtier-cli", default=str(peerlib.KVTIER_CLI_DEFAULT))
    p.add_argument("--deadline-s", type=int, default=3600)
    p.add_argument("--smoke", action="store_true", help="one round of 256 KiB, few keys")
    args = p.parse_args()
    if args.smoke:
        args.sizes, args.rounds, args.keys, args.in_flight, args.lmcache_rounds = \
            "256KiB", 1, 8, 2, 1
    return args


def lmcache_run(args, adapter: dict, size: int, work: Path, name: str) -> dict:
    """One `lmcache bench l2` run: store, lookup, load (verified); its median rounds."""
    out = work / f"{name}.json"
    argv = [str(lmcache_vllm.LMCACHE_VENV / "bin" / "lmcache"), "bench", "l2",
            "--l2-adapter", json.dumps(adapter), "--num-keys", str(args.keys),
            "--in-flight", str(args.in_flight), "--data-size-kb", str(size // 1024),
            "--rounds", str(args.lmcache_rounds), "--warmup-rounds", "1", "--no-skip-verify",
            "--lookup-max-hit-rate", "1.0", "--format", "json", "--output", str(out), "-q"]
    env = dict(os.environ, LMCACHE_DISABLE_BANNER="1")
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=args.deadline_s)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"{name}: lmcache bench l2 exited {r.returncode}: {r.stderr[-1500:]}")
    metrics = json.loads(out.read_text())["metrics"]
    round_bytes = args.keys * args.in_flight * size
    ops = {m["operation"]: m for k, m in metrics.items() if k.startswith("op_")}
    res = {}
    for op, key in (("Store", "put"), ("Load", "get")):
        m = ops[op]
        if m["total_success"] != m["total_keys"]:
            raise RuntimeError(f"{name}: {op} succeeded for {m['total_success']} of "
                               f"{m['total_keys']} keys")
        p50_s = m["duration_p50_ms"] / 1000
        res[f"{key}_bytes_per_s"] = round_bytes / p50_s
        res[f"{key}_ms_per_value"] = 1000 * p50_s / (args.keys * args.in_flight)
    return res


def kvtier_ssd(args, size: int, directory: Path) -> dict:
    total = args.keys * args.in_flight * size
    r = subprocess.run([args.kvtier_cli, "bench", "ssd", "--dir", str(directory),
                        "--block-bytes", str(size), "--queue-depth", "16",
                        "--total-bytes", str(total), "--json"],
                       capture_output=True, text=True, timeout=args.deadline_s)
    if r.returncode != 0:
        raise RuntimeError(f"kvtier bench ssd exited {r.returncode}: {r.stderr[-1500:]}")
    d = json.loads(r.stdout)
    return {"put_bytes_per_s": d["write_bytes_per_s"], "get_bytes_per_s": d["read_bytes_per_s"],
            "put_ms_per_value": 1000 * size / d["write_bytes_per_s"],
            "get_ms_per_value": 1000 * size / d["read_bytes_per_s"],
            "get_p50_ms": d["read_p50_us"] / 1000, "direct_io": d["direct_io"]}


def kvtier_remote(args, size: int, port: int) -> dict:
    total = max(args.keys * args.in_flight * size, 8 * size)
    r = subprocess.run([args.kvtier_cli, "bench", "remote", "--redis", f"127.0.0.1:{port}",
                        "--block-bytes", str(size), "--total-bytes", str(total),
                        "--rounds", str(args.lmcache_rounds + 1),
                        "--json"], capture_output=True, text=True, timeout=args.deadline_s)
    if r.returncode != 0:
        raise RuntimeError(f"kvtier bench remote exited {r.returncode}: {r.stderr[-1500:]}")
    d = json.loads(r.stdout)
    out = {}
    for mode, prefix in (("sealed", ""), ("plaintext", "plaintext_")):
        for op in ("put", "get"):
            bps = d[f"{prefix}{op}_bytes_per_s"]
            out[f"{mode}_{op}_bytes_per_s"] = bps
            out[f"{mode}_{op}_ms_per_value"] = 1000 * size / bps
    out["redis_benchmark_set_bytes_per_s"] = d.get("redis_benchmark_set_bytes_per_s")
    out["redis_benchmark_get_bytes_per_s"] = d.get("redis_benchmark_get_bytes_per_s")
    # GET over as many distinct keys as kvtier's rounds read: the server's limit for that pattern
    # (one key stays hot in the server's CPU caches).
    out["redis_benchmark_get_distinct_bytes_per_s"] = d.get(
        "redis_benchmark_get_distinct_bytes_per_s")
    return out


def kvtier_fs(args, size: int, directory: Path) -> dict:
    """kvtier's fs tier (the remote tier on a directory, docs/fs_tier.md) on `directory`, sealed
    and plaintext, without a sync before each publish, as LMCache's `fs` adapter writes; beside
    plain files of the same sizes (its baseline)."""
    total = max(args.keys * args.in_flight * size, 8 * size)
    r = subprocess.run([args.kvtier_cli, "bench", "remote", "--fs-dir", str(directory),
                        "--no-fsync", "--block-bytes", str(size), "--total-bytes", str(total),
                        "--rounds", str(args.lmcache_rounds + 1), "--json"],
                       capture_output=True, text=True,
                       timeout=args.deadline_s)
    if r.returncode != 0:
        raise RuntimeError(f"kvtier bench remote --fs-dir exited {r.returncode}: "
                           f"{r.stderr[-1500:]}")
    d = json.loads(r.stdout)
    out = {}
    for mode, prefix in (("sealed", ""), ("plaintext", "plaintext_"), ("files", "files_")):
        for op in ("put", "get"):
            bps = d[f"{prefix}{op}_bytes_per_s"]
            out[f"{mode}_{op}_bytes_per_s"] = bps
            out[f"{mode}_{op}_ms_per_value"] = 1000 * size / bps
    return out


def fio_limits(directory: Path) -> dict:
    """The disk's sequential write and read with O_DIRECT, 1 MiB at queue depth 16."""
    out = {}
    for rw in ("write", "read"):
        r = subprocess.run(["fio", "--name=l2", f"--rw={rw}", "--bs=1m", "--iodepth=16",
                            "--ioengine=io_uring", "--direct=1", "--size=256m",
                            f"--directory={directory}", "--output-format=json"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            job = json.loads(r.stdout)["jobs"][0][rw]
            out[f"fio_{rw}_bytes_per_s"] = job["bw_bytes"]
    for f in directory.glob("l2.*"):
        f.unlink()
    return out


def measure(args, work: Path, disk: Path, port: int) -> dict:
    sizes = [peerlib.parse_bytes(s) for s in args.sizes.split(",") if s]
    samples = {}  # size -> cell -> [dict]

    def add(size, cell, value):
        samples.setdefault(size, {}).setdefault(cell, []).append(value)

    for r in range(args.rounds):
        for size in sizes:
            tag = f"r{r}_{peerlib.size_name(size)}"

            def lmcache_side():
                for kind in ("fs", "fs_native"):
                    d = disk / f"lmcache_{kind}_{tag}"
                    d.mkdir(parents=True)
                    add(size, f"lmcache_{kind}", lmcache_run(
                        args, {"type": kind, "base_path": str(d)}, size, work, f"{kind}_{tag}"))
                    shutil.rmtree(d, ignore_errors=True)
                peerlib.redis_command(port, "FLUSHALL")
                add(size, "lmcache_resp", lmcache_run(
                    args, {"type": "resp", "host": "127.0.0.1", "port": port}, size, work,
                    f"resp_{tag}"))
                peerlib.redis_command(port, "FLUSHALL")

            def kvtier_side():
                d = disk / f"kvtier_ssd_{tag}"
                add(size, "kvtier_ssd", kvtier_ssd(args, size, d))
                shutil.rmtree(d, ignore_errors=True)
                d = disk / f"kvtier_fs_{tag}"
                add(size, "kvtier_fs", kvtier_fs(args, size, d))
                shutil.rmtree(d, ignore_errors=True)
                peerlib.redis_command(port, "FLUSHALL")
                add(size, "kvtier_remote", kvtier_remote(args, size, port))
                peerlib.redis_command(port, "FLUSHALL")

            sides = [lmcache_side, kvtier_side] if r % 2 == 0 else [kvtier_side, lmcache_side]
            for side in sides:
                log(f"lmcache_l2: round {r}, {peerlib.size_name(size)}: {side.__name__}")
                side()
    return samples


COMPARISONS = (  # (measure, LMCache cell and key, kvtier cell and key)
    ("disk put (LMCache fs)", ("lmcache_fs", "put"), ("kvtier_ssd", "put")),
    ("disk get (LMCache fs)", ("lmcache_fs", "get"), ("kvtier_ssd", "get")),
    ("disk put (LMCache fs_native)", ("lmcache_fs_native", "put"), ("kvtier_ssd", "put")),
    ("disk get (LMCache fs_native)", ("lmcache_fs_native", "get"), ("kvtier_ssd", "get")),
    ("files put (kvtier fs tier sealed)", ("lmcache_fs", "put"), ("kvtier_fs", "sealed_put")),
    ("files get (kvtier fs tier sealed)", ("lmcache_fs", "get"), ("kvtier_fs", "sealed_get")),
    ("files put (kvtier fs tier plaintext)", ("lmcache_fs", "put"),
     ("kvtier_fs", "plaintext_put")),
    ("files get (kvtier fs tier plaintext)", ("lmcache_fs", "get"),
     ("kvtier_fs", "plaintext_get")),
    ("files put (plain files, the directory's own)", ("lmcache_fs", "put"),
     ("kvtier_fs", "files_put")),
    ("files get (plain files, the directory's own)", ("lmcache_fs", "get"),
     ("kvtier_fs", "files_get")),
    ("Redis put (kvtier sealed)", ("lmcache_resp", "put"), ("kvtier_remote", "sealed_put")),
    ("Redis get (kvtier sealed)", ("lmcache_resp", "get"), ("kvtier_remote", "sealed_get")),
    ("Redis put (kvtier plaintext)", ("lmcache_resp", "put"), ("kvtier_remote", "plaintext_put")),
    ("Redis get (kvtier plaintext)", ("lmcache_resp", "get"), ("kvtier_remote", "plaintext_get")),
)


def summarize(samples: dict) -> dict:
    out = {}
    for size, cells in samples.items():
        med = {cell: {k: peerlib.median([v[k] for v in vals])
                      for k in vals[0] if isinstance(vals[0][k], (int, float))
                      and not isinstance(vals[0][k], bool)}
               for cell, vals in cells.items()}
        rows = []
        for measure, (lc, lk), (kc, kk) in COMPARISONS:
            lm = med.get(lc, {}).get(f"{lk}_bytes_per_s")
            kv = med.get(kc, {}).get(f"{kk}_bytes_per_s")
            rows.append({"measure": measure, "lmcache_GBps": peerlib.rounded(lm and lm / 1e9),
                         "kvtier_GBps": peerlib.rounded(kv and kv / 1e9),
                         "kvtier_over_lmcache": peerlib.rounded(peerlib.ratio(kv, lm)),
                         "lmcache_ms_per_value": peerlib.rounded(
                             med.get(lc, {}).get(f"{lk}_ms_per_value")),
                         "kvtier_ms_per_value": peerlib.rounded(
                             med.get(kc, {}).get(f"{kk}_ms_per_value"))})
        out[peerlib.size_name(size)] = {"medians": med, "comparisons": rows,
                                        "rounds": {c: v for c, v in cells.items()}}
    return out


def main() -> int:
    args = parse_args()
    peerlib.ensure_overlay_venv(lmcache_vllm.LMCACHE_VENV, lmcache_vllm.VLLM_VENV,
                                lmcache_vllm.LMCACHE_PACKAGES, lmcache_vllm.LMCACHE_IMPORTS,
                                peerlib.KVTIER_PYTHON_DEFAULT)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="kvtier-lmcache-l2-"))
    try:
        disk = Path(tempfile.mkdtemp(prefix="kvtier-lmcache-l2-", dir=args.dir or "/var/tmp"))
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        sys.exit(f"lmcache_l2: cannot make a directory to write in under "
                 f"{args.dir or '/var/tmp'}: {e.strerror} (--dir names another)")
    try:
        redis, port = peerlib.start_redis(work, args.deadline_s)
        limits = fio_limits(disk) if shutil.which("fio") else {}
        samples = measure(args, work, disk, port)
        redis.stop()
    finally:
        shutil.rmtree(disk, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    report = {"benchmark": "lmcache_l2",
              "versions": {"lmcache": peerlib.package_version("lmcache"),
                           "redis": peerlib.redis_version()},
              "config": {"sizes": args.sizes, "rounds": args.rounds, "keys": args.keys,
                         "in_flight": args.in_flight, "lmcache_rounds": args.lmcache_rounds,
                         "kvtier_ssd_queue_depth": 16},
              "machine": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0], **limits},
              "sizes": summarize(samples), "wall_s": time.perf_counter() - started}
    if args.json:
        print(peerlib.dump_json(report))
    else:
        for size, entry in report["sizes"].items():
            print(f"== {size}")
            for row in entry["comparisons"]:
                print(f"  {row['measure']:32} kvtier {row['kvtier_GBps']} GB/s  LMCache "
                      f"{row['lmcache_GBps']} GB/s  ratio {row['kvtier_over_lmcache']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
