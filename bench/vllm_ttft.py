#!/usr/bin/env python3
"""Time to first token of a real vLLM with and without kvtier, per document length.

Goal: show what a user of the vLLM connector gets, in the numbers that matter to them: how long a
prompt of 1k-4k tokens waits for its first token when its KV (a) is computed, (b) comes from
vLLM's own in-memory prefix cache (the upper bound), (c) comes from kvtier's host tier in the same
vLLM process, (d) comes from kvtier's SSD tier after vLLM restarted (a fresh process on the same
cache directory, the host tier empty), which vLLM alone cannot do, and (e) the same through the
server users run: `vllm serve` stopped with Ctrl-C and started again. Plus the bytes kvtier moved and
the machine's own limits (memcpy of the KV size, fio on the cache directory) measured in the same
run, since the machine may be shared.

Method: tests/vllm/make_model.py writes a random-weight Llama with TinyLlama-1.1B's shape (22
layers by default, --layers to change) and a byte tokenizer into a temporary directory. The
documents share a 256-token first part (a common system prompt) and differ after it; token ids
are in 3..258. Each mode runs in its own vLLM process (vLLM's offline API on the CPU backend,
bf16, 32-token pages, whole prompt in one prefill step); this script starts itself as that
process (--worker). A TTFT is the wall time of one generate() with max_tokens=1, which includes
the connector's lookup and load. Every process first runs two short prompts of its own (misses
everywhere) so that vLLM's first-request costs are not charged to a mode.
  (a) no cache: vLLM's prefix cache off, no connector; each document --repeats times.
  (b) vLLM prefix cache: on, no connector; each document once (computed), then --hit-repeats
      rounds of every document again.
  (c) kvtier host: connector, vLLM's prefix cache off, empty cache directory; each document once
      (computed and stored), then --hit-repeats rounds loaded from the host tier; and one more
      round in every process of (d), after its SSD hits promoted the documents.
  (d) kvtier SSD after restart: --repeats fresh processes on (c)'s cache directory, each
      requesting every document once (the order rotates between processes); (c)'s process
      flushed its host tier to the SSD tier at shutdown. Promotion on load puts what one document
      loaded into the host tier, so a later document of the same process gets the shared first
      part from there: the per-tier hits say how much.
  (e) kvtier SSD after a `vllm serve` restart: tests/vllm/vllm_server.py starts `vllm serve` (the
      OpenAI API server, connector on an empty cache directory of its own) and sends each
      document once over HTTP (/v1/completions, max_tokens=1: "serve_cold", computed and
      stored), then stops it as Ctrl-C does (SIGINT to its process group; the connector's worker
      flushes on the signal; --shutdown-timeout 30, so that vLLM does not kill the worker before
      the flush is done); then --repeats times: a new server on that directory, two warmup
      requests, and each document once (the order rotates), measured as the wall time of the
      HTTP request, then Ctrl-C again. The first token is compared with serve_cold's.
  (f) kvtier's node service (`"server"` in the connector's config; docs/serve.md): one service
      process (`kvtier serve` from --service-bin, with a host tier and an SSD tier on
      a directory of its own) serves every vLLM process. A first vLLM process sends each document
      once ("service_cold": computed and stored on the service); then --repeats fresh vLLM
      processes, the service kept, each request every document once
      ("kvtier_service_host_after_restart": the KV comes from the service's host tier); then the
      service is stopped (SIGTERM: it flushes its host tier to its SSD tier) and, --repeats
      times, started again with a fresh vLLM process each time
      ("kvtier_service_ssd_after_restart": both restarted, the KV comes from the service's SSD
      tier; then the service is stopped again).
The processes run in the order b, c, d, a, d, d..., then e, then f, so that a burst of other
load on a shared machine does not fall on one mode only; each process records the load average.
vLLM must compute at least a prompt's last token. Its own prefix cache (b) keeps whole pages,
so its hit stops before the page holding that token (a 32-token page computed again for a
document of whole pages); kvtier's hits (c), (d), (e), (f) load every token but the last (the
connector's partial_chunks, on by default), so vLLM computes one token.
The connector's counters (stats_file) are read after every request; their differences give the
bytes loaded and stored and the per-tier hits of each request. The first generated token of
every mode is compared with (a)'s.

  PYTHONPATH=build/python .venv-vllm/bin/python bench/vllm_ttft.py [--json] [--lengths 1024,2048,4096] [--repeats 3]
      [--hit-repeats 5] [--layers 22] [--model-dir DIR] [--work-dir DIR]
      [--modes offline,serve,service]  (offline: a-d, serve: e, service: f; default all)
      [--service-bin build/tools/cli/kvtier] [--model-kind llama|mla|swa]

--model-kind picks the attention of the TinyLlama-1.1B-shaped model (make_model.py --arch):
  llama  full attention, separate K and V per layer (the default);
  mla    DeepSeek-V2's multi-head latent attention (one 512 + 64-element latent vector per token
         and layer; vLLM's CPU MLA backend takes 16-token pages and turns its own prefix cache
         off, so mode (b) is not run);
  swa    Gemma-3's mix: every other layer attends over a sliding window of SWA_WINDOW tokens
         (Gemma 3's own window), the others over the whole prompt; kvtier stores and loads only
         the window's chunks of the sliding-window layers, so a hit moves less than the KV
         vLLM keeps (the connector's loaded bytes say how much less).
mla and swa run modes a-d only (--modes offline).

The plot in docs/benchmarks.md is drawn from the --json report by bench/plot.py ttft.

Not a test and not run in CI: modes a-d with the defaults took 9 minutes on two cores; mode e
with --lengths 1024,2048 --repeats 2 took 6 minutes, on a loaded machine (docs/benchmarks.md).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK_TOKENS = 32
SHARED_TOKENS = 256
MODES = ("no_cache", "vllm_prefix", "kvtier_host", "kvtier_ssd_restart",
         "kvtier_ssd_codec_restart")  # The last with --ssd-codec only.
SERVE_MODES = ("serve_cold", "kvtier_ssd_serve_restart")
SERVICE_MODES = ("service_cold", "kvtier_service_host_after_restart",
                 "kvtier_service_ssd_after_restart")
# vllm serve --shutdown-timeout: with vLLM's default 0 the worker is force-killed right after
# Ctrl-C, before its flush of the documents just stored (README, "Use with vLLM").
SERVE_SHUTDOWN_TIMEOUT_S = 30
SWA_WINDOW = 1024  # --model-kind swa: Gemma 3's sliding window, in tokens.
# --model-kind: make_model.py's --arch, vLLM's page size on the CPU backend, what the report says.
MODEL_KINDS = {
    "llama": ("llama", BLOCK_TOKENS, "random-weight Llama, TinyLlama-1.1B shape (hidden 2048, "
              "32 heads, 4 KV heads, head_dim 64), bf16"),
    "mla": ("deepseek_v2", 16, "random-weight DeepSeek-V2 (MLA: latent 512 + rope 64 per token "
            "and layer) on TinyLlama-1.1B's hidden size and layers, bf16, 16-token pages"),
    "swa": ("gemma3", BLOCK_TOKENS, f"random-weight Gemma-3 text model, TinyLlama-1.1B shape, "
            f"sliding-window ({SWA_WINDOW} tokens) and full-attention layers alternating, bf16"),
}
RATIO_TARGETS = {"ssd_restart_over_vllm_prefix": 1.5, "recompute_over_ssd_restart": 10.0}


# ---------------------------------------------------------------------------------------------
# The worker: one vLLM process running a list of requests.

def make_llm(plan: dict):
    """vLLM's offline engine as every process of this script (and bench/peers/lmcache_vllm.py)
    runs it: bf16, 32-token pages, eager, the whole prompt in one prefill step; the plan's model,
    context length, prefix caching and connector. With the plan's "in_process" (smoke runs,
    never timed ones) the engine core and the worker run in this process, which starts in about
    half the time of vLLM's three processes."""
    from vllm import LLM

    extra = {}
    if plan.get("in_process"):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        extra["distributed_executor_backend"] = "uni"
    return LLM(model=plan["model"], dtype="bfloat16", max_model_len=plan["max_model_len"],
               block_size=plan.get("block_tokens", BLOCK_TOKENS), enforce_eager=True, seed=0,
               enable_prefix_caching=plan["prefix_caching"], kv_transfer_config=plan["connector"],
               max_num_batched_tokens=plan["max_model_len"], **extra)


