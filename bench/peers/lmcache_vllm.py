#!/usr/bin/env python3
"""LMCache and kvtier in the same vLLM (CPU build): time to first token of a cache hit, per tier.

Goal: what a user choosing between LMCache and kvtier as vLLM's KV cache would measure on one
machine: the same model, documents and vLLM settings as bench/vllm_ttft.py (a random-weight
Llama with TinyLlama-1.1B's shape from tests/vllm/make_model.py, byte tokenizer, bf16, 32-token
pages, vLLM's offline API, one generate() with max_tokens=1 per TTFT), through LMCache's
multiprocess mode (`lmcache server` + vLLM's LMCacheMPConnector, as LMCache's own CPU CI runs it)
and through kvtier's connector, for 1k, 2k and 4k-token documents.

Cells (LMCache against kvtier), each a median over rounds:
  recompute            no cache, vLLM's prefix cache off (the floor)
  vllm_prefix          vLLM's own prefix cache, same process (the ceiling)
  hit from memory, same vLLM process:
    lmcache_l1                         the LMCache server's L1 (shared memory)
    kvtier_host                        kvtier's host tier, connector in process
    kvtier_host_alone                  the same with no SSD or Redis tier below it (what the
                                       memory path costs without background writes)
    kvtier_host_ssd                    the same with the SSD tier below it and no Redis tier
    kvtier_service_host                kvtier's host tier through `kvtier serve`
  hit after a vLLM restart, the cache process kept:
    lmcache_server_after_vllm_restart  the same LMCache server, a new vLLM process
    kvtier_service_host_after_restart  the same `kvtier serve`, a new vLLM process
  hit after everything restarted (a new cache process and a new vLLM process):
    lmcache_fs_after_full_restart, lmcache_fs_native_after_full_restart   LMCache's L2 `fs`
                                       (Python, aiofiles) and `fs_native` (C++) on a directory
    kvtier_ssd_restart                 kvtier's SSD tier, connector in process
    kvtier_fs_restart                  kvtier's fs tier (one sealed file per chunk through the
                                       page cache, as LMCache's fs), stored by a vLLM of its own
  hit from Redis after everything restarted (a redis-server of its own, kept):
    lmcache_resp                       LMCache's L2 `resp`
    kvtier_redis_sealed, kvtier_redis_plain   kvtier's remote tier, sealed (AES-256-GCM) and
                                       plaintext
Hit size: kvtier's and vLLM's hits cover whole 32-token pages but the one holding the prompt's
last token, which vLLM computes; LMCache's cover every token but the last (it loads the partial
page too), so its hits compute 1 token where the others compute up to 32. The vllm_prefix
process also times the same documents cut to n - 31 tokens (its hit then leaves one token to
compute): the report's vllm_prefix_one_token_left, what that page costs.
Each round stores its own documents (a new seed per round) with a cold request in a process of
each side, then runs the processes whose hits it times; LMCache and kvtier processes alternate,
and which side goes first alternates between rounds. The LMCache store process runs a server
with L1 and every L2 (fs, fs_native, resp: LMCache's default L2 store policy writes each chunk to
all of them); each full-restart cell then starts a server with L1 and that one L2 only.

Correctness gate, per cell, as LMCache's CPU CI checks: every timed request reports a hit
(vLLM's num_cached_tokens) of at least its length less one chunk of that cache; a request of
GATE_TOKENS tokens per document at temperature 0 gives recompute's tokens (and every timed
request recompute's first token); a foreign prompt (no shared prefix) sent last reports no hit.
"Recompute's tokens" allows one thing: at the first step where they differ, recompute must have
nearly chosen the cache's token (within GATE_MARGIN nats of its top-1, from the log-probabilities
the recompute process records), and the steps after it are not compared. On random documents
this random-weight model's next-token distribution is nearly flat (top-2 margins of 0.01-1 nats),
and a prefill over loaded KV runs other attention kernels than one over the whole prompt, whose
rounding flips such near-ties: vLLM's own prefix cache flips them too, and is the gate's control
(it must pass). A cell that fails is reported as failed with the reasons, without its times; one
that cannot run (its process or server fails) with the error text. --from-raw evaluates the gate and the report again from the
processes a run kept in its --work-dir.

  bench/peers/lmcache_vllm.py [--json] [--lengths 1024,2048,4096] [--rounds 3] [--hit-repeats 3]
      [--layers 22] [--cells all|NAME,...] [--smoke] [--kvtier-background-priority nice|idle]
      [--kvtier-remote-write-policy through|back]

--smoke: one 512-token document, a 2-layer model, one round, hit-repeats 1: every cell and its
gate, exit status 1 when one fails (10 minutes on two busy cores, nearly all of it vLLM starting
14 processes; the first run adds the install, about a minute). A smoke run starts vLLM in one
process (its in-process mode, about 9 s against 16 s) except under LMCache's connector, which
fails to start that way. CI runs it with --cells lmcache_l1,kvtier_host (recompute, LMCache's L1
and kvtier's host tier: 3 processes, 55 s; tests/vllm/test_peer_lmcache_smoke.py).
--setup-only makes the environment and exits (scripts/setup_lmcache_venv.sh, which
`./run.sh test` runs).
Environment: `.venv-lmcache` at the repository root (git-ignored), made on first use by
peerlib.ensure_overlay_venv: a venv of its own that reads `.venv-vllm`'s packages (vLLM's CPU
build, made by scripts/setup_vllm_venv.sh) after its own, with lmcache and the three pure-Python
modules its server and connector import that vLLM's environment lacks installed `--no-deps`
(LMCache's pins, numpy <= 2.2.6 and protobuf < 7, would otherwise replace vLLM's). Needs
redis-server on PATH,
kvtier built in build/ (build/python, build/tools/cli/kvtier). A benchmark, not a test.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peerlib  # noqa: E402
from peerlib import log  # noqa: E402

sys.path.insert(0, str(peerlib.REPO / "bench"))
import vllm_ttft  # noqa: E402  (documents, warmups, KV size, kvtier's connector and service)

LMCACHE_PACKAGES = ["lmcache==0.5.6", "sortedcontainers==2.4.0", "aiofiles==25.1.0",
                    "opentelemetry-exporter-prometheus==0.66b2"]
LMCACHE_IMPORTS = ["lmcache.v1.multiprocess.server",
                   "lmcache.integration.vllm.lmcache_mp_connector",
                   "lmcache.v1.distributed.l2_adapters.fs_l2_adapter",
                   "opentelemetry.exporter.prometheus"]
LMCACHE_VENV = peerlib.REPO / ".venv-lmcache"
VLLM_VENV = peerlib.REPO / ".venv-vllm"
BLOCK = vllm_ttft.BLOCK_TOKENS
GATE_TOKENS = 8
# nats: recompute's top-1 leads a near-tie alternative by less (tokens_agree). vLLM's own prefix
# cache, right by construction, flipped a near-tie 0.56 nats behind (docs/benchmarks.md).
GATE_MARGIN = 1.0
GATE_TOP = 5  # log-probabilities the recompute process records per generated token
LMCACHE_L2_TYPES = ("fs", "fs_native", "resp")

CELLS = {  # name: (side, kind of hit); the order of the report's table
    "recompute": ("vllm", "floor"),
    "vllm_prefix": ("vllm", "ceiling"),
    "lmcache_l1": ("lmcache", "memory, same vLLM"),
    "kvtier_host": ("kvtier", "memory, same vLLM"),
    "kvtier_host_alone": ("kvtier", "memory, same vLLM"),
    "kvtier_host_ssd": ("kvtier", "memory, same vLLM"),
    "kvtier_service_host": ("kvtier", "memory, same vLLM"),
    "lmcache_server_after_vllm_restart": ("lmcache", "vLLM restarted, cache process kept"),
    "kvtier_service_host_after_restart": ("kvtier", "vLLM restarted, cache process kept"),
    "lmcache_fs_after_full_restart": ("lmcache", "everything restarted, disk"),
    "lmcache_fs_native_after_full_restart": ("lmcache", "everything restarted, disk"),
    "kvtier_ssd_restart": ("kvtier", "everything restarted, disk"),
    "kvtier_fs_restart": ("kvtier", "everything restarted, disk"),
    "lmcache_resp": ("lmcache", "everything restarted, Redis"),
    "kvtier_redis_sealed": ("kvtier", "everything restarted, Redis"),
    "kvtier_redis_plain": ("kvtier", "everything restarted, Redis"),
}
COMPARISONS = (  # (measure, LMCache cell, kvtier cell)
    ("hit from memory, same vLLM (in process)", "lmcache_l1", "kvtier_host"),
    ("hit from memory, same vLLM (in process, no tier below)", "lmcache_l1", "kvtier_host_alone"),
    ("hit from memory, same vLLM (in process, SSD below, no Redis)", "lmcache_l1",
     "kvtier_host_ssd"),
    ("hit from memory, same vLLM (through the cache service)", "lmcache_l1",
     "kvtier_service_host"),
    ("hit after a vLLM restart, cache process kept", "lmcache_server_after_vllm_restart",
     "kvtier_service_host_after_restart"),
    ("hit after a full restart, disk (LMCache fs)", "lmcache_fs_after_full_restart",
     "kvtier_ssd_restart"),
    ("hit after a full restart, disk (LMCache fs_native)", "lmcache_fs_native_after_full_restart",
     "kvtier_ssd_restart"),
    ("hit after a full restart, one file per chunk (LMCache fs, kvtier fs tier sealed)",
     "lmcache_fs_after_full_restart", "kvtier_fs_restart"),
    ("hit from Redis (kvtier sealed)", "lmcache_resp", "kvtier_redis_sealed"),
    ("hit from Redis (kvtier plaintext)", "lmcache_resp", "kvtier_redis_plain"),
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--smoke", action="store_true",
                   help="one 512-token document, 2 layers, one round, one hit per process")
    p.add_argument("--setup-only", action="store_true",
                   help="make LMCache's environment (.venv-lmcache) and exit "
                        "(scripts/setup_lmcache_venv.sh)")
    p.add_argument("--lengths", default="1024,2048,4096")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hit-repeats", type=int, default=3,
                   help="timed hits per document in the processes of the same-vLLM cells")
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--cells", default="all", help="comma-separated cell names, or all")
    p.add_argument("--lmcache-chunk-tokens", type=int, default=256,
                   help="lmcache server --chunk-size (LMCache's default 256)")
    p.add_argument("--lmcache-transfer-mode", default="engine_driven",
                   choices=("engine_driven", "lmcache_driven"),
                   help="LMCACHE_MP_TRANSFER_MODE of vLLM's workers: engine_driven (the worker "
                        "copies through the server's shared memory; LMCache's CPU default) or "
                        "lmcache_driven (the server copies through shared-memory handles)")
    p.add_argument("--kvtier-background-priority", choices=("nice", "idle"), default="nice",
                   help="the in-process kvtier cells' background_priority (docs/engine.md, "
                        "\"Background writes\")")
    p.add_argument("--kvtier-remote-write-policy", choices=("through", "back"),
                   default="through",
                   help="the in-process kvtier cells' remote_write_policy: through (the "
                        "default: a block is put to the remote tier when stored) or back (when "
                        "it leaves the host tier)")
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--work-dir", type=Path, help="keep logs here (else a temporary directory)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--from-raw", type=Path, metavar="WORK_DIR",
                   help="no measuring: the gate and the report again from the processes a run "
                        "kept in its --work-dir (give that run's --lengths, --rounds, --seed)")
    p.add_argument("--process-timeout-s", type=int, default=900)
    p.add_argument("--deadline-s", type=int, default=3600,
                   help="no service started here lives longer than this")
    p.add_argument("--kvtier-python", default=str(peerlib.KVTIER_PYTHON_DEFAULT))
    p.add_argument("--kvtier-cli", default=str(peerlib.KVTIER_CLI_DEFAULT))
    p.add_argument("--vllm-venv", type=Path, default=VLLM_VENV,
                   help="the environment with vLLM's CPU build (scripts/setup_vllm_venv.sh)")
    args = p.parse_args()
    if args.smoke:
        args.lengths, args.layers, args.rounds, args.hit_repeats = "512", 2, 1, 1
    return args


# ---------------------------------------------------------------------------------------------
# The worker: one vLLM process running a list of requests (bench/vllm_ttft.py's settings).

def worker(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(plan["kv_space_gib"])
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.update(plan.get("env", {}))
    from vllm import SamplingParams

    start = time.perf_counter()
    llm = vllm_ttft.make_llm(plan)
    startup_s = time.perf_counter() - start
    results = []
    for request in plan["requests"]:
        params = SamplingParams(temperature=0, max_tokens=request.get("max_tokens", 1),
                                logprobs=GATE_TOP if request.get("logprobs") else None)
        t0 = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": request["tokens"]}], params, use_tqdm=False)
        ttft_s = time.perf_counter() - t0
        entry = {"label": request["label"], "length": request["length"], "ttft_s": ttft_s,
                 "tokens": list(out[0].outputs[0].token_ids),
                 "cached_tokens": out[0].num_cached_tokens}
        if request.get("logprobs"):  # the top GATE_TOP [token, log-probability] of each step
            entry["top"] = [[[t, lp.logprob] for t, lp in step.items()]
                            for step in out[0].outputs[0].logprobs]
        results.append(entry)
    Path(plan["out"]).write_text(json.dumps({"startup_s": startup_s, "requests": results,
                                             "loadavg_1m": os.getloadavg()[0]}))
    del llm
    return 0


class Failed(Exception):
    """A process or a service that did not do its part; the cells it serves are reported with
    this text instead of times."""


def _tail(path: Path, lines: int = 12) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])


def run_vllm(ctx, name: str, requests: list[dict], prefix_caching: bool = False,
             connector: dict | None = None, env: dict | None = None) -> dict:
    # Smoke runs start vLLM in one process where they can: LMCache's connector fails to start in
    # vLLM's in-process mode (its kernel overrides), so its processes keep vLLM's three.
    lmcache = connector is not None and connector.get("kv_connector") != "KvtierConnector"
    plan = {"model": str(ctx.model_dir), "max_model_len": ctx.max_model_len,
            "kv_space_gib": ctx.kv_space_gib, "prefix_caching": prefix_caching,
            "connector": connector, "requests": requests, "env": env or {},
            "in_process": ctx.args.smoke and not lmcache,
            "out": str(ctx.work / f"{name}.out.json")}
    plan_path = ctx.work / f"{name}.plan.json"
    plan_path.write_text(json.dumps(plan))
    log(f"lmcache_vllm: {name}: vLLM process, {len(requests)} requests")
    t0 = time.perf_counter()
    log_path = ctx.work / f"{name}.log"
    with open(log_path, "wb") as out:
        try:
            proc = subprocess.run([sys.executable, __file__, "--worker", str(plan_path)],
                                  stdout=out, stderr=subprocess.STDOUT,
                                  timeout=ctx.process_timeout_s)
        except subprocess.TimeoutExpired:
            raise Failed(f"{name}: vLLM process ran past {ctx.process_timeout_s} s: "
                         + _tail(log_path))
    if proc.returncode != 0:
        raise Failed(f"{name}: vLLM exited with {proc.returncode}: " + _tail(log_path))
    result = json.loads(Path(plan["out"]).read_text())
    log(f"lmcache_vllm: {name}: done in {time.perf_counter() - t0:.0f} s "
        f"(vLLM startup {result['startup_s']:.0f} s)")
    return result


# ---------------------------------------------------------------------------------------------
# LMCache: its server (multiprocess mode) and vLLM's LMCacheMPConnector.

class LMCacheServer:
    """`lmcache server` on 127.0.0.1 (ZMQ requests, HTTP health and metrics), L1 in shared
    memory, the given L2 adapters; stopped with SIGTERM by pid."""

    def __init__(self, ctx, name: str, l2: list[dict]):
        # Free ports are picked, then bound by the server: another process may take one in
        # between ("Address already in use" in the server's log), so a start is tried 3 times.
        for attempt in range(3):
            self.port, self.http_port = peerlib.free_port(), peerlib.free_port()
            argv = [str(LMCACHE_VENV / "bin" / "lmcache"), "server", "--host", "127.0.0.1",
                    "--port", str(self.port), "--http-host", "127.0.0.1",
                    "--http-port", str(self.http_port), "--l1-size-gb", str(ctx.l1_gb),
                    "--eviction-policy", "LRU", "--chunk-size",
                    str(ctx.args.lmcache_chunk_tokens), "--supported-transfer-mode", "auto",
                    "--shm-name", f"lmcache_bench_{os.getpid()}_{self.port}"]
            for adapter in l2:
                argv += ["--l2-adapter", json.dumps(adapter)]
            env = dict(os.environ, LMCACHE_DISABLE_BANNER="1")
            log(f"lmcache_vllm: {name}: lmcache server, L2 {[a['type'] for a in l2] or 'none'}")
            self.svc = peerlib.Service(name, argv, ctx.work / f"{name}.log", ctx.args.deadline_s,
                                       env=env)
            if self._healthy(120):
                return
            tail = self.svc.log_tail(20)
            self.svc.stop()
            if "Address already in use" not in tail or attempt == 2:
                raise Failed(f"{name}: lmcache server not healthy within 120 s:\n{tail}")
            log(f"lmcache_vllm: {name}: a port was taken meanwhile; starting again")

    def _healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.http_port}/healthcheck"
        while time.monotonic() < deadline:
            if self.svc.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.5)
        return False

    def metric(self, prefix: str) -> float:
        """Sum of the Prometheus samples whose name starts with `prefix` (LMCache's CI reads
        lmcache_mp_l1_read_chunks_total and lmcache_mp_l1_write_chunks_total this way)."""
        url = f"http://127.0.0.1:{self.http_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = r.read().decode()
        except OSError:
            return float("nan")
        total = 0.0
        for line in body.splitlines():
            if line.startswith(prefix):
                try:
                    total += float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
        return total

    def connector(self) -> dict:
        return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
                "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                              "lmcache.mp.port": self.port}}

    def stop(self) -> None:
        self.svc.stop()



# ---------------------------------------------------------------------------------------------
# Requests and the correctness gate.

def foreign_request(seed: int) -> dict:
    """A prompt that shares no prefix with any document: random tokens from a seed of its own."""
    req = vllm_ttft.warmup_requests(10_000 + seed)[1]
    return {**req, "label": "foreign"}


def doc(docs: dict, label: str, n: int, max_tokens: int = 1) -> dict:
    return {"label": label, "length": n, "tokens": docs[n], "max_tokens": max_tokens}


def tail_requests(docs: dict, seed: int) -> list[dict]:
    """The gate's requests, sent after the timed ones: GATE_TOKENS tokens of every document at
    temperature 0, then a foreign prompt."""
    return [doc(docs, "gate", n, GATE_TOKENS) for n in sorted(docs)] + [foreign_request(seed)]


def tokens_agree(tokens: list[int], ref: dict) -> tuple[bool, str]:
    """Whether a cache's tokens are recompute's, up to a near-tie: at the first step where they
    differ, recompute itself must have nearly chosen the cache's token (its log-probability
    within GATE_MARGIN of recompute's top-1; the bf16 rounding of another attention path flips
    such ties: a prefill on loaded KV runs other kernels than one over the whole prompt, and
    this random-weight model's next-token distribution on random documents is nearly flat).
    The steps after a tie are not compared (the continuations differ). (agree, how)"""
    for i, (mine, theirs) in enumerate(zip(tokens, ref["tokens"])):
        if mine == theirs:
            continue
        top = dict((t, lp) for t, lp in ref["top"][i]) if ref.get("top") else {}
        if mine in top and max(top.values()) - top[mine] < GATE_MARGIN:
            return True, (f"equal to token {i}, then a near-tie ({mine} instead of {theirs}, "
                          f"{max(top.values()) - top[mine]:.3f} nats behind)")
        lead = f"{max(top.values()) - top[mine]:.2f} nats behind" if mine in top else \
            f"not in recompute's top {GATE_TOP}"
        return False, f"token {i} is {mine}, recompute's {theirs} ({lead})"
    return True, "equal"


def check_gate(result: dict, cell: str, reference: dict | None, granularity: int | None,
               notes: list[str]) -> list[str]:
    """The gate's failures for the requests of `cell` in one process's result (empty: passed);
    appends to `notes` how each gate request agreed. reference: length -> {"tokens", "top"} of
    the recompute process's GATE_TOKENS tokens; granularity: the cache's unit of a hit (a page
    for kvtier and vLLM, a chunk for LMCache), None for no cache."""
    failures = []
    if reference is None:
        return ["no reference tokens (the recompute process failed)"]
    for r in result["requests"]:
        n, label, cached = r["length"], r["label"], r["cached_tokens"]
        if label in ("warmup", "foreign") and cached:
            failures.append(f"{label} prompt of {n} tokens reported {cached} cached tokens "
                            f"(expected a miss)")
        elif label == cell:
            if granularity is None and cached:
                failures.append(f"{n}: {cached} cached tokens without a cache")
            elif granularity is not None and (cached or 0) < n - granularity:
                failures.append(f"{n}: {cached} cached tokens, expected at least "
                                f"{n - granularity} (a hit)")
            agree, how = tokens_agree(r["tokens"][:1], reference[n])
            if not agree:
                failures.append(f"{n}: first {how}")
        elif label == "gate":
            agree, how = tokens_agree(r["tokens"], reference[n])
            notes.append(f"{n}: {how}")
            if not agree:
                failures.append(f"{n}: {how}")
    return failures


class Results:
    """Times, cached tokens and gate failures per cell and length, over rounds."""

    def __init__(self, lengths: list[int]):
        self.lengths = lengths
        self.samples = {}   # cell -> length -> [ttft_s]
        self.cached = {}    # cell -> length -> [cached tokens]
        self.failures = {}  # cell -> [text]
        self.errors = {}    # cell -> [text]
        self.stores = {}    # side -> length -> [ttft_s of the request that stored]
        self.one_token = {}  # length -> [vLLM prefix hit of n - BLOCK + 1 tokens]
        self.notes = {}  # cell -> how its gate requests' tokens agreed with recompute's

    def add(self, cell: str, result: dict, reference: dict | None, granularity: int | None):
        """One process's requests: the timed ones of `cell`, the stores ("store:SIDE"), and
        the gate of `cell` ("-": a process that only stores)."""
        notes = []
        failures = check_gate(result, cell, reference, granularity, notes) \
            if cell != "-" else []
        if notes:
            self.notes.setdefault(cell, []).extend(notes)
        if failures:
            self.failures.setdefault(cell, []).extend(failures)
        for r in result["requests"]:
            if r["label"] == cell:
                self.samples.setdefault(cell, {}).setdefault(r["length"], []).append(r["ttft_s"])
                self.cached.setdefault(cell, {}).setdefault(r["length"], []).append(
                    r["cached_tokens"])
            elif r["label"].startswith("store:"):
                self.stores.setdefault(r["label"][6:], {}).setdefault(r["length"], []).append(
                    r["ttft_s"])
        if cell != "-":
            log(f"lmcache_vllm: {cell}: gate "
                + ("passed" if not failures else "FAILED: " + "; ".join(failures)))

    def error(self, cells: list[str], text: str):
        log(f"lmcache_vllm: {', '.join(cells)}: could not run: {text}")
        for c in cells:
            self.errors.setdefault(c, []).append(text)


# ---------------------------------------------------------------------------------------------
# One round: each side stores the round's documents, then the processes that time its hits.

class Context:
    def __init__(self, args, work: Path, lengths: list[int]):
        self.args = args
        self.work = work
        self.model_dir = args.model_dir
        self.max_model_len = max(lengths) + 2 * BLOCK
        self.per_token = vllm_ttft.kv_bytes_per_token(args.model_dir)
        self.kv_space_gib = max(1, -(-3 * sum(lengths) * self.per_token // (1 << 30)))
        self.l1_gb = max(1, -(-4 * sum(lengths) * self.per_token // (1 << 30)))
        self.process_timeout_s = args.process_timeout_s
        self.service_bin = Path(args.kvtier_cli)  # for vllm_ttft.NodeService


# Connector keys every in-process kvtier cell gets (--kvtier-background-priority,
# --kvtier-remote-write-policy).
KVTIER_EXTRA: dict = {}


def kvtier_connector(rdir: Path, ssd: bool, remote: dict | None) -> dict:
    (rdir / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    cfg = vllm_ttft.connector_config(rdir / "kvtier_ssd", rdir / "run", rdir / "kvtier.stats.json")
    extra = cfg["kv_connector_extra_config"]
    extra.update(KVTIER_EXTRA)
    if not ssd:
        del extra["ssd_dirs"], extra["ssd_bytes"], extra["ssd_segment_bytes"]
    extra.update(remote or {})
    return cfg


def lmcache_steps(ctx, res: Results, r: int, docs: dict, ref, want, redis_port) -> list:
    """LMCache's processes of round r, in order, as closures."""
    rdir = ctx.work / f"r{r}"
    n = sorted(docs)
    chunk = ctx.args.lmcache_chunk_tokens
    env = {"LMCACHE_MP_TRANSFER_MODE": ctx.args.lmcache_transfer_mode,
           "LMCACHE_DISABLE_BANNER": "1"}
    l2 = {"fs": {"type": "fs", "base_path": str(rdir / "lmcache_fs")},
          "fs_native": {"type": "fs_native", "base_path": str(rdir / "lmcache_fs_native")},
          "resp": {"type": "resp", "host": "127.0.0.1", "port": redis_port}}
    state = {}

    def hits(label, repeats):
        return [doc(docs, label, k) for _ in range(repeats) for k in n]

    def first():
        cells = ["lmcache_l1", "lmcache_server_after_vllm_restart"]
        if not {c for c in CELLS if CELLS[c][0] == "lmcache"} & want:
            return
        try:
            state["server"] = LMCacheServer(ctx, f"r{r}_lmcache_server", list(l2.values()))
            reqs = (vllm_ttft.warmup_requests(100 + r) + [doc(docs, "store:lmcache", k) for k in n]
                    + hits("lmcache_l1", ctx.args.hit_repeats) + tail_requests(docs, 100 + r))
            if "lmcache_l1" in want:
                res.add("lmcache_l1", run_vllm(ctx, f"r{r}_lmcache_l1", reqs,
                                               connector=state["server"].connector(), env=env),
                        ref, chunk)
            else:
                run_vllm(ctx, f"r{r}_lmcache_store", reqs[:2 + len(n)],
                         connector=state["server"].connector(), env=env)
        except Failed as e:
            res.error(cells, str(e))
            state.pop("server", None)

    def restart():
        server = state.pop("server", None)
        if server is None:
            return
        try:
            if "lmcache_server_after_vllm_restart" in want:
                reqs = (vllm_ttft.warmup_requests(110 + r)
                        + hits("lmcache_server_after_vllm_restart", 1)
                        + tail_requests(docs, 110 + r))
                res.add("lmcache_server_after_vllm_restart",
                        run_vllm(ctx, f"r{r}_lmcache_server_after_vllm_restart", reqs,
                                 connector=server.connector(), env=env), ref, chunk)
            state["l1_read_chunks"] = server.metric("lmcache_mp_l1_read_chunks")
        except Failed as e:
            res.error(["lmcache_server_after_vllm_restart"], str(e))
        finally:
            server.stop()

    def full_restart(kind, cell):
        def step():
            if cell not in want:
                return
            try:
                server = LMCacheServer(ctx, f"r{r}_{cell}_server", [l2[kind]])
                try:
                    reqs = (vllm_ttft.warmup_requests(120 + r) + hits(cell, 1)
                            + tail_requests(docs, 120 + r))
                    res.add(cell, run_vllm(ctx, f"r{r}_{cell}", reqs,
                                           connector=server.connector(), env=env), ref, chunk)
                finally:
                    server.stop()
            except Failed as e:
                res.error([cell], str(e))
        return step

    return [first, restart, full_restart("fs", "lmcache_fs_after_full_restart"),
            full_restart("fs_native", "lmcache_fs_native_after_full_restart"),
            full_restart("resp", "lmcache_resp")]


