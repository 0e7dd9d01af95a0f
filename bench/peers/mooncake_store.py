#!/usr/bin/env python3
"""Mooncake Store against kvtier's remote tier (Redis) and host tier: put/get of KV-sized values.

Goal: the numbers a user weighing Mooncake Store against kvtier would ask for on one machine over
TCP loopback: bytes per second of put and get, and p50/p99 of one put and one get, at 256 KiB,
1 MiB and 4 MiB per value, with one and with several clients.

What runs (all on 127.0.0.1, each process bounded by coreutils `timeout`):
  - Mooncake (PyPI mooncake-transfer-engine-non-cuda): `mooncake_master` (metadata, allocation),
    one `mooncake_client` holding the memory segment (the store server, as redis-server is for
    kvtier), and client processes with no segment of their own, so every put and get moves the
    value over Mooncake's TCP transport to the holder's segment. Clients use Mooncake's fastest
    Python path: buffers registered with register_buffer, put_from / get_into (zero copy on the
    client side). Metadata goes peer to peer (P2PHANDSHAKE), no etcd.
  - kvtier remote tier: a redis-server of its own (no persistence). Each client opens a writer
    Engine (store = copy into its host tier + write-through put to Redis) and a reader Engine with
    an empty host tier and promote_on_load=False, so every get is a Redis GET, verified and
    decoded into the caller's buffer. Sealed values (AES-256-GCM, kvtier's default, keys from a
    0600 file made with kvtier.generate_remote_key) and, as a second system, plaintext
    (remote_insecure_plaintext=True), to show what the sealing costs.
  - kvtier host tier: one Engine per client, store then load in the same process.
One value = one block: layout layers=1, kv_heads=8, head_dim=128, f16, block_tokens = size/4 KiB.

Method: for each size and client count, every system runs once per round, in an order that
rotates between rounds (alternating, on a shared 2-core machine). A client process sets up, waits
at a barrier with the others, puts its values one at a time (each timed), waits again, then gets
them back one at a time (each timed, each checked byte for byte outside the timed part). Per round
throughput = all clients' bytes / (last client done - first client started). Latency percentiles
pool every op of every round (nearest rank: with fewer than 100 samples p99 is the maximum).
Medians over rounds, and ratios kvtier / Mooncake. The machine's memcpy and one loopback TCP
stream are measured in the same run as ceilings.

  python3 bench/peers/mooncake_store.py [--json] [--rounds 5] [--sizes 256KiB,1MiB,4MiB]
      [--clients 1,4] [--bytes-per-client 32MiB]

The plot in docs/benchmarks.md is drawn from the --json report by bench/plot.py mooncake.

Installs mooncake-transfer-engine-non-cuda into .venv-peers when missing. Needs redis-server on
PATH and kvtier's Python module (--kvtier-python, default build/python). A benchmark, not a test.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peerlib  # noqa: E402
from peerlib import MIB, log  # noqa: E402

SYSTEMS = ("mooncake", "kvtier_redis_sealed", "kvtier_redis_plain", "kvtier_host")
MOONCAKE_SEGMENT = "1GB"
SETUP_TIMEOUT_S = 60


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="256KiB,1MiB,4MiB")
    p.add_argument("--clients", default="1,4")
    p.add_argument("--bytes-per-client", default="32MiB",
                   help="bytes each client puts per cell (at least 8 values)")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--kvtier-python", default=str(peerlib.KVTIER_PYTHON_DEFAULT))
    p.add_argument("--kvtier-cli", default=str(peerlib.KVTIER_CLI_DEFAULT),
                   help="for `kvtier bench remote` (pipelined, beside redis-benchmark); '' skips")
    p.add_argument("--deadline-s", type=int, default=1800,
                   help="no service started here lives longer than this")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    return p.parse_args()


# ---------------------------------------------------------------------------------------------
# One client process.

def _buffer_address(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


class MooncakeClient:
    def __init__(self, cfg: dict, size: int):
        from mooncake.store import MooncakeDistributedStore
        self.store = MooncakeDistributedStore()
        rc = self.store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                              cfg["master"])
        if rc != 0:
            raise RuntimeError(f"mooncake setup returned {rc}")
        self.size = size
        self.src, self.dst = cfg["src"], bytearray(size)
        self.ps, self.pd = _buffer_address(self.src), _buffer_address(self.dst)
        for ptr in (self.ps, self.pd):
            if self.store.register_buffer(ptr, size) != 0:
                raise RuntimeError("mooncake register_buffer failed")
        self.keys = [f"{cfg['tag']}-{i}" for i in range(cfg["ops"])]

    def put(self, i: int) -> None:
        rc = self.store.put_from(self.keys[i], self.ps, self.size)
        if rc != 0:
            raise RuntimeError(f"mooncake put_from returned {rc}")

    def get(self, i: int) -> None:
        n = self.store.get_into(self.keys[i], self.pd, self.size)
        if n != self.size:
            raise RuntimeError(f"mooncake get_into returned {n}")

    def close(self) -> None:
        # Frees the holder's segment for the next cell. force: this client's reads are over, but
        # their leases (10 s by default) would refuse a plain remove.
        self.store.batch_remove(self.keys, True)
        self.store.close()


class KvtierClient:
    def __init__(self, cfg: dict, size: int, system: str):
        import kvtier
        block_tokens = size // (2 * 8 * 128 * 2)
        layout = f"layers=1,kv_heads=8,head_dim=128,dtype=f16,block_tokens={block_tokens}"
        ops = cfg["ops"]
        if system == "kvtier_host":
            self.writer = kvtier.Engine(layout=layout, host_bytes=ops * size + 64 * MIB)
            self.reader = self.writer
        else:
            remote = dict(remote_endpoints=[f"127.0.0.1:{cfg['redis_port']}"])
            if system == "kvtier_redis_sealed":
                remote["remote_key_file"] = cfg["key_file"]
            else:
                remote["remote_insecure_plaintext"] = True
            self.writer = kvtier.Engine(layout=layout, host_bytes=64 * MIB, **remote)
            # An empty host tier and no promotion: every load is a GET from Redis.
            self.reader = kvtier.Engine(layout=layout, host_bytes=64 * MIB,
                                        promote_on_load=False, **remote)
        if self.writer.block_bytes != size:
            raise RuntimeError(f"block is {self.writer.block_bytes} bytes, wanted {size}")
        self.ns_w = self.writer.make_namespace(salt=cfg["tag"])
        self.ns_r = self.reader.make_namespace(salt=cfg["tag"])
        self.src, self.dst = cfg["src"], bytearray(size)
        # A distinct first token per value: no two values share a chunk key.
        self.tokens = [[100000 + i] + list(range(3, block_tokens + 2)) for i in range(ops)]

    def put(self, i: int) -> None:
        h = self.writer.store(self.ns_w, self.tokens[i], self.src)
        h.wait()
        if h.chunks_stored != 1:
            raise RuntimeError(f"kvtier store kept {h.chunks_stored} chunks")

    def get(self, i: int) -> None:
        h = self.reader.load(self.ns_r, self.tokens[i], self.dst)
        h.wait()
        if h.chunks != 1:
            raise RuntimeError(f"kvtier load found {h.chunks} chunks")

    def close(self) -> None:
        if self.reader is not self.writer:
            self.reader.close()
        self.writer.close()


def client_main(system: str, size: int, cfg: dict, barrier, results, log_path: str) -> None:
    # Mooncake logs through glog on stderr: keep it out of the report.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    out = {"put_s": [], "get_s": [], "error": ""}
    client = None
    try:
        cfg = dict(cfg, src=bytearray(os.urandom(size)))
        client = (MooncakeClient(cfg, size) if system == "mooncake"
                  else KvtierClient(cfg, size, system))
        barrier.wait(timeout=SETUP_TIMEOUT_S)
        cpu0 = peerlib.self_cpu_s()
        out["put_t0"] = time.perf_counter()
        for i in range(cfg["ops"]):
            t = time.perf_counter()
            client.put(i)
            out["put_s"].append(time.perf_counter() - t)
        out["put_t1"] = time.perf_counter()
        out["put_cpu_s"] = peerlib.self_cpu_s() - cpu0
        barrier.wait(timeout=SETUP_TIMEOUT_S)
        cpu0 = peerlib.self_cpu_s()
        out["get_t0"] = time.perf_counter()
        for i in range(cfg["ops"]):
            ctypes.memset(_buffer_address(client.dst), 0, size)  # a get must bring the bytes
            t = time.perf_counter()
            client.get(i)
            out["get_s"].append(time.perf_counter() - t)
            if client.dst != client.src:
                raise RuntimeError(f"value {i} came back different")
        out["get_t1"] = time.perf_counter()
        out["get_cpu_s"] = peerlib.self_cpu_s() - cpu0  # the byte checks are in it too
    except Exception as e:  # reported to the parent, which stops the run
        out["error"] = f"{type(e).__name__}: {e}"
        barrier.abort()
    finally:
        if client is not None:
            try:
                client.close()
            except Exception as e:
                out["error"] = out["error"] or f"close: {e}"
    results.put(out)


def run_cell(system: str, size: int, clients: int, ops: int, base_cfg: dict, tag: str,
             run_dir: Path, servers: list) -> dict:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(clients)
    results = ctx.Queue()
    procs = []
    server_cpu0 = sum(s.cpu_s() for s in servers)
    for c in range(clients):
        cfg = dict(base_cfg, ops=ops, tag=f"{tag}-c{c}")
        p = ctx.Process(target=client_main,
                        args=(system, size, cfg, barrier, results,
                              str(run_dir / f"client-{system}.log")), daemon=True)
        p.start()
        procs.append(p)
    outs = [results.get(timeout=SETUP_TIMEOUT_S + 600) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    server_cpu = sum(s.cpu_s() for s in servers) - server_cpu0
    errors = [o["error"] for o in outs if o["error"]]
    if errors:
        raise RuntimeError(f"{system} {peerlib.size_name(size)} x{clients}: {errors[0]}")
    total = clients * ops * size
    put_wall = max(o["put_t1"] for o in outs) - min(o["put_t0"] for o in outs)
    get_wall = max(o["get_t1"] for o in outs) - min(o["get_t0"] for o in outs)
    return {"put_GBps": total / put_wall / 1e9, "get_GBps": total / get_wall / 1e9,
            "client_put_cpu_s_per_GB": sum(o["put_cpu_s"] for o in outs) / (total / 1e9),
            "client_get_cpu_s_per_GB": sum(o["get_cpu_s"] for o in outs) / (total / 1e9),
            "server_cpu_s_per_GB": server_cpu / (2 * total / 1e9),
            "put_us": [x * 1e6 for o in outs for x in o["put_s"]],
            "get_us": [x * 1e6 for o in outs for x in o["get_s"]]}


# ---------------------------------------------------------------------------------------------
# Services.

def start_mooncake(run_dir: Path, deadline_s: int) -> tuple[list, str]:
    bin_dir = peerlib.VENV / "bin"
    master_port, metrics_port, holder_port = (peerlib.free_port() for _ in range(3))
    master = peerlib.Service(
        "mooncake_master",
        [str(bin_dir / "mooncake_master"), f"--rpc_port={master_port}",
         "--rpc_address=127.0.0.1", f"--metrics_port={metrics_port}", "--metrics_host=127.0.0.1",
         "--enable_metric_reporting=false"],
        run_dir / "mooncake_master.log", deadline_s, cwd=run_dir)
    master.wait_ready(master_port)
    addr = f"127.0.0.1:{master_port}"
    holder = peerlib.Service(
        "mooncake_client (segment holder)",
        [str(bin_dir / "mooncake_client"), "--host=127.0.0.1", f"--port={holder_port}",
         f"--global_segment_size={MOONCAKE_SEGMENT}", "--local_buffer_size=16MB",
         f"--master_server_address={addr}", "--metadata_server=P2PHANDSHAKE", "--protocol=tcp"],
        run_dir / "mooncake_holder.log", deadline_s, cwd=run_dir)
    holder.wait_ready(holder_port)
    return [holder, master], addr


def bench_remote(cli: str, port: int, size: int, key_file: str, deadline_s: int) -> dict:
    """`kvtier bench remote` on the same Redis: kvtier's pipelined put/get (8 values per
    pipeline), sealed and plaintext, beside redis-benchmark's SET/GET of the same value size,
    which is what this Redis itself can do on this machine."""
    argv = ["timeout", "--kill-after=5", str(min(deadline_s, 600)), cli, "bench", "remote",
            "--redis", f"127.0.0.1:{port}", "--block-bytes", str(size), "--total-bytes",
            str(max(64 * MIB, 16 * size)), "--rounds", "3", "--remote-key-file", key_file,
            "--json"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr[-500:]}"}
    j = json.loads(r.stdout)
    return {k: j[k] / 1e9 if k.endswith("bytes_per_s") else j[k]
            for k in ("put_bytes_per_s", "get_bytes_per_s", "plaintext_put_bytes_per_s",
                      "plaintext_get_bytes_per_s", "redis_benchmark_set_bytes_per_s",
                      "redis_benchmark_get_bytes_per_s", "batch", "rounds") if k in j}


def write_key_file(run_dir: Path) -> str:
    import kvtier
    path = run_dir / "remote.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(kvtier.generate_remote_key(1))
    return str(path)


# ---------------------------------------------------------------------------------------------

def summarize(per_round: dict, systems: list[str]) -> dict:
    cells = {}
    for key, by_system in per_round.items():
        cell = {}
        for s in systems:
            rounds = by_system[s]
            cell[s] = {
                "put_GBps_median": peerlib.median([r["put_GBps"] for r in rounds]),
                "get_GBps_median": peerlib.median([r["get_GBps"] for r in rounds]),
                "put_us_p50": peerlib.percentile([x for r in rounds for x in r["put_us"]], 50),
                "put_us_p99": peerlib.percentile([x for r in rounds for x in r["put_us"]], 99),
                "get_us_p50": peerlib.percentile([x for r in rounds for x in r["get_us"]], 50),
                "get_us_p99": peerlib.percentile([x for r in rounds for x in r["get_us"]], 99),
                "samples_per_op": sum(len(r["put_us"]) for r in rounds),
                **{k: peerlib.median([r[k] for r in rounds]) for k in (
                    "client_put_cpu_s_per_GB", "client_get_cpu_s_per_GB",
                    "server_cpu_s_per_GB")},
                "rounds": [{"put_GBps": r["put_GBps"], "get_GBps": r["get_GBps"],
                            "put_us_p50": peerlib.percentile(r["put_us"], 50),
                            "get_us_p50": peerlib.percentile(r["get_us"], 50)} for r in rounds],
            }
        if "mooncake" in cell:
            m = cell["mooncake"]
            cell["ratios_vs_mooncake"] = {
                s: {"put_GBps": peerlib.ratio(cell[s]["put_GBps_median"], m["put_GBps_median"]),
                    "get_GBps": peerlib.ratio(cell[s]["get_GBps_median"], m["get_GBps_median"]),
                    "put_us_p50": peerlib.ratio(cell[s]["put_us_p50"], m["put_us_p50"]),
                    "get_us_p50": peerlib.ratio(cell[s]["get_us_p50"], m["get_us_p50"])}
                for s in systems if s != "mooncake"}
        cells[key] = cell
    return cells


def start_services(args, systems: list[str], run_dir: Path):
    """The servers the systems need: Mooncake's master and segment holder, one Redis for the
    kvtier_redis systems and its key file. Returns (every service, system -> the services whose
    CPU time its cells are charged, the cells' base config, the Redis port or None)."""
    services = []
    servers = {}  # system -> the services whose CPU time its cells are charged
    base_cfg = {}
    if "mooncake" in systems:
        svc, base_cfg["master"] = start_mooncake(run_dir, args.deadline_s)
        services += svc
        servers["mooncake"] = svc
    redis_port = None
    if any(s.startswith("kvtier_redis") for s in systems):
        redis, redis_port = peerlib.start_redis(run_dir, args.deadline_s)
        services.append(redis)
        servers["kvtier_redis_sealed"] = servers["kvtier_redis_plain"] = [redis]
        base_cfg["redis_port"] = redis_port
        base_cfg["key_file"] = write_key_file(run_dir)
    return services, servers, base_cfg, redis_port


def run_rounds(args, systems: list[str], sizes: list[int], clients_list: list[int],
               per_client: int, base_cfg: dict, run_dir: Path, servers: dict, redis_port):
    """Every round's cells, the systems in an order that rotates from cell to cell. Returns
    ({cell key: {system: [one result per round]}}, the retried cells)."""
    per_round = {}
    retries = []
    cell_keys = [(size, clients) for size in sizes for clients in clients_list]
    for r in range(args.rounds):
        for ci, (size, clients) in enumerate(cell_keys):
            ops = max(8, per_client // size)
            key = f"{peerlib.size_name(size)} x{clients}"
            shift = (r + ci) % len(systems)
            order = systems[shift:] + systems[:shift]
            for s in order:
                try:
                    res = run_cell(s, size, clients, ops, base_cfg,
                                   f"r{r}-{s}-{size}-{clients}", run_dir, servers.get(s, []))
                except RuntimeError as e:  # once more, with new keys, then give up
                    log(f"round {r + 1} {key} {s}: {e}; retrying once")
                    retries.append(f"round {r + 1} {key} {s}: {e}")
                    res = run_cell(s, size, clients, ops, base_cfg,
                                   f"r{r}-{s}-{size}-{clients}-retry", run_dir,
                                   servers.get(s, []))
                per_round.setdefault(key, {}).setdefault(s, []).append(res)
                if redis_port and s.startswith("kvtier_redis"):
                    peerlib.redis_command(redis_port, "FLUSHALL")
                log(f"round {r + 1}/{args.rounds} {key:>10} {s:<20} put "
                    f"{res['put_GBps']:.3f} GB/s get {res['get_GBps']:.3f} GB/s "
                    f"(p50 put {peerlib.median(res['put_us']):.0f} us, "
                    f"get {peerlib.median(res['get_us']):.0f} us)")
    return per_round, retries


def bench_pipelined(args, redis_port: int, sizes: list[int], key_file: str) -> dict:
    """`kvtier bench remote` against the same Redis, per value size (GB/s)."""
    pipelined = {}
    for size in sizes:
        pipelined[peerlib.size_name(size)] = bench_remote(
            args.kvtier_cli, redis_port, size, key_file, args.deadline_s)
        peerlib.redis_command(redis_port, "FLUSHALL")
        log(f"kvtier bench remote {peerlib.size_name(size)} (GB/s): "
            f"{peerlib.rounded(pipelined[peerlib.size_name(size)])}")
    return pipelined


def main() -> None:
    args = parse_args()
    peerlib.ensure_venv([("mooncake.store", "mooncake-transfer-engine-non-cuda")],
                        Path(args.kvtier_python))
    import kvtier
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            sys.exit(f"unknown system {s}; known: {', '.join(SYSTEMS)}")
    sizes = [peerlib.parse_bytes(s) for s in args.sizes.split(",")]
    clients_list = [int(c) for c in args.clients.split(",")]
    per_client = peerlib.parse_bytes(args.bytes_per_client)
    run_dir = Path(tempfile.mkdtemp(prefix="kvtier-peers-mooncake-"))
    log(f"mooncake_store: run directory {run_dir}")

    limits = {"memcpy_GBps": {peerlib.size_name(s): peerlib.memcpy_gbps(s) for s in sizes},
              "loopback_tcp_one_stream_GBps": peerlib.loopback_tcp_gbps()}
    log(f"mooncake_store: machine limits {peerlib.rounded(limits)}")

    services, servers, base_cfg, redis_port = start_services(args, systems, run_dir)
    t_start = time.monotonic()
    try:
        per_round, retries = run_rounds(args, systems, sizes, clients_list, per_client, base_cfg,
                                        run_dir, servers, redis_port)
        pipelined = {}
        if redis_port and args.kvtier_cli and Path(args.kvtier_cli).is_file():
            pipelined = bench_pipelined(args, redis_port, sizes, base_cfg["key_file"])
    finally:
        for svc in services:
            svc.stop()

    cells = summarize(per_round, systems)
    report = {
        "benchmark": "mooncake_store",
        "versions": {"mooncake-transfer-engine-non-cuda":
                     peerlib.package_version("mooncake-transfer-engine-non-cuda"),
                     "kvtier": kvtier.__version__, "redis": peerlib.redis_version()},
        "config": {"rounds": args.rounds, "sizes": [peerlib.size_name(s) for s in sizes],
                   "clients": clients_list, "bytes_per_client": per_client,
                   "systems": systems, "cpus": os.cpu_count(),
                   "mooncake_segment": MOONCAKE_SEGMENT},
        "machine_limits": limits,
        "cells": cells,
        "kvtier_bench_remote_GBps": pipelined,
        "retried_cells": retries,
        "elapsed_s": time.monotonic() - t_start,
    }
    if args.json:
        print(peerlib.dump_json(report))
    else:
        print_table(cells, systems, limits)
    if not args.keep:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)


def print_table(cells: dict, systems: list[str], limits: dict) -> None:
    print(f"machine: memcpy {peerlib.rounded(limits['memcpy_GBps'])} GB/s, one loopback TCP "
          f"stream {limits['loopback_tcp_one_stream_GBps']:.2f} GB/s")
    print(f"{'cell':<11} {'system':<21} {'put GB/s':>9} {'get GB/s':>9} {'put p50/p99 us':>16} "
          f"{'get p50/p99 us':>16}")
    for key, cell in cells.items():
        for s in systems:
            c = cell[s]
            print(f"{key:<11} {s:<21} {c['put_GBps_median']:>9.3f} {c['get_GBps_median']:>9.3f} "
                  f"{c['put_us_p50']:>7.0f}/{c['put_us_p99']:<8.0f} "
                  f"{c['get_us_p50']:>7.0f}/{c['get_us_p99']:<8.0f}")


if __name__ == "__main__":
    main()