def worker(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(plan["kv_space_gib"])
    # vLLM's CPU worker reserves cores for its scheduler (one more with a KV connector); on a
    # small machine that leaves the modes without a connector fewer cores to compute on than
    # those with one. 0 gives every mode every core, unless the caller chose otherwise.
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    from vllm import SamplingParams

    start = time.perf_counter()
    llm = make_llm(plan)
    startup_s = time.perf_counter() - start
    # logprobs=2: the first token's lead over the runner-up, which says how far a rounding
    # difference between two code paths (a full prefill, a step over loaded KV) is from flipping it.
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=2)
    loadavg_start = os.getloadavg()[0]
    stats_file = plan.get("stats_file")
    results = []
    for request in plan["requests"]:
        t0 = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": request["tokens"]}], params, use_tqdm=False)
        ttft_s = time.perf_counter() - t0
        snapshot = None
        if stats_file and os.path.exists(stats_file):
            snapshot = json.loads(Path(stats_file).read_text())
        first = out[0].outputs[0]
        best = sorted((lp.logprob for lp in (first.logprobs or [{}])[0].values()), reverse=True)
        results.append({"label": request["label"], "length": request["length"],
                        "ttft_s": ttft_s, "first_token": first.token_ids[0],
                        "first_token_margin": best[0] - best[1] if len(best) > 1 else None,
                        "stats": snapshot})
    Path(plan["out"]).write_text(json.dumps({"startup_s": startup_s, "requests": results,
                                             "loadavg_1m": [loadavg_start, os.getloadavg()[0]]}))
    del llm  # Shuts the engine down: the connector flushes its host tier to the SSD tier.
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: model, documents, processes, machine limits, report.