class _KvtierRound:
    """kvtier's processes of round r (kvtier_steps): each step a method, in the order
    kvtier_steps lists them."""

    def __init__(self, ctx, res: Results, r: int, docs: dict, ref, want, redis_port,
                 key_file: str):
        self.ctx, self.res, self.r, self.docs, self.ref, self.want = ctx, res, r, docs, ref, want
        self.rdir = ctx.work / f"r{r}"
        self.n = sorted(docs)
        self.sealed = {"remote_endpoints": [f"127.0.0.1:{redis_port}"],
                       "remote_key_file": key_file}
        self.plain = {"remote_endpoints": [f"127.0.0.1:{redis_port}"],
                      "remote_insecure_plaintext": True,
                      "salt": "plaintext"}  # its own keys: sealed and plaintext values never meet
        # The fs tier (docs/fs_tier.md) on a directory of its own, sealed, with a salt of its
        # own so that its chunks are never found in another cell's tiers.
        self.fs = {"fs_dir": str(self.rdir / "kvtier_fs"), "remote_key_file": key_file,
                   "salt": "fs"}
        self.service = None  # The node service between its first step and its restart.

    def hits(self, label, repeats):
        return [doc(self.docs, label, k) for _ in range(repeats) for k in self.n]

    def run(self, cell, name, reqs, connector):
        try:
            self.res.add(cell, run_vllm(self.ctx, name, reqs, connector=connector), self.ref,
                         BLOCK)
        except Failed as e:
            self.res.error([cell], str(e))

    def host(self):
        # Stores into the host tier, the SSD tier (flushed when vLLM exits) and Redis (sealed).
        if not {"kvtier_host", "kvtier_ssd_restart", "kvtier_redis_sealed"} & self.want:
            return
        r, docs = self.r, self.docs
        reqs = (vllm_ttft.warmup_requests(200 + r)
                + [doc(docs, "store:kvtier", k) for k in self.n]
                + self.hits("kvtier_host", self.ctx.args.hit_repeats)
                + tail_requests(docs, 200 + r))
        self.run("kvtier_host", f"r{r}_kvtier_host", reqs,
                 kvtier_connector(self.rdir, True, self.sealed))

    def host_below(self, cell, ssd, seed):
        # The host tier with only some tiers below it (diagnostic cells: what the writes below
        # the host tier cost the hits timed right after the stores).
        def step():
            if cell not in self.want:
                return
            r, docs = self.r, self.docs
            reqs = (vllm_ttft.warmup_requests(seed + r)
                    + [doc(docs, f"store:{cell}", k) for k in self.n]
                    + self.hits(cell, self.ctx.args.hit_repeats) + tail_requests(docs, seed + r))
            self.run(cell, f"r{r}_{cell}", reqs, kvtier_connector(self.rdir / cell, ssd, None))
        return step

    def service_start_and_hits(self):
        cells = ["kvtier_service_host", "kvtier_service_host_after_restart"]
        if not set(cells) & self.want:
            return
        r, docs, rdir = self.r, self.docs, self.rdir
        try:
            svc = vllm_ttft.NodeService(self.ctx, rdir)
            svc.start()
        except (SystemExit, OSError) as e:
            self.res.error(cells, f"kvtier serve did not start: {e}")
            return
        self.service = svc
        reqs = (vllm_ttft.warmup_requests(210 + r)
                + [doc(docs, "store:kvtier_service", k) for k in self.n]
                + self.hits("kvtier_service_host", self.ctx.args.hit_repeats)
                + tail_requests(docs, 210 + r))
        self.run("kvtier_service_host", f"r{r}_kvtier_service_host", reqs,
                 svc.connector(rdir / "service.stats.json"))

    def service_restart(self):
        svc, self.service = self.service, None
        if svc is None:
            return
        r = self.r
        try:
            reqs = (vllm_ttft.warmup_requests(220 + r)
                    + self.hits("kvtier_service_host_after_restart", 1)
                    + tail_requests(self.docs, 220 + r))
            self.run("kvtier_service_host_after_restart",
                     f"r{r}_kvtier_service_host_after_restart", reqs,
                     svc.connector(self.rdir / "service.stats.json"))
        finally:
            svc.stop()

    def restart(self, cell, ssd, remote):
        def step():
            if cell not in self.want:
                return
            r, rdir = self.r, self.rdir
            reqs = (vllm_ttft.warmup_requests(230 + r) + self.hits(cell, 1)
                    + tail_requests(self.docs, 230 + r))
            self.run(cell, f"r{r}_{cell}", reqs, kvtier_connector(rdir / cell, ssd, remote)
                     if not ssd else kvtier_connector(rdir, ssd, remote))
        return step

    def store_only(self, cell, label, remote, seed):
        """A vLLM process that only stores the round's documents through `remote` (no SSD), for
        `cell`'s restart to find."""
        def step():
            if cell not in self.want:
                return
            r = self.r
            reqs = (vllm_ttft.warmup_requests(seed + r)
                    + [doc(self.docs, f"store:{label}", k) for k in self.n])
            try:
                run_vllm(self.ctx, f"r{r}_{label}_store", reqs,
                         connector=kvtier_connector(self.rdir / f"{label}_store", False, remote))
            except Failed as e:
                self.res.error([cell], str(e))
        return step

