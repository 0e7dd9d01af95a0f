#!/usr/bin/env python3
"""Serving benchmark: `vllm serve` with each KV cache under a multi-user, multi-turn chat trace.

Goal: what users of an inference server judge a KV cache by, at fixed concurrency: time to first
token (p50, p99), output tokens per second, and where the prompt tokens' KV came from, for
recomputation, vLLM's own prefix cache, kvtier (in vLLM, and on kvtier's node service) and, with
--modes lmcache, LMCache's multiprocess server (`lmcache server`, L1 of --host-bytes and an `fs`
L2 on a directory of its own, like kvtier's host and SSD tiers) behind vLLM's LMCacheMPConnector.
With lmcache among the modes the script first makes LMCache's environment, .venv-lmcache, as
bench/peers/lmcache_vllm.py does (layered over .venv-vllm, LMCache installed --no-deps), and runs
every mode's `vllm serve` from it, so that all modes run the same vLLM.

The trace (make_trace, seeded, in this file): --users users chat for --turns turns each. Users
share one of --system-prompts system prompts (--system-tokens tokens); every turn appends a user
message (--user-tokens) to the conversation and asks for --max-tokens tokens; the reply that the
next turn carries is the trace's own (--reply-tokens tokens), not the model's, so every mode
sends the same prompts. Each user's turns are sequential: a turn is sent once the user's previous
turn is answered; --concurrency requests are in flight at once, users taken in a fixed order.
vLLM's own KV cache is limited (--vllm-blocks pages) and kvtier's host tier too (--host-bytes),
so that the trace's KV does not fit in memory and the lower tiers are used.

Method: tests/vllm/make_model.py writes a random-weight Llama with TinyLlama-1.1B's width
(--layers, default 4) and a byte tokenizer; prompts are token ids. Each mode and
concurrency is one `vllm serve` process (tests/vllm/vllm_server.py), started fresh on empty
caches; requests stream (/v1/completions, stream with usage and top-2 log-probabilities), and
the time to the first chunk that carries text is the TTFT. The correctness gate (gate()): every
mode's tokens for every request equal recompute's at the same concurrency (temperature 0), but
for a flip where recompute itself nearly chose the other token (near_tie_flips); otherwise the
mode is reported failed and not timed. Tier hits come from kvtier's stats_file, vLLM's from its
/metrics (vllm:prefix_cache_hits_total / _queries_total).

  PYTHONPATH=build/python .venv-vllm/bin/python bench/serve_trace.py [--json] [--modes recompute,vllm_prefix,kvtier,
      kvtier_service,lmcache] [--concurrency 4,8] [--users 8] [--turns 4] [--layers 4] [--smoke]

--smoke: two users of two turns, concurrency 2, recompute and kvtier (or --modes), a 2-layer
model: a check that the script runs (CI runs it), not a measurement. Not a test otherwise; docs/benchmarks.md
has the figures and the command.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "vllm"))
sys.path.insert(0, str(REPO / "bench" / "peers"))
from vllm_server import MODEL_NAME, VllmServer  # noqa: E402

BLOCK_TOKENS = 32
MODES = ("recompute", "vllm_prefix", "kvtier", "kvtier_service", "lmcache")
NEAR_TIE_NATS = 1.0


def log(message: str):
    print(f"[serve_trace {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The trace.

def make_trace(seed: int, users: int, turns: int, system_prompts: int, system_tokens: int,
               user_tokens: int, reply_tokens: int) -> list[list[list[int]]]:
    """trace[user][turn]: the prompt's token ids (byte tokens 3..258). A user's turn k prompt is
    its system prompt, then k (message, reply) pairs, then message k."""
    rng = random.Random(seed)

    def tokens(n):
        return [rng.randrange(3, 259) for _ in range(n)]

    systems = [tokens(system_tokens) for _ in range(system_prompts)]
    trace = []
    for u in range(users):
        history = list(systems[u % system_prompts])
        prompts = []
        for _ in range(turns):
            history += tokens(user_tokens)
            prompts.append(list(history))
            history += tokens(reply_tokens)
        trace.append(prompts)
    return trace


# ---------------------------------------------------------------------------------------------
# Replaying it against one server.

def stream_completion(port: int, prompt: list[int], max_tokens: int, timeout_s: float) -> dict:
    """One streamed /v1/completions request: its text, output tokens, TTFT and wall time."""
    body = json.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "logprobs": 2,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
    text, tokens, margins, ttft, usage = [], [], [], None, None
    for raw in resp:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices", []):
            if choice.get("text") is not None:
                if ttft is None:
                    ttft = time.perf_counter() - start
                text.append(choice["text"])
            lp = choice.get("logprobs") or {}
            tokens += lp.get("tokens") or []
            for top in lp.get("top_logprobs") or []:
                best = sorted((v for v in (top or {}).values() if v is not None), reverse=True)
                margins.append(best[0] - best[1] if len(best) > 1 else float("inf"))
    wall = time.perf_counter() - start
    conn.close()
    return {"text": "".join(text), "tokens": tokens, "margins": margins,
            "ttft_s": ttft if ttft is not None else wall, "wall_s": wall,
            "output_tokens": (usage or {}).get("completion_tokens", 0),
            "prompt_tokens": (usage or {}).get("prompt_tokens", len(prompt))}


def replay(port: int, trace, concurrency: int, max_tokens: int, timeout_s: float) -> dict:
    """Every turn of every user, --concurrency at a time, a user's turns in order."""
    ready = [(u, 0) for u in range(len(trace))]
    results: dict = {}
    errors: list = []
    cv = threading.Condition()
    remaining = [sum(len(t) for t in trace)]

    def worker():
        while True:
            with cv:
                while not ready and remaining[0] > 0 and not errors:
                    cv.wait()
                if remaining[0] == 0 or errors:
                    return
                u, k = ready.pop(0)
            try:
                r = stream_completion(port, trace[u][k], max_tokens, timeout_s)
            except Exception as e:  # noqa: BLE001 - reported in the result, ends the replay
                with cv:
                    errors.append(f"user {u} turn {k}: {e!r}")
                    cv.notify_all()
                return
            with cv:
                results[(u, k)] = r
                remaining[0] -= 1
                if k + 1 < len(trace[u]):
                    ready.append((u, k + 1))
                cv.notify_all()

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s * sum(len(t) for t in trace))
    wall = time.perf_counter() - start
    return {"wall_s": wall, "results": results, "errors": errors}