def log(message: str):
    print(f"[vllm_ttft {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_documents(lengths: list[int], seed: int) -> dict[int, list[int]]:
    """One document per length: a shared first part, then tokens of its own."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, 259) for _ in range(SHARED_TOKENS)]
    return {n: shared + [rng.randrange(3, 259) for _ in range(n - SHARED_TOKENS)]
            for n in lengths}


def warmup_requests(seed: int) -> list[dict]:
    """Two short prompts no other process sends: a miss for vLLM and for kvtier."""
    rng = random.Random(1_000_003 * (seed + 1))
    return [{"label": "warmup", "length": n, "tokens": [rng.randrange(3, 259) for _ in range(n)]}
            for n in (40, 160)]


def kv_bytes_per_token(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("kv_lora_rank"):  # MLA: one latent vector per token and layer, bf16.
        return config["num_hidden_layers"] * (config["kv_lora_rank"] +
                                              config["qk_rope_head_dim"]) * 2
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    # K and V, bf16, per layer: [layer][k|v][kv_head][head_dim] for one token.
    return config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * 2


def run_worker(script: str, tag: str, work: Path, name: str, plan: dict, timeout_s: float) -> dict:
    """`script --worker PLAN` in a process of its own (this interpreter): the plan is written to
    work/NAME.plan.json, the process's output to work/NAME.log; a failure exits naming the log,
    with its tail. Returns the JSON the worker wrote to plan["out"]."""
    plan_path = work / f"{name}.plan.json"
    plan_path.write_text(json.dumps(plan))
    proc = subprocess.run([sys.executable, script, "--worker", str(plan_path)],
                          capture_output=True, text=True, timeout=timeout_s)
    (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"{tag}: {name} failed (exit {proc.returncode}); log {work / name}.log:\n"
                 + (proc.stdout + proc.stderr)[-3000:])
    return json.loads(Path(plan["out"]).read_text())


def run_process(args, work: Path, name: str, requests: list[dict], prefix_caching: bool,
                connector: dict | None) -> dict:
    plan = {"model": str(args.model_dir), "max_model_len": args.max_model_len,
            "block_tokens": args.block_tokens,
            "kv_space_gib": args.kv_space_gib, "prefix_caching": prefix_caching,
            "connector": connector, "requests": requests, "out": str(work / f"{name}.out.json"),
            "stats_file": (connector or {}).get("kv_connector_extra_config", {}).get(
                "stats_file")}
    log(f"{name}: vLLM process, {len(requests)} requests")
    t0 = time.perf_counter()
    result = run_worker(__file__, "vllm_ttft", work, name, plan, args.process_timeout_s)
    result["wall_s"] = time.perf_counter() - t0
    if plan["stats_file"] and os.path.exists(plan["stats_file"]):
        result["final_stats"] = json.loads(Path(plan["stats_file"]).read_text())
    log(f"{name}: done in {result['wall_s']:.0f} s (vLLM startup {result['startup_s']:.0f} s)")
    return result


def connector_config(cache_dir: Path, runtime_dir: Path, stats_file: Path,
                     codec: str | None = None) -> dict:
    extra = {"host_bytes": 1 << 30, "ssd_dirs": [str(cache_dir)], "ssd_bytes": 4 << 30,
             "ssd_segment_bytes": 64 << 20, "stats_file": str(stats_file),
             "runtime_dir": str(runtime_dir)}
    if codec:
        extra["codec"] = codec
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra}


def flat_counters(stats: dict | None) -> dict:
    """The counters of one stats_file snapshot that a request changes, flattened."""
    if not stats:
        return {}
    out = {k: stats.get(k, 0) for k in ("loads", "load_failures", "loaded_tokens",
                                         "loaded_bytes", "load_stall_s", "saves",
                                         "saved_chunks", "stored_chunks", "stored_bytes")}
    for tier, t in (stats.get("tiers") or {}).items():
        out[f"{tier}_hits"] = t.get("hits", 0)
    return out


def add_deltas(requests: list[dict]):
    """Per request: how the connector's counters moved during it."""
    previous = {}
    for r in requests:
        now = flat_counters(r.pop("stats"))
        r["connector"] = {k: round(v - previous.get(k, 0), 6) for k, v in now.items()} \
            if now else None
        previous = now or previous


# ---------------------------------------------------------------------------------------------
# The modes.

def measure(args, work: Path, docs: dict[int, list[int]]) -> dict:
    def doc(label, n):
        return {"label": label, "length": n, "tokens": docs[n]}

    lengths = sorted(docs)
    runtime = work / "run"
    runtime.mkdir(mode=0o700)
    cache = work / "cache"
    cache_codec = work / "cache_codec"
    processes = {}

    def cold_then_hits(label_cold, label_hit, seed):
        reqs = warmup_requests(seed) + [doc(label_cold, n) for n in lengths]
        return reqs + [doc(label_hit, n) for _ in range(args.hit_repeats) for n in lengths]

    def restart(i):
        order = lengths[i % len(lengths):] + lengths[:i % len(lengths)]
        reqs = warmup_requests(3 + i) + [doc("kvtier_ssd_restart", n) for n in order]
        reqs += [doc("kvtier_host", n) for n in lengths]  # Promoted by the SSD hit above.
        name = f"kvtier_ssd_restart_{i + 1}"
        processes[name] = run_process(args, work, name, reqs, False,
                                      connector_config(cache, runtime, work / f"{name}.stats.json"))
        if args.ssd_codec:  # The same hits from records encoded with --ssd-codec.
            reqs = warmup_requests(3 + i) + [doc("kvtier_ssd_codec_restart", n) for n in order]
            name = f"kvtier_ssd_codec_restart_{i + 1}"
            processes[name] = run_process(
                args, work, name, reqs, False,
                connector_config(cache_codec, runtime, work / f"{name}.stats.json",
                                 args.ssd_codec))

    # Modes alternate in time so that a burst of other load on the machine does not land on one
    # mode only; (d) is spread over the whole run.
    if args.model_kind != "mla":  # vLLM's CPU platform turns its prefix cache off for MLA.
        processes["vllm_prefix"] = run_process(
            args, work, "vllm_prefix", cold_then_hits("cold", "vllm_prefix", 1), True, None)
    processes["kvtier_host"] = run_process(
        args, work, "kvtier_host", cold_then_hits("cold_store", "kvtier_host", 2), False,
        connector_config(cache, runtime, work / "kvtier_host.stats.json"))
    if args.ssd_codec:  # Stores the documents once more, encoded, for its restarts.
        reqs = warmup_requests(2) + [doc("cold_store_codec", n) for n in lengths]
        processes["kvtier_codec_store"] = run_process(
            args, work, "kvtier_codec_store", reqs, False,
            connector_config(cache_codec, runtime, work / "kvtier_codec_store.stats.json",
                             args.ssd_codec))
    restart(0)
    reqs = warmup_requests(0) + [doc("no_cache", n) for _ in range(args.repeats) for n in lengths]
    processes["no_cache"] = run_process(args, work, "no_cache", reqs, False, None)
    for i in range(1, args.repeats):
        restart(i)
    for p in processes.values():
        add_deltas(p["requests"])
    return processes


def measure_serve(args, work: Path, docs: dict[int, list[int]]) -> dict:
    """Mode (e): the same documents through `vllm serve`, stopped with Ctrl-C and restarted."""
    import signal

    sys.path.insert(0, str(REPO / "tests" / "vllm"))
    from vllm_server import VllmServer

    lengths = sorted(docs)
    runtime = work / "run_serve"
    runtime.mkdir(mode=0o700)
    cache = work / "cache_serve"
    processes = {}

    def serve(name, requests):
        stats_file = work / f"{name}.stats.json"
        server = VllmServer(args.model_dir, work / f"{name}.log",
                            connector=connector_config(cache, runtime, stats_file),
                            block_size=BLOCK_TOKENS, max_model_len=args.max_model_len,
                            env={"VLLM_CPU_KVCACHE_SPACE": str(args.kv_space_gib)},
                            extra_args=["--shutdown-timeout", str(SERVE_SHUTDOWN_TIMEOUT_S)])
        log(f"{name}: vllm serve, {len(requests)} requests")
        t0 = time.perf_counter()
        try:
            server.wait_ready(timeout_s=args.process_timeout_s)
            startup_s = time.perf_counter() - t0
            loadavg_start = os.getloadavg()[0]
            results = []
            for request in requests:
                out = server.complete(request["tokens"], max_tokens=1)
                snapshot = json.loads(stats_file.read_text()) if stats_file.exists() else None
                results.append({"label": request["label"], "length": request["length"],
                                "ttft_s": out["wall_s"], "first_token": out["text"],
                                "stats": snapshot})
            server.stop(signal.SIGINT)
        finally:
            server.close()
        log(f"{name}: done in {time.perf_counter() - t0:.0f} s (startup {startup_s:.0f} s)")
        result = {"startup_s": startup_s, "requests": results, "wall_s": time.perf_counter() - t0,
                  "loadavg_1m": [loadavg_start, os.getloadavg()[0]]}
        if stats_file.exists():
            result["final_stats"] = json.loads(stats_file.read_text())
        return result

    def doc(label, n):
        return {"label": label, "length": n, "tokens": docs[n]}

    processes["serve_cold"] = serve("serve_cold", warmup_requests(10) +
                                    [doc("serve_cold", n) for n in lengths])
    for i in range(args.repeats):
        order = lengths[i % len(lengths):] + lengths[:i % len(lengths)]
        name = f"kvtier_ssd_serve_restart_{i + 1}"
        processes[name] = serve(name, warmup_requests(11 + i) +
                                [doc("kvtier_ssd_serve_restart", n) for n in order])
    for p in processes.values():
        add_deltas(p["requests"])
    return processes


class NodeService:
    """Mode (f)'s kvtier service: a process on a socket of its own, with a host and an SSD tier;
    stop() sends SIGTERM, on which it flushes its host tier to the SSD."""

    def __init__(self, args, work: Path):
        config = json.loads((args.model_dir / "config.json").read_text())
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        self.layout = (f"layers={config['num_hidden_layers']},"
                       f"kv_heads={config['num_key_value_heads']},head_dim={head_dim},"
                       f"dtype=bf16,block_tokens={BLOCK_TOKENS}")
        self.bin = args.service_bin
        self.dir = work / "service"
        self.dir.mkdir(mode=0o700, exist_ok=True)
        (self.dir / "cache").mkdir(exist_ok=True)
        self.socket = self.dir / "kvtier.sock"
        self.log = work / "service.log"
        self.proc = None

    def start(self):
        log("kvtier service: starting")
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                [str(self.bin), "serve", "--layout", self.layout, "--host-bytes", str(1 << 30),
                 "--cache-dir", str(self.dir / "cache"), "--ssd-bytes", str(4 << 30),
                 "--socket", str(self.socket)], stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline()
        if "listening" not in line:
            sys.exit(f"vllm_ttft: the kvtier service did not start ({line!r}); log {self.log}")

    def stop(self):
        import signal

        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=600)
        log("kvtier service: stopped (flushed)")

    def connector(self, stats_file: Path) -> dict:
        return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
                "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": {"server": f"unix:{self.socket}",
                                              "stats_file": str(stats_file)}}