def kvtier_steps(ctx, res: Results, r: int, docs: dict, ref, want, redis_port,
                 key_file: str) -> list:
    """kvtier's processes of round r, in order, as callables."""
    k = _KvtierRound(ctx, res, r, docs, ref, want, redis_port, key_file)
    return [k.host, k.host_below("kvtier_host_alone", False, 205),
            k.host_below("kvtier_host_ssd", True, 207), k.service_start_and_hits,
            k.service_restart, k.restart("kvtier_ssd_restart", True, None),
            k.restart("kvtier_redis_sealed", False, k.sealed),
            k.store_only("kvtier_redis_plain", "kvtier_redis_plain", k.plain, 240),
            k.restart("kvtier_redis_plain", False, k.plain),
            k.store_only("kvtier_fs_restart", "kvtier_fs", k.fs, 250),
            k.restart("kvtier_fs_restart", False, k.fs)]



# ---------------------------------------------------------------------------------------------
# vLLM alone: recompute (the floor, and the gate's reference tokens) and its prefix cache.

def split_rounds(result: dict, rounds: int) -> list[dict]:
    """One process's requests (each tagged with its round) as one result per round."""
    out = [{"requests": []} for _ in range(rounds)]
    for req in result["requests"]:
        if req.get("round", 0) < rounds:  # --from-raw may read fewer rounds than were run
            out[req.get("round", 0)]["requests"].append(req)
    return out