def prometheus_value(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode(errors="replace")
    conn.close()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------------------------
# Modes: how each one's `vllm serve` is configured.

class Mode:
    def __init__(self, name: str, args, work: Path, concurrency: int):
        # Caches of their own per run: every run starts cold.
        self.name, self.args, self.work, self.concurrency = name, args, work, concurrency
        self.service = None
        self.extra_args = ["--num-gpu-blocks-override", str(args.vllm_blocks)]
        self.connector = None
        self.stats_file = None
        if name != "recompute":
            self.extra_args.append("--enable-prefix-caching")
        # Sockets (the connector's lookup socket, the service's) in a short directory of their
        # own: a Unix socket path has at most 107 bytes, which a deep work directory exceeds.
        self.runtime = Path(tempfile.mkdtemp(prefix="kvtier-st-"))
        if name in ("kvtier", "kvtier_service"):
            self.stats_file = work / f"{name}_c{concurrency}.stats.json"
            extra = {"stats_file": str(self.stats_file)}
            if name == "kvtier":
                cache = work / f"{name}_c{concurrency}.cache"
                extra.update(host_bytes=args.host_bytes, ssd_dirs=[str(cache)],
                             ssd_bytes=4 << 30, ssd_segment_bytes=64 << 20,
                             runtime_dir=str(self.runtime))
            else:
                extra["server"] = "unix:" + str(self.start_service())
            self.connector = {"kv_connector": "KvtierConnector",
                              "kv_connector_module_path": "kvtier.vllm", "kv_role": "kv_both",
                              "kv_load_failure_policy": "recompute",
                              "kv_connector_extra_config": extra}
        self.env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
        self.lmcache = None
        if name == "lmcache":
            import lmcache_vllm

            # LMCacheServer's settings: L1 as large as kvtier's host tier, an fs L2 of its own.
            ctx = types.SimpleNamespace(
                work=work, l1_gb=args.host_bytes / (1 << 30),
                args=types.SimpleNamespace(lmcache_chunk_tokens=args.lmcache_chunk_tokens,
                                           deadline_s=int(4 * args.request_timeout_s)))
            l2 = [{"type": "fs", "base_path": str(work / f"{name}_c{concurrency}.fs")}]
            self.lmcache = lmcache_vllm.LMCacheServer(ctx, f"{name}_c{concurrency}_server", l2)
            self.connector = self.lmcache.connector()
            self.env.update(LMCACHE_MP_TRANSFER_MODE="engine_driven", LMCACHE_DISABLE_BANNER="1")

    def start_service(self) -> Path:
        sock = self.runtime / "kvtier.sock"
        config = json.loads((self.args.model_dir / "config.json").read_text())
        heads = config["num_attention_heads"]
        layout = (f"layers={config['num_hidden_layers']},"
                  f"kv_heads={config.get('num_key_value_heads', heads)},"
                  f"head_dim={config['hidden_size'] // heads},dtype=bf16,"
                  f"block_tokens={BLOCK_TOKENS}")
        cmd = [str(self.args.service_bin), "serve", "--socket", str(sock), "--layout", layout,
               "--model-name", "serve-trace", "--host-bytes", str(self.args.host_bytes),
               "--cache-dir", str(self.work / f"{self.name}_c{self.concurrency}.cache"),
               "--ssd-bytes", "4GiB"]
        service_log = self.work / f"{self.name}_c{self.concurrency}.service.log"
        self.service = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(service_log, "w"),
                                        text=True)
        line = self.service.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError(f"kvtier serve did not start: {line!r}; log {service_log}")
        return sock

    def lmcache_stats(self) -> dict:
        """LMCache's own counters (its Prometheus /metrics): chunks read from and written to
        its L1."""
        if self.lmcache is None:
            return {}
        return {"l1_read_chunks": self.lmcache.metric("lmcache_mp_l1_read_chunks_total"),
                "l1_write_chunks": self.lmcache.metric("lmcache_mp_l1_write_chunks_total")}

    def close(self):
        if self.lmcache is not None:
            self.lmcache.stop()
        if self.service is not None:
            self.service.terminate()
            self.service.wait(timeout=120)
        shutil.rmtree(self.runtime, ignore_errors=True)