def measure_service(args, work: Path, docs: dict[int, list[int]]) -> dict:
    """Mode (f): vLLM on kvtier's node service, vLLM restarted with the service kept, then both
    restarted."""
    if not args.service_bin.exists():
        sys.exit(f"vllm_ttft: no kvtier service executable at {args.service_bin} "
                 "(build the kvtier CLI, or give --service-bin)")
    lengths = sorted(docs)
    service = NodeService(args, work)
    processes = {}

    def doc(label, n):
        return {"label": label, "length": n, "tokens": docs[n]}

    def run(name, label, seed, order):
        processes[name] = run_process(args, work, name, warmup_requests(seed) +
                                      [doc(label, n) for n in order], False,
                                      service.connector(work / f"{name}.stats.json"))

    service.start()
    try:
        run("service_cold", "service_cold", 20, lengths)
        for i in range(args.repeats):
            order = lengths[i % len(lengths):] + lengths[:i % len(lengths)]
            run(f"kvtier_service_host_after_restart_{i + 1}",
                "kvtier_service_host_after_restart", 21 + i, order)
    finally:
        service.stop()
    for i in range(args.repeats):
        order = lengths[i % len(lengths):] + lengths[:i % len(lengths)]
        service.start()
        try:
            run(f"kvtier_service_ssd_after_restart_{i + 1}", "kvtier_service_ssd_after_restart",
                31 + i, order)
        finally:
            service.stop()
    for p in processes.values():
        add_deltas(p["requests"])
    return processes