def vllm_alone(ctx, res: Results, all_docs: list[dict], prefix: bool, refs: list) -> None:
    cell = "vllm_prefix" if prefix else "recompute"
    reqs = vllm_ttft.warmup_requests(300 + prefix)
    for r, docs in enumerate(all_docs):
        n = sorted(docs)
        mine = [doc(docs, "store:vllm", k) for k in n] if prefix else []
        mine += [doc(docs, cell, k) for _ in range(ctx.args.hit_repeats if prefix else 1)
                 for k in n]
        mine += [{**doc(docs, "gate", k, GATE_TOKENS), "logprobs": not prefix} for k in n]
        if prefix:  # The same hit with one token left to compute instead of a page.
            mine += [{"label": "one_token", "length": k, "tokens": docs[k][:k - BLOCK + 1]}
                     for _ in range(ctx.args.hit_repeats) for k in n]
        reqs += [{**q, "round": r} for q in mine]
    reqs.append(foreign_request(300 + prefix))
    try:
        result = run_vllm(ctx, cell, reqs, prefix_caching=prefix)
    except Failed as e:
        res.error([cell], str(e))
        return
    add_alone(res, result, reqs, len(all_docs), prefix, refs)


def add_alone(res: Results, result: dict, reqs: list[dict], rounds: int, prefix: bool,
              refs: list) -> None:
    """Records vllm_alone's process, round by round (recompute's gate requests become the
    rounds' references)."""
    cell = "vllm_prefix" if prefix else "recompute"
    # run_vllm's results lose the round tag; put it back from the plan's order.
    for q, out in zip(reqs, result["requests"]):
        out["round"] = q.get("round", 0)
    for r, part in enumerate(split_rounds(result, rounds)):
        if not prefix:
            refs[r] = {q["length"]: {"tokens": q["tokens"], "top": q.get("top")}
                       for q in part["requests"] if q["label"] == "gate"}
        res.add(cell, part, refs[r], BLOCK if prefix else None)
        for q in part["requests"]:
            if q["label"] == "one_token":
                res.one_token.setdefault(q["length"], []).append(
                    {"ttft_s": q["ttft_s"], "cached_tokens": q["cached_tokens"]})