def tier_stats(stats_file) -> dict:
    if stats_file is None or not Path(stats_file).exists():
        return {}
    s = json.loads(Path(stats_file).read_text())
    return {"loaded_tokens": s.get("loaded_tokens", 0), "loads": s.get("loads", 0),
            "load_failures": s.get("load_failures", 0),
            "stored_chunks": s.get("stored_chunks", 0),
            "host_hits": s.get("tiers", {}).get("host", {}).get("hits", 0),
            "ssd_hits": s.get("tiers", {}).get("ssd", {}).get("hits", 0)}


def run_mode(args, work: Path, name: str, trace, concurrency: int) -> dict:
    mode = Mode(name, args, work, concurrency)
    label = f"{name}_c{concurrency}"
    server = VllmServer(args.model_dir, work / f"{label}.log", connector=mode.connector,
                        block_size=BLOCK_TOKENS, max_model_len=args.max_model_len,
                        env=mode.env, extra_args=mode.extra_args)
    try:
        server.wait_ready()
        # Two short requests of their own first: vLLM's first-request costs are not the trace's.
        for seed in (1, 2):
            stream_completion(server.port, make_trace(1000 + seed, 1, 1, 1, 40, 8, 0)[0][0], 2,
                              args.request_timeout_s)
        hits0 = prometheus_value(server.port, "vllm:prefix_cache_hits_total")
        queries0 = prometheus_value(server.port, "vllm:prefix_cache_queries_total")
        out = replay(server.port, trace, concurrency, args.max_tokens, args.request_timeout_s)
        hits = prometheus_value(server.port, "vllm:prefix_cache_hits_total") - hits0
        queries = prometheus_value(server.port, "vllm:prefix_cache_queries_total") - queries0
        lmcache = mode.lmcache_stats()
    finally:
        server.close()
        mode.close()
    results = out["results"]
    ttfts = [r["ttft_s"] for r in results.values()]
    output_tokens = sum(r["output_tokens"] for r in results.values())
    prompt_tokens = sum(r["prompt_tokens"] for r in results.values())
    stats = tier_stats(mode.stats_file)
    return {"mode": name, "concurrency": concurrency, "requests": len(results),
            "errors": out["errors"], "wall_s": out["wall_s"],
            "ttft_p50_s": statistics.median(ttfts) if ttfts else None,
            "ttft_p99_s": percentile(ttfts, 0.99),
            "output_tokens_per_s": output_tokens / out["wall_s"] if out["wall_s"] else 0,
            "prompt_tokens": prompt_tokens,
            "vllm_prefix_hit_ratio": hits / queries if queries else 0.0,
            "kvtier_loaded_ratio": stats.get("loaded_tokens", 0) / prompt_tokens
            if prompt_tokens else 0.0,
            "kvtier": stats,
            "lmcache": lmcache,
            "texts": {f"{u}:{k}": (r["tokens"], r["margins"])
                      for (u, k), r in sorted(results.items())}}