def machine_limits(work: Path, kv_bytes: int) -> dict:
    """memcpy of the largest document's KV, and fio sequential O_DIRECT reads on the cache
    directory's filesystem, for context: the floors a load could reach on this machine."""
    import torch

    out = {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]}
    src = torch.empty(kv_bytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    out["memcpy_bytes"] = kv_bytes
    out["memcpy_s_median"] = statistics.median(times)
    out["memcpy_gb_per_s"] = kv_bytes / out["memcpy_s_median"] / 1e9
    del src, dst
    fio = shutil.which("fio")
    if fio is None:
        out["fio"] = "not installed"
        return out
    fio_dir = work / "fio"
    fio_dir.mkdir()
    cmd = [fio, "--name=seqread", f"--directory={fio_dir}", "--rw=read", "--bs=1m",
           "--iodepth=16", "--ioengine=io_uring", "--direct=1", "--size=512m",
           "--output-format=json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    shutil.rmtree(fio_dir, ignore_errors=True)
    if proc.returncode != 0:
        out["fio"] = f"failed: {proc.stderr.strip()[-300:]}"
        return out
    job = json.loads(proc.stdout)["jobs"][0]["read"]
    out["fio_read_gb_per_s"] = job["bw_bytes"] / 1e9
    out["fio_read_s_for_kv"] = kv_bytes / job["bw_bytes"]
    out["fio_cmd"] = " ".join(Path(c).name if c == fio else c for c in cmd
                              if not c.startswith("--directory"))
    return out


# ---------------------------------------------------------------------------------------------
# Summary.

RATIOS = {  # name: (numerator mode, denominator mode)
    "ssd_restart_over_vllm_prefix": ("kvtier_ssd_restart", "vllm_prefix"),
    "recompute_over_ssd_restart": ("no_cache", "kvtier_ssd_restart"),
    "ssd_codec_restart_over_ssd_restart": ("kvtier_ssd_codec_restart", "kvtier_ssd_restart"),
    "host_over_vllm_prefix": ("kvtier_host", "vllm_prefix"),
    "serve_recompute_over_serve_restart": ("serve_cold", "kvtier_ssd_serve_restart"),
    "serve_restart_over_offline_restart": ("kvtier_ssd_serve_restart", "kvtier_ssd_restart"),
    "service_recompute_over_service_host": ("service_cold", "kvtier_service_host_after_restart"),
    "service_ssd_over_offline_ssd_restart": ("kvtier_service_ssd_after_restart",
                                             "kvtier_ssd_restart"),
    "service_host_after_restart_over_vllm_prefix": ("kvtier_service_host_after_restart",
                                                    "vllm_prefix"),
    "service_ssd_after_restart_over_vllm_prefix": ("kvtier_service_ssd_after_restart",
                                                   "vllm_prefix"),
}
# The targets at the longest document (4096 tokens): (ratio, bound, "max" | "min").
TARGETS = (("ssd_restart_over_vllm_prefix", 1.5, "max"),
           ("recompute_over_ssd_restart", 10.0, "min"),
           ("service_host_after_restart_over_vllm_prefix", 1.10, "max"),
           ("service_ssd_after_restart_over_vllm_prefix", 1.25, "max"))


def summarize(processes: dict, docs: dict, kv_bytes_token: int, layers: int) -> dict:
    lengths = sorted(docs)
    requests = [r for p in processes.values() for r in p["requests"]]
    present = [m for m in MODES + SERVE_MODES + SERVICE_MODES
               if any(r["label"] == m for r in requests)]

    def first_token(label, n):
        return next((r["first_token"] for r in requests
                     if r["label"] == label and r["length"] == n), None)

    table = {}
    for n in lengths:
        row = {"kv_bytes": n * kv_bytes_token}
        for mode in present:
            # Through the server the first token is text: compared with the server's own cold run.
            # On the service, with the service's own cold run (present whenever they are).
            reference = first_token("serve_cold" if mode in SERVE_MODES else
                                    "service_cold" if mode in SERVICE_MODES else "no_cache", n)
            mine = [r for r in requests if r["label"] == mode and r["length"] == n]
            ttfts = [r["ttft_s"] for r in mine]
            margins = [r.get("first_token_margin") for r in mine]
            entry = {"ttft_s_median": statistics.median(ttfts), "ttft_s": ttfts,
                     "first_token_matches": None if reference is None else
                     sum(r["first_token"] == reference for r in mine),
                     "first_token_margin_min": min((m for m in margins if m is not None),
                                                   default=None),
                     "requests": len(mine)}
            moved = [r["connector"] for r in mine if r["connector"]]
            if moved:
                for key in ("loaded_bytes", "loaded_tokens", "load_stall_s", "saved_chunks",
                            "stored_chunks", "stored_bytes"):
                    entry[f"{key}_median"] = statistics.median(m.get(key, 0) for m in moved)
                # The engine counts a hit per page and layer; per request, in pages.
                for tier in ("host", "ssd"):
                    entry[f"{tier}_hit_pages"] = [m.get(f"{tier}_hits", 0) // layers
                                                  for m in moved]
            row[mode] = entry
        cold = [r for r in requests if r["label"] == "cold_store" and r["length"] == n]
        row["kvtier_store_first_request_ttft_s"] = cold[0]["ttft_s"] if cold else None
        table[str(n)] = row

    ratios = {str(n): {name: table[str(n)][top]["ttft_s_median"] /
                       table[str(n)][bottom]["ttft_s_median"]
                       for name, (top, bottom) in RATIOS.items()
                       if top in present and bottom in present}
              for n in lengths}
    key = "4096" if "4096" in ratios else str(lengths[-1])
    verdict = {"at_length": int(key)}
    for name, bound, op in TARGETS:
        if name in ratios[key]:
            value = ratios[key][name]
            verdict[name] = {"value": value, f"target_{op}": bound,
                             "met": value <= bound if op == "max" else value >= bound}
    totals = {}
    for name, p in processes.items():
        if p.get("final_stats"):
            f = p["final_stats"]
            totals[name] = {**flat_counters(f), "tiers": f.get("tiers")}
    return {"modes": present, "table": table, "ratios": ratios, "targets": verdict,
            "connector_totals": totals}


# Options whose value is a path on the machine that ran: the report names them, not the path.
PATH_OPTIONS = {"--work-dir": "DIR", "--model-dir": "MODEL_DIR", "--from-raw": "RAW_JSON",
                "--service-bin": "KVTIER_BIN"}


def emit_report(report: dict, started: float, as_json: bool, render, work: Path,
                keep: bool) -> int:
    """The end of a run: the wall time into the report, the report printed (JSON, or `render`'s
    text), and the work directory removed unless the user named it (keep). Returns 0."""
    report["wall_s"] = time.perf_counter() - started
    print(json.dumps(report, indent=1) if as_json else render(report))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def portable_args(argv: list[str], path_options: dict | None = None) -> list[str]:
    """The command line as the report records it: the values of path_options (default: this
    script's PATH_OPTIONS) replaced by their placeholders."""
    path_options = PATH_OPTIONS if path_options is None else path_options
    out, placeholder = [], None
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if placeholder is not None:
            out.append(placeholder)
            placeholder = None
        elif eq and name in path_options:
            out.append(f"{name}={path_options[name]}")
        else:
            out.append(arg)
            placeholder = path_options.get(arg)
    return out


def render_text(report: dict) -> str:
    s = report["setup"]
    present = report["modes"]
    lines = [f"vLLM TTFT, {s['model']}; {s['layers']} layers; documents "
             f"{', '.join(str(n) for n in s['lengths'])} tokens sharing their first "
             f"{SHARED_TOKENS}; medians per mode and length over the requests counted below; "
             f"{s['cpus']} CPUs, load average {s['loadavg_1m_start']:.2f} at start"]
    if s["layers"] != 22:
        lines.append(f"NOTE: {s['layers']} layers instead of TinyLlama-1.1B's 22 (--layers).")
    w = {m: max(24, len(m)) for m in present}  # Each mode's column: its name fits.
    header = f"{'tokens':>7} {'KV MB':>7}" + "".join(f" {m:>{w[m]}}" for m in present)
    lines += ["", "TTFT median, seconds (requests)", header]
    for n, row in report["table"].items():
        lines.append(f"{n:>7} {row['kv_bytes'] / 1e6:>7.1f}" + "".join(
            f" {row[m]['ttft_s_median']:>{w[m] - 5}.3f} ({row[m]['requests']:>2})"
            for m in present))
    lines += ["", "kvtier per request: medians of loaded MB, load stall (time vLLM waited for a "
              "layer), pages gathered for a save; pages hit in each tier, request by request"]
    for n, row in report["table"].items():
        for m in ("kvtier_host", "kvtier_ssd_restart", "kvtier_ssd_serve_restart",
                  "kvtier_service_host_after_restart", "kvtier_service_ssd_after_restart"):
            if m not in present:
                continue
            e = row[m]
            lines.append(f"{n:>7} {m:<33} loaded {e.get('loaded_bytes_median', 0) / 1e6:6.1f}"
                         f" MB  stall {e.get('load_stall_s_median', 0):6.3f} s  saved pages "
                         f"{e.get('saved_chunks_median', 0):3.0f}  host hits "
                         f"{e.get('host_hit_pages')}  ssd hits {e.get('ssd_hit_pages')}")
    lines += ["", "Ratios of medians"]
    for n, r in report["ratios"].items():
        lines.append(f"{n:>7} " + "   ".join(f"{name} {v:.2f}" for name, v in r.items()))
    t = report["targets"]
    for name, value, op in TARGETS:
        bound = f"{'<=' if op == 'max' else '>='} {value:g}"
        if name in t:
            lines.append(f"target at {t['at_length']}: {name} {t[name]['value']:.2f} ({bound}: "
                         f"{'met' if t[name]['met'] else 'MISSED'})")
    m = report["machine"]
    lines += ["", f"machine: memcpy of {m['memcpy_bytes'] / 1e6:.1f} MB (largest document's KV) "
              f"{m['memcpy_s_median'] * 1e3:.1f} ms ({m['memcpy_gb_per_s']:.1f} GB/s)"]
    if "fio_read_gb_per_s" in m:
        lines.append(f"machine: fio sequential read 1 MiB qd16 O_DIRECT "
                     f"{m['fio_read_gb_per_s']:.2f} GB/s, "
                     f"{m['fio_read_s_for_kv'] * 1e3:.0f} ms for that KV")
    else:
        lines.append(f"machine: fio {m.get('fio')}")
    mismatches = [(n, mode) for n, row in report["table"].items() for mode in present
                  if row[mode]["first_token_matches"] not in (None, row[mode]["requests"])]
    lines.append("first token equal to the cold run's in every request" if not mismatches else
                 f"first token differs from the cold run's in: {mismatches}")
    margins = [row[mode]["first_token_margin_min"] for row in report["table"].values()
               for mode in present if row[mode].get("first_token_margin_min") is not None]
    if margins:
        lines.append(f"least lead of a first token over the runner-up: {min(margins):.2f} "
                     "(logprob; a model whose lead is small lets rounding differences between "
                     "vLLM's code paths flip it)")
    lines.append(f"wall time {report['wall_s'] / 60:.1f} min")
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--lengths", default="1024,2048,4096",
                        help="document lengths in tokens, comma-separated (default 1024,2048,"
                             "4096; 8192 adds about 10 minutes per prefill-bound mode on 2 cores)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="no-cache requests per length, and restarts for mode (d)")
    parser.add_argument("--hit-repeats", type=int, default=5,
                        help="hits per length in the processes of modes (b) and (c)")
    parser.add_argument("--layers", type=int, default=22,
                        help="layers of the TinyLlama-1.1B-shaped model (default 22, its own)")
    parser.add_argument("--model-dir", type=Path,
                        help="an existing model from tests/vllm/make_model.py (else one is made)")
    parser.add_argument("--work-dir", type=Path, help="keep logs and the cache here")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--from-raw", type=Path,
                        help="report on the measurements of an earlier run (WORK_DIR/raw.json) "
                             "instead of measuring; give that run's --model-dir and --lengths")
    parser.add_argument("--process-timeout-s", type=int, default=1800)
    parser.add_argument("--modes",
                        help="offline: modes a-d (vLLM's offline API); serve: mode e (through "
                             "`vllm serve`); service: mode f (on kvtier's node service); "
                             "comma-separated (default: all three; offline for --model-kind "
                             "mla and swa)")
    parser.add_argument("--model-kind", choices=sorted(MODEL_KINDS), default="llama",
                        help="the model's attention: llama (full), mla (DeepSeek-V2's latent "
                             "attention) or swa (Gemma-3's sliding-window/full mix); mla and swa "
                             "run --modes offline only")
    parser.add_argument("--ssd-codec",
                        help="also measure the hit after a restart from SSD records encoded with "
                             "this codec (the connector's `codec`: ecq6, int8, ...), in its own "
                             "cache directory, as mode kvtier_ssd_codec_restart (offline modes)")
    parser.add_argument("--service-bin", type=Path,
                        default=REPO / "build" / "tools" / "cli" / "kvtier",
                        help="mode f's kvtier CLI, run as `kvtier serve` (default: the build's)")
    return parser


def measure_or_read(args, parser: argparse.ArgumentParser, work: Path, docs, lengths: list[int],
                    per_token: int, loadavg_start: float) -> tuple[dict, dict, float]:
    """The machine's limits, the processes' measurements and the 1-minute load average at the
    start: those of --from-raw's earlier run, or measured now (and kept in WORK_DIR/raw.json)."""
    if args.from_raw:
        raw = json.loads(args.from_raw.read_text())
        machine, processes, loadavg_start = raw["machine"], raw["processes"], raw["loadavg"]
    else:
        machine = machine_limits(work, max(lengths) * per_token)
        modes = set(args.modes.split(","))
        if not modes <= {"offline", "serve", "service"} or not modes:
            parser.error("--modes: offline, serve, service, or several of them")
        processes = measure(args, work, docs) if "offline" in modes else {}
        if "serve" in modes:
            processes.update(measure_serve(args, work, docs))
        if "service" in modes:
            processes.update(measure_service(args, work, docs))
        (work / "raw.json").write_text(json.dumps(
            {"machine": machine, "processes": processes, "loadavg": loadavg_start}))
    return machine, processes, loadavg_start


def main() -> int:
    parser = make_parser()
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)

    try:
        import kvtier.vllm  # noqa: F401 - the connector must import where vLLM's workers run.
    except ImportError as e:
        sys.exit(f"vllm_ttft: {e}: run with the vLLM venv's python (scripts/setup_vllm_venv.sh) and PYTHONPATH=build/python")
    lengths = sorted(int(n) for n in args.lengths.split(","))
    if min(lengths) <= SHARED_TOKENS + BLOCK_TOKENS or args.repeats < 1:
        parser.error(f"lengths must exceed {SHARED_TOKENS + BLOCK_TOKENS} and repeats be >= 1")
    arch, args.block_tokens, model_text = MODEL_KINDS[args.model_kind]
    if args.modes is None:
        args.modes = "offline,serve,service" if args.model_kind == "llama" else "offline"
    if args.model_kind != "llama" and set(args.modes.split(",")) != {"offline"}:
        parser.error(f"--model-kind {args.model_kind} runs --modes offline only")
    if args.ssd_codec and "offline" not in args.modes.split(","):
        parser.error("--ssd-codec measures an offline mode: add offline to --modes")
    started = time.perf_counter()
    loadavg_start = os.getloadavg()[0]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kvtier-vllm-ttft-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model_dir is None and args.from_raw:
        parser.error("--from-raw needs --model-dir")
    if args.model_dir is None:
        args.model_dir = work / "model"
        log(f"making the model ({arch}, {args.layers} layers) in {args.model_dir}")
        subprocess.run([sys.executable, str(REPO / "tests" / "vllm" / "make_model.py"),
                        str(args.model_dir), "--arch", arch, "--shape", "tinyllama-1.1b",
                        "--layers", str(args.layers), "--sliding-window", str(SWA_WINDOW)],
                       check=True, capture_output=True)
    layers = json.loads((args.model_dir / "config.json").read_text())["num_hidden_layers"]
    args.max_model_len = max(lengths) + 2 * args.block_tokens
    per_token = kv_bytes_per_token(args.model_dir)
    # vLLM's KV space: every document at once (mode b keeps them all), with room to spare.
    args.kv_space_gib = max(1, -(-3 * sum(lengths) * per_token // (1 << 30)))
    docs = make_documents(lengths, args.seed)
    machine, processes, loadavg_start = measure_or_read(args, parser, work, docs, lengths,
                                                        per_token, loadavg_start)
    report = {"setup": {"model": model_text, "model_kind": args.model_kind,
                        "layers": layers, "lengths": lengths, "shared_prefix_tokens":
                        SHARED_TOKENS, "repeats": args.repeats,
                        "hit_repeats": args.hit_repeats, "block_tokens": args.block_tokens,
                        "ssd_codec": args.ssd_codec,
                        "kv_bytes_per_token": per_token, "cpus": os.cpu_count(),
                        "loadavg_1m_start": loadavg_start,
                        "command": "bench/vllm_ttft.py " + " ".join(portable_args(sys.argv[1:]))},
              "machine": machine}
    report.update(summarize(processes, docs, per_token, layers))
    report["machine"]["loadavg_1m_end"] = os.getloadavg()[0]
    report["processes"] = {name: {"startup_s": p["startup_s"], "wall_s": p["wall_s"],
                                  "loadavg_1m": p.get("loadavg_1m"),
                                  "requests": [{k: v for k, v in r.items() if k != "tokens"}
                                               for r in p["requests"]]}
                           for name, p in processes.items()}
    return emit_report(report, started, args.json, render_text, work,
                       keep=args.work_dir is not None)


if __name__ == "__main__":
    sys.exit(main())