# ---------------------------------------------------------------------------------------------
# Report.

def versions() -> dict:
    rev = subprocess.run(["git", "-C", str(peerlib.REPO), "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    import kvtier
    return {"lmcache": peerlib.package_version("lmcache"),
            "vllm": peerlib.package_version("vllm-cpu"), "torch": peerlib.package_version("torch"),
            "kvtier": kvtier.__version__, "kvtier_git": rev or "unknown",
            "redis": peerlib.redis_version(), "python": platform.python_version()}


def machine(kv_bytes: int) -> dict:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().split()[1]
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "memory_gib": round(int(mem) / (1 << 20), 1), "loadavg_1m": os.getloadavg()[0],
            "memcpy_bytes": kv_bytes, "memcpy_GBps": peerlib.memcpy_gbps(kv_bytes)}


def summarize(res: Results, want: list[str]) -> tuple[dict, list]:
    cells = {}
    for cell in want:
        side, kind = CELLS[cell]
        entry = {"side": side, "hit": kind}
        if res.errors.get(cell):
            entry["status"] = "error"
            entry["errors"] = res.errors[cell]
        elif res.failures.get(cell):
            entry["status"] = "failed"
            entry["gate_failures"] = res.failures[cell]
        elif cell not in res.samples:
            entry["status"] = "not run"
        else:
            entry["status"] = "passed"
        if res.notes.get(cell):
            entry["gate_tokens"] = res.notes[cell]
        entry["lengths"] = {}
        for n in res.lengths:
            xs = res.samples.get(cell, {}).get(n, [])
            timed = entry["status"] == "passed"
            entry["lengths"][str(n)] = {
                "ttft_s_median": peerlib.median(xs) if timed and xs else None,
                "ttft_s": xs if timed else [], "requests": len(xs),
                "cached_tokens": res.cached.get(cell, {}).get(n, [])}
        cells[cell] = entry
    table = []
    for measure, lm, kv in COMPARISONS:
        if lm not in cells or kv not in cells:
            continue
        for n in res.lengths:
            a = cells[lm]["lengths"][str(n)]["ttft_s_median"]
            b = cells[kv]["lengths"][str(n)]["ttft_s_median"]
            table.append({"measure": measure, "length": n, "lmcache_cell": lm, "kvtier_cell": kv,
                          "lmcache_ttft_s": a, "kvtier_ttft_s": b,
                          "kvtier_over_lmcache": peerlib.ratio(b, a) if a and b else None,
                          "lmcache_status": cells[lm]["status"],
                          "kvtier_status": cells[kv]["status"]})
    return cells, table


def fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def render(report: dict) -> str:
    c = report["config"]
    v = report["versions"]
    lines = [f"LMCache {v['lmcache']} and kvtier {v['kvtier_git']}"
             f" in vLLM {report['versions']['vllm']}: TTFT medians (s) over {c['rounds']} rounds, "
             f"{c['layers']} layers, lengths {c['lengths']}",
             f"{'measure':<58} {'tokens':>6} {'LMCache':>8} {'kvtier':>8} {'ratio':>6}"]
    for row in report["comparisons"]:
        note = "" if row["lmcache_status"] == row["kvtier_status"] == "passed" else \
            f"  (LMCache {row['lmcache_status']}, kvtier {row['kvtier_status']})"
        lines.append(f"{row['measure']:<58} {row['length']:>6} {fmt(row['lmcache_ttft_s']):>8} "
                     f"{fmt(row['kvtier_ttft_s']):>8} {fmt(row['kvtier_over_lmcache']):>6}{note}")
    lines.append("")
    for cell, e in report["cells"].items():
        med = " ".join(f"{n}:{fmt(v['ttft_s_median'])}" for n, v in e["lengths"].items())
        hits = " ".join(f"{n}:{v['cached_tokens']}" for n, v in e["lengths"].items())
        lines.append(f"{cell:<38} {e['status']:<7} {med}  cached {hits}")
        for text in e.get("errors", []) + e.get("gate_failures", []):
            lines.append(f"    {text.splitlines()[0][:200]}")
    m = report["machine"]
    lines.append(f"machine: {m['cpus']} CPUs ({m['cpu_model']}), load {m['loadavg_1m']:.2f} at "
                 f"start, memcpy {m['memcpy_GBps']:.1f} GB/s; wall {report['wall_s'] / 60:.1f} min")
    return "\n".join(lines)


def measure(args, ctx, lengths: list[int], want: list[str]) -> Results:
    """Every process of the run: recompute, then the rounds (LMCache's and kvtier's processes
    alternating, the side that goes first alternating between rounds), vLLM's prefix cache after
    the first round."""
    redis, redis_port = peerlib.start_redis(ctx.work, args.deadline_s)
    key_file = ctx.work / "remote.key"
    import kvtier
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(kvtier.generate_remote_key(1))
    all_docs = [vllm_ttft.make_documents(lengths, args.seed + r) for r in range(args.rounds)]
    res = Results(lengths)
    refs = [None] * args.rounds
    vllm_alone(ctx, res, all_docs, False, refs)
    wanted = set(want)
    try:
        for r, docs in enumerate(all_docs):
            peerlib.redis_command(redis_port, "FLUSHALL")
            lm = lmcache_steps(ctx, res, r, docs, refs[r], wanted, redis_port)
            kv = kvtier_steps(ctx, res, r, docs, refs[r], wanted, redis_port, str(key_file))
            first, second = (lm, kv) if r % 2 == 0 else (kv, lm)
            for i in range(max(len(first), len(second))):
                for steps in (first, second):
                    if i < len(steps):
                        steps[i]()
            if r == 0 and "vllm_prefix" in wanted:
                vllm_alone(ctx, res, all_docs, True, refs)
    finally:
        redis.stop()
    return res


def from_raw(args, ctx, lengths: list[int], want: list[str]) -> Results:
    """The gate and the report again, from the processes' results a run kept in its --work-dir
    (NAME.plan.json, NAME.out.json). When the kept recompute process has no log-probabilities
    (a run before the gate had them), a recompute process runs now for them, and its tokens
    must equal the kept ones."""
    all_docs = [vllm_ttft.make_documents(lengths, args.seed + r) for r in range(args.rounds)]
    res = Results(lengths)
    refs = [None] * args.rounds

    def kept(name):
        plan, out = ctx.work / f"{name}.plan.json", ctx.work / f"{name}.out.json"
        if not out.exists():
            return None, None
        return json.loads(plan.read_text())["requests"], json.loads(out.read_text())

    reqs, result = kept("recompute")
    if result is None:
        sys.exit(f"lmcache_vllm: {ctx.work} kept no recompute process")
    if not any(q.get("top") for q in result["requests"]):
        again = [{**q, "logprobs": True} for q in reqs if q["label"] == "gate"]
        _, fresh = kept("recompute_logprobs")  # from an earlier --from-raw
        fresh = (fresh or run_vllm(ctx, "recompute_logprobs", again))["requests"]
        gates = [q for q in result["requests"] if q["label"] == "gate"]
        for old, new in zip(gates, fresh):
            if old["tokens"] != new["tokens"]:
                sys.exit(f"lmcache_vllm: recompute gave {new['tokens']} now and "
                         f"{old['tokens']} then for {old['length']} tokens")
            old["top"] = new["top"]
    add_alone(res, result, reqs, args.rounds, False, refs)
    reqs, result = kept("vllm_prefix")
    if result is not None and "vllm_prefix" in want:
        add_alone(res, result, reqs, args.rounds, True, refs)
    for r in range(args.rounds):
        for cell in want:
            if cell in ("recompute", "vllm_prefix"):
                continue
            _, result = kept(f"r{r}_{cell}")
            if result is None:
                res.error([cell], f"round {r}: no r{r}_{cell}.out.json kept (see the run's log)")
                continue
            gran = args.lmcache_chunk_tokens if CELLS[cell][0] == "lmcache" else BLOCK
            res.add(cell, result, refs[r], gran)
        for name in (f"r{r}_lmcache_store", f"r{r}_kvtier_redis_plain_store",
                     f"r{r}_kvtier_fs_store"):
            _, result = kept(name)
            if result is not None:
                res.add("-", result, refs[r], None)
    return res


def build_report(args, ctx, res: Results, want: list[str], host: dict, started: float) -> dict:
    cells, table = summarize(res, want)
    layers = json.loads((args.model_dir / "config.json").read_text())["num_hidden_layers"]
    return {
        "benchmark": "lmcache_vllm",
        "versions": versions(),
        "config": {"lengths": res.lengths, "rounds": args.rounds,
                   "hit_repeats": args.hit_repeats, "layers": layers, "smoke": args.smoke,
                   "block_tokens": BLOCK, "shared_prefix_tokens": vllm_ttft.SHARED_TOKENS,
                   "kv_bytes_per_token": ctx.per_token,
                   "lmcache_chunk_tokens": args.lmcache_chunk_tokens,
                   "lmcache_transfer_mode": args.lmcache_transfer_mode,
                   "kvtier_background_priority": args.kvtier_background_priority,
                   "kvtier_remote_write_policy": args.kvtier_remote_write_policy,
                   "lmcache_l1_gb": ctx.l1_gb, "gate_tokens": GATE_TOKENS,
                   "gate_near_tie_nats": GATE_MARGIN,
                   "command": "bench/peers/lmcache_vllm.py " + " ".join(
                       peerlib.report_path(a) if a.startswith("/") else a
                       for a in sys.argv[1:])},
        "machine": {"loadavg_1m_end": os.getloadavg()[0], **host},
        "comparisons": table,
        "cells": cells,
        "vllm_prefix_one_token_left": {
            str(n): {"prompt_tokens": n - BLOCK + 1,
                     "ttft_s_median": peerlib.median([x["ttft_s"] for x in xs]),
                     "cached_tokens": [x["cached_tokens"] for x in xs]}
            for n, xs in sorted(res.one_token.items())},
        "store_ttft_s_median": {side: {str(n): peerlib.median(v) for n, v in per.items()}
                                for side, per in res.stores.items()},
        "wall_s": time.perf_counter() - started,
    }


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(args.worker)
    peerlib.ensure_overlay_venv(LMCACHE_VENV, args.vllm_venv.resolve(), LMCACHE_PACKAGES,
                                LMCACHE_IMPORTS, Path(args.kvtier_python))
    if args.setup_only:
        log(f"lmcache_vllm: {peerlib.report_path(str(LMCACHE_VENV))} has lmcache "
            f"{peerlib.package_version('lmcache')} over vLLM {peerlib.package_version('vllm-cpu')}")
        return 0
    started = time.perf_counter()
    if args.kvtier_background_priority != "nice":
        KVTIER_EXTRA["background_priority"] = args.kvtier_background_priority
    if args.kvtier_remote_write_policy != "through":
        KVTIER_EXTRA["remote_write_policy"] = args.kvtier_remote_write_policy
    lengths = sorted(int(x) for x in args.lengths.split(","))
    if min(lengths) <= vllm_ttft.SHARED_TOKENS + BLOCK or args.rounds < 1:
        sys.exit(f"lmcache_vllm: lengths must exceed {vllm_ttft.SHARED_TOKENS + BLOCK} tokens "
                 f"and --rounds be at least 1")
    want = list(CELLS) if args.cells == "all" else args.cells.split(",")
    unknown = [c for c in want if c not in CELLS]
    if unknown:
        sys.exit(f"lmcache_vllm: unknown cells {unknown}; known: {', '.join(CELLS)}")
    if "recompute" not in want:
        want.insert(0, "recompute")  # the gate's reference
    if not Path(args.kvtier_cli).is_file():
        sys.exit(f"lmcache_vllm: no kvtier CLI at {args.kvtier_cli} (build the kvtier target)")
    work = args.from_raw or args.work_dir or Path(tempfile.mkdtemp(prefix="kvtier-peers-lmc-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"lmcache_vllm: run directory {work}")
    if args.model_dir is None and (work / "model" / "config.json").exists():
        args.model_dir = work / "model"
    if args.model_dir is None:
        args.model_dir = work / "model"
        log(f"lmcache_vllm: making the model ({args.layers} layers)")
        subprocess.run([sys.executable, str(peerlib.REPO / "tests" / "vllm" / "make_model.py"),
                        str(args.model_dir), "--shape", "tinyllama-1.1b", "--layers",
                        str(args.layers)], check=True, capture_output=True)
    ctx = Context(args, work, lengths)
    kept_host = work / "machine.json"  # the measuring run's, for --from-raw
    if args.from_raw and kept_host.exists():
        host = json.loads(kept_host.read_text())
    else:
        host = machine(max(lengths) * ctx.per_token)
        kept_host.write_text(json.dumps(host))
    res = (from_raw if args.from_raw else measure)(args, ctx, lengths, want)
    report = build_report(args, ctx, res, want, host, started)
    print(peerlib.dump_json(report) if args.json else render(report))
    if args.work_dir is None and args.from_raw is None:
        shutil.rmtree(work, ignore_errors=True)
    failed = [c for c, e in report["cells"].items() if e["status"] != "passed"]
    return 1 if args.smoke and failed else 0

if __name__ == "__main__":
    sys.exit(main())