def first_flip(base: tuple, got: tuple | None) -> tuple[int, float] | None:
    """Where a request's tokens first differ from recompute's, and recompute's top-1 minus top-2
    log-probability there; None when they are equal."""
    if got is None:
        return (0, float("inf"))
    (want, margins), (have, _) = base, got
    for i in range(max(len(want), len(have))):
        if i >= len(want) or i >= len(have) or want[i] != have[i]:
            return (i, margins[i] if i < len(margins) else float("inf"))
    return None


def gate(rows: list[dict]) -> None:
    """Marks each row's correctness against recompute's tokens at the same concurrency. The
    random-weight model's next token is often a near-tie on these random prompts (recompute
    itself leads by under 0.1 nats at some steps), and a prefill over loaded KV, or in another
    batch, rounds differently: a request may flip where recompute's top-1 led by less than
    NEAR_TIE_NATS (counted in near_tie_flips; the rest of that request is not compared), never
    elsewhere. Byte-for-byte checks of loaded KV are the tests' (tests/vllm)."""
    baseline = {r["concurrency"]: r for r in rows if r["mode"] == "recompute"}
    for r in rows:
        base = baseline.get(r["concurrency"])
        r["near_tie_flips"] = 0
        if r["errors"]:
            r["correct"], r["why"] = False, "; ".join(r["errors"])[:500]
            continue
        if base is None:
            r["correct"], r["why"] = None, "no recompute run to compare with"
            continue
        bad = []
        for key, want in base["texts"].items():
            flip = first_flip(want, r["texts"].get(key))
            if flip is None:
                continue
            if flip[1] < NEAR_TIE_NATS:
                r["near_tie_flips"] += 1
            else:
                bad.append(f"{key} at token {flip[0]} (recompute led by {flip[1]:.2f} nats)")
        r["correct"] = not bad
        r["why"] = f"{len(bad)} requests differ from recompute: {bad[0]}" if bad else ""


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    """The arguments (--smoke's sizes applied) and the modes to run, checked."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", help="default recompute,vllm_prefix,kvtier,kvtier_service "
                   "(--smoke: recompute,kvtier)")
    p.add_argument("--concurrency", default="4,8")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--system-prompts", type=int, default=2)
    p.add_argument("--system-tokens", type=int, default=512)
    p.add_argument("--user-tokens", type=int, default=96)
    p.add_argument("--reply-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vllm-blocks", type=int, default=96,
                   help="vLLM's own KV pages (of 32 tokens): less than the trace's KV")
    p.add_argument("--host-bytes", type=int, default=16 << 20,
                   help="kvtier's host tier: less than the trace's KV, so the SSD tier serves")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--request-timeout-s", type=float, default=600.0)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--service-bin", type=Path, default=REPO / "build" / "tools" / "cli" / "kvtier")
    p.add_argument("--lmcache-chunk-tokens", type=int, default=256,
                   help="LMCache's chunk (its default); lmcache mode only")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.modes is None:
        args.modes = "recompute,kvtier" if args.smoke else \
            "recompute,vllm_prefix,kvtier,kvtier_service"
    if args.smoke:
        args.concurrency, args.users, args.turns = "2", 2, 2
        args.system_tokens, args.user_tokens, args.reply_tokens, args.layers = 96, 32, 16, 2
        args.max_tokens, args.vllm_blocks = 4, 12
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown mode {bad[0]} (modes: {', '.join(MODES)})")
    return args, modes


def make_report(args, longest: int, rows: list[dict], started: float) -> dict:
    """The JSON report: the trace, the setup and the rows."""
    return {"trace": {"users": args.users, "turns": args.turns,
                      "system_prompts": args.system_prompts,
                      "system_tokens": args.system_tokens, "user_tokens": args.user_tokens,
                      "reply_tokens": args.reply_tokens, "max_tokens": args.max_tokens,
                      "seed": args.seed, "requests": args.users * args.turns,
                      "longest_prompt_tokens": longest},
            "setup": {"layers": args.layers, "vllm_blocks": args.vllm_blocks,
                      "block_tokens": BLOCK_TOKENS, "kvtier_host_bytes": args.host_bytes,
                      "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
                      # The command without --work-dir: a report names no machine's paths.
                      "command": " ".join(["bench/serve_trace.py"] + [
                          a for i, a in enumerate(sys.argv) if i > 0 and a != "--work-dir"
                          and sys.argv[i - 1] != "--work-dir"])},
            "rows": rows, "wall_s": time.perf_counter() - started}


def print_table(rows: list[dict]) -> None:
    """The rows as a table on stdout."""
    print(f"{'mode':16} {'conc':>4} {'ok':>3} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'tok/s':>7} {'vLLM hit':>8} {'kvtier':>7}")
    for r in rows:
        fmt = (lambda v: f"{v:9.3f}" if v is not None else f"{'-':>9}")
        print(f"{r['mode']:16} {r['concurrency']:4d} {'yes' if r['correct'] else 'NO':>3} "
              f"{fmt(r['ttft_p50_s'])} {fmt(r['ttft_p99_s'])} "
              f"{(r['output_tokens_per_s'] or 0):7.1f} {r['vllm_prefix_hit_ratio']:8.2f} "
              f"{r['kvtier_loaded_ratio']:7.2f}")


def main():
    args, modes = parse_args()
    if "lmcache" in modes:
        import lmcache_vllm
        import peerlib

        # Returns inside .venv-lmcache (re-executing this script there the first time).
        peerlib.ensure_overlay_venv(lmcache_vllm.LMCACHE_VENV, lmcache_vllm.VLLM_VENV,
                                    lmcache_vllm.LMCACHE_PACKAGES, lmcache_vllm.LMCACHE_IMPORTS,
                                    REPO / "build" / "python")
    concurrency = [int(c) for c in args.concurrency.split(",") if c]
    trace = make_trace(args.seed, args.users, args.turns, args.system_prompts, args.system_tokens,
                       args.user_tokens, args.reply_tokens)
    longest = max(len(t[-1]) for t in trace)
    args.max_model_len = longest + args.max_tokens + 2 * BLOCK_TOKENS
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kvtier-serve-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model_dir is None:
        args.model_dir = work / "model"
        subprocess.run([sys.executable, str(REPO / "tests" / "vllm" / "make_model.py"),
                        str(args.model_dir), "--shape", "tinyllama-1.1b", "--layers",
                        str(args.layers)], check=True, capture_output=True)
    started = time.perf_counter()
    rows = []
    for c in concurrency:
        for m in ["recompute"] + [m for m in modes if m != "recompute"]:
            if m not in modes:
                continue
            log(f"{m} at concurrency {c}")
            rows.append(run_mode(args, work, m, trace, c))
    gate(rows)
    for r in rows:
        if not r["correct"]:
            for key in ("ttft_p50_s", "ttft_p99_s", "output_tokens_per_s"):
                r[key] = None  # A run that fails the gate is not timed.
        r.pop("texts")
    report = make_report(args, longest, rows, started)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_table(rows)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
