#!/usr/bin/env python3
"""llama.cpp's prompt cache (llama-cpp-python) against kvtier's reuse of the same prompt.

Goal: time to first token (TTFT) on a repeated long prompt, and the bytes each keeps per cached
token, with the same GGUF model (../shared/models/stories260K.gguf relative to the repository
root: 5 layers, 4 KV heads of 8 dims, F32 weights; its context is used at 512 tokens).

What is compared, one round each, rounds alternating the order of the two runtimes:
  llama.cpp (one fresh Python process per round, model loaded, one warm-up call on another prompt):
    cold        reset(), no cache: the whole prompt computed
    ram_hit     LlamaRAMCache: the prompt run once (stored), reset(), run again: state loaded
    disk_hit    LlamaDiskCache (a fresh directory): the same, in the same process
  llama.cpp after a restart (a second fresh process on that directory):
    disk_restart_hit  the first call of the new process, served from LlamaDiskCache
  kvtier (`kvtier run --steps 1 --temperature 0 --context 512 --cache-dir DIR`, its reference
  runtime):
    cold        first process on an empty DIR: the whole prompt computed (and stored)
    host_hit    the same process prefills the prompt again (`--repeat 2`): the cached chunks
                loaded from the host tier
    ssd_restart_hit  a second process on DIR: the cached chunks loaded from the SSD tier
TTFT for llama.cpp is the wall time of create_completion(prompt, max_tokens=1) (tokenize, prefill,
sample). For kvtier it is the CLI's ttft_ms (--json: lookup, then the SSD loads beside the compute
of the rest, split into lookup_ms and compute_ms; tokenizing and sampling one token are not in it,
microseconds here). Process wall times (model load included) are reported too, and the time the
device itself takes to read the segment with O_DIRECT. The first generated token of every hit is
checked against the cold run of the same runtime. Bytes per token: llama.cpp's saved state
(llama_state_size, and the whole pickled LlamaState with its logits) and its disk cache
directory; kvtier's cache directory (segments and index); each divided by its cached tokens.

  python3 bench/peers/llama_prompt_cache.py [--json] [--rounds 5] [--prompt-tokens 449]
      [--model PATH] [--kvtier-cli PATH]

The plot in docs/benchmarks.md is drawn from the --json report by bench/plot.py llama.

llama.cpp runs with one thread (--llama-threads 1) because its default here, n_threads_batch = 2 on
2 shared cores, spin-waits at every graph barrier while other processes hold a core: measured on
this prompt, 2.1-3.4 s per prefill with 2 threads against 0.14 s with 1.

Installs llama-cpp-python into .venv-peers when missing: pip builds llama.cpp from source, which
takes 10-20 minutes on 2 cores. A benchmark, not a test.
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

CONTEXT_TOKENS = 512
DEFAULT_MODEL = peerlib.MODELS_DIR / "stories260K.gguf"
SENTENCES = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    "One day, she saw a big red ball under a tall green tree.",
    "Her mom said they could take the ball home if nobody came for it.",
    "Lily waited and waited, and then a small boy ran over to say thank you.",
    "They played together until the sun went down and the sky was pink.",
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--prompt-words", type=int, default=240,
                   help="words in the prompt (240: about 460 tokens with this vocabulary)")
    p.add_argument("--prompt-tokens", type=int, default=0,
                   help="cut the prompt to this many tokens, BOS included (449 = 28 chunks of "
                        "16 + 1: kvtier then computes one token on a hit, as llama.cpp does)")
    p.add_argument("--kvtier-cli", default=str(peerlib.KVTIER_CLI_DEFAULT))
    p.add_argument("--kvtier-python", default=str(peerlib.KVTIER_PYTHON_DEFAULT))
    p.add_argument("--llama-threads", type=int, default=1,
                   help="llama.cpp n_threads and n_threads_batch (see the module comment)")
    p.add_argument("--timeout-s", type=int, default=300, help="bound on every child process")
    p.add_argument("--worker", choices=["inproc", "restart"], help=argparse.SUPPRESS)
    p.add_argument("--disk-dir", help=argparse.SUPPRESS)
    p.add_argument("--prompt-file", help=argparse.SUPPRESS)
    return p.parse_args()


def make_prompt(words: int) -> str:
    out, i = [], 0
    while sum(len(s.split()) for s in out) < words:
        out.append(SENTENCES[i % len(SENTENCES)])
        i += 1
    return " ".join(out)


def cut_prompt(model: str, prompt: str, tokens: int) -> str:
    """The prompt's first `tokens` tokens (BOS included) as text, with llama.cpp's tokenizer; the
    report gives each runtime's own count of the result."""
    from llama_cpp import Llama
    vocab = Llama(model_path=model, vocab_only=True, verbose=False)
    ids = vocab.tokenize(prompt.encode(), add_bos=False)[: tokens - 1]
    return vocab.detokenize(ids).decode(errors="replace").strip()


# ---------------------------------------------------------------------------------------------
# llama.cpp workers (run inside .venv-peers as separate processes).

def _open_llama(model: str, threads: int):
    from llama_cpp import Llama
    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=CONTEXT_TOKENS, seed=0, verbose=False,
                n_threads=threads, n_threads_batch=threads)
    return llm, (time.perf_counter() - t0) * 1e3


def _ttft(llm, prompt: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=1, temperature=0.0)
    return (time.perf_counter() - t0) * 1e3, out["choices"][0]["text"]


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def worker_inproc(args) -> dict:
    import pickle

    from llama_cpp import LlamaDiskCache, LlamaRAMCache
    prompt = Path(args.prompt_file).read_text()
    llm, load_ms = _open_llama(args.model, args.llama_threads)
    tokens = len(llm.tokenize(prompt.encode(), add_bos=True))
    _ttft(llm, "Warm up on another prompt.")
    llm.set_cache(None)
    llm.reset()
    cold_ms, cold_text = _ttft(llm, prompt)

    ram = LlamaRAMCache(capacity_bytes=1 << 30)
    llm.set_cache(ram)
    llm.reset()
    _ttft(llm, prompt)  # computed, then saved into the cache
    state = next(iter(ram.cache_state.values()))
    llm.reset()
    ram_ms, ram_text = _ttft(llm, prompt)
    t0 = time.perf_counter()
    llm.load_state(state)  # the restore alone, as the hit above did it
    load_state_ms = (time.perf_counter() - t0) * 1e3

    disk_dir = Path(args.disk_dir)
    disk = LlamaDiskCache(cache_dir=str(disk_dir), capacity_bytes=1 << 30)
    llm.set_cache(disk)
    llm.reset()
    _ttft(llm, prompt)
    llm.reset()
    disk_ms, disk_text = _ttft(llm, prompt)  # the hit pops the entry; the run saves it again
    meta = llm.metadata
    return {"tokens": tokens, "load_ms": load_ms, "cold_ms": cold_ms, "ram_hit_ms": ram_ms,
            "disk_hit_ms": disk_ms, "load_state_ms": load_state_ms, "cold_text": cold_text,
            "hits_agree": ram_text == cold_text and disk_text == cold_text,
            "state_tokens": int(state.n_tokens),
            "llama_state_bytes": int(state.llama_state_size),
            "pickled_state_bytes": len(pickle.dumps(state)),
            "disk_dir_bytes": _dir_bytes(disk_dir),
            "n_threads": getattr(llm, "n_threads", None),
            "type_k": "f16 (llama-cpp-python default)",
            "model_meta": {k: meta.get(k) for k in (
                "llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                "llama.attention.head_count_kv")}}


def worker_restart(args) -> dict:
    from llama_cpp import LlamaDiskCache
    t_start = time.perf_counter()
    prompt = Path(args.prompt_file).read_text()
    llm, load_ms = _open_llama(args.model, args.llama_threads)
    disk = LlamaDiskCache(cache_dir=args.disk_dir, capacity_bytes=1 << 30)
    llm.set_cache(disk)
    found = llm.tokenize(prompt.encode(), add_bos=True) in disk
    hit_ms, text = _ttft(llm, prompt)
    return {"load_ms": load_ms, "disk_restart_hit_ms": hit_ms, "found": bool(found), "text": text,
            "in_process_ms": (time.perf_counter() - t_start) * 1e3}


def run_llama_worker(kind: str, args, prompt_file: Path, disk_dir: Path) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run(
        ["timeout", "--kill-after=5", str(args.timeout_s), sys.executable, __file__,
         "--worker", kind, "--model", args.model, "--prompt-file", str(prompt_file),
         "--llama-threads", str(args.llama_threads),
         "--disk-dir", str(disk_dir)],
        capture_output=True, text=True)
    wall_ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise RuntimeError(f"llama worker {kind} exited {r.returncode}:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["process_wall_ms"] = wall_ms
    return out


# ---------------------------------------------------------------------------------------------
# kvtier.

def run_kvtier(args, prompt: str, cache_dir: Path, repeat: int = 1) -> dict:
    """One `kvtier run`; with repeat=2 the prompt is prefilled a second time in the same process
    (`--repeat 2`), its chunks loaded from the host tier the first prefill filled."""
    argv = ["timeout", "--kill-after=5", str(args.timeout_s), args.kvtier_cli, "run",
            "--model", args.model, "--prompt", prompt, "--steps", "1", "--temperature", "0",
            "--context", str(CONTEXT_TOKENS), "--cache-dir", str(cache_dir), "--json",
            "--repeat", str(repeat)]
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True)
    wall_ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise RuntimeError(f"kvtier run exited {r.returncode}:\n{r.stderr[-3000:]}")
    j = json.loads(r.stdout)
    return {"prompt_tokens": j["prompt_tokens"], "cached_tokens": j["cached_tokens"],
            "computed_tokens": j["computed_tokens"], "prefill_ms": j["ttft_ms"],
            "lookup_ms": j["lookup_ms"], "compute_ms": j["compute_ms"],
            "other_ms": j["ttft_ms"] - j["lookup_ms"] - j["compute_ms"],
            "chunks_per_tier": j["cached_chunks_per_tier"], "process_wall_ms": wall_ms,
            "text": j["text"], "repeats": j.get("repeats", [])}


# ---------------------------------------------------------------------------------------------

def one_round(args, r: int, prompt: str, prompt_file: Path, run_dir: Path) -> dict:
    llama_dir = run_dir / f"llama-disk-{r}"
    kv_dir = run_dir / f"kvtier-cache-{r}"
    kv_dir.mkdir()
    out = {}

    def llama():
        out["llama"] = run_llama_worker("inproc", args, prompt_file, llama_dir)
        out["llama_restart"] = run_llama_worker("restart", args, prompt_file, llama_dir)

    def kvt():
        # Cold, then the same prompt again in the same process: a host-tier hit.
        out["kvtier_cold"] = run_kvtier(args, prompt, kv_dir, repeat=2)
        out["kvtier_cache_dir_bytes"] = _dir_bytes(kv_dir)
        # The device's own time for the segment's bytes, O_DIRECT, one read in flight.
        segs = sorted(kv_dir.glob("seg-*"))
        out["segment_direct_read_ms"] = {
            f"{b // 1024}KiB_reads": sum(peerlib.direct_read_ms(p, b) for p in segs)
            for b in (4096, 1 << 20)}
        out["kvtier_restart"] = run_kvtier(args, prompt, kv_dir)

    for step in ((llama, kvt) if r % 2 == 0 else (kvt, llama)):
        step()
    shutil.rmtree(llama_dir, ignore_errors=True)
    shutil.rmtree(kv_dir, ignore_errors=True)
    return out


def _hit_parts(rounds: list[dict]) -> dict:
    """The parts of a hit's time, medians over the rounds."""
    med = peerlib.median
    return {
        "llama_load_state_ms": med([r["llama"]["load_state_ms"] for r in rounds]),
        "kvtier_restart_lookup_ms": med([r["kvtier_restart"]["lookup_ms"] for r in rounds]),
        # The SSD loads run beside the forward pass (layer-gated), so they are in compute_ms.
        "kvtier_restart_load_and_compute_ms": med([r["kvtier_restart"]["compute_ms"]
                                                   for r in rounds]),
        "kvtier_restart_other_ms": med([r["kvtier_restart"]["other_ms"] for r in rounds]),
        "segment_direct_read_4KiB_reads_ms": med([r["segment_direct_read_ms"]["4KiB_reads"]
                                                  for r in rounds]),
        "segment_direct_read_1MiB_reads_ms": med([r["segment_direct_read_ms"]["1024KiB_reads"]
                                                  for r in rounds]),
        "kvtier_restart_computed_tokens": rounds[0]["kvtier_restart"]["computed_tokens"],
        "kvtier_cold_compute_ms": med([r["kvtier_cold"]["compute_ms"] for r in rounds]),
    }


def _process_walls(rounds: list[dict]) -> dict:
    """Whole processes' wall times, medians over the rounds."""
    med = peerlib.median
    return {
        "llama_restart_process_ms": med([r["llama_restart"]["process_wall_ms"] for r in rounds]),
        "llama_restart_model_load_ms": med([r["llama_restart"]["load_ms"] for r in rounds]),
        "kvtier_cold_process_ms": med([r["kvtier_cold"]["process_wall_ms"] for r in rounds]),
        "kvtier_restart_process_ms": med([r["kvtier_restart"]["process_wall_ms"]
                                          for r in rounds]),
    }


def _checks(rounds: list[dict]) -> dict:
    """Whether every round's hits agreed with its cold run and found what they should."""
    return {
        "llama_hits_agree_with_cold": all(r["llama"]["hits_agree"] for r in rounds),
        "llama_restart_found_entry": all(r["llama_restart"]["found"] for r in rounds),
        "llama_restart_agrees": all(r["llama_restart"]["text"] == r["llama"]["cold_text"]
                                    for r in rounds),
        "kvtier_restart_agrees": all(r["kvtier_restart"]["text"] == r["kvtier_cold"]["text"]
                                     for r in rounds),
        "kvtier_restart_cached_tokens": [r["kvtier_restart"]["cached_tokens"] for r in rounds],
        "kvtier_host_hit_cached_tokens": [r["kvtier_cold"]["repeats"][0]["cached_tokens"]
                                          for r in rounds],
        "kvtier_host_hit_only_host": all(
            set(r["kvtier_cold"]["repeats"][0]["cached_chunks_per_tier"]) == {"host"}
            for r in rounds),
    }


def summarize(rounds: list[dict]) -> dict:
    med = peerlib.median
    l0, k0 = rounds[0]["llama"], rounds[0]["kvtier_cold"]
    meta = l0["model_meta"]
    layers = int(meta["llama.block_count"])
    kv_dim = (int(meta["llama.embedding_length"]) * int(meta["llama.attention.head_count_kv"])
              // int(meta["llama.attention.head_count"]))
    kv_cached = rounds[0]["kvtier_restart"]["cached_tokens"]
    ttft = {
        "llama_cold_ms": med([r["llama"]["cold_ms"] for r in rounds]),
        "llama_ram_hit_ms": med([r["llama"]["ram_hit_ms"] for r in rounds]),
        "llama_disk_hit_ms": med([r["llama"]["disk_hit_ms"] for r in rounds]),
        "llama_disk_restart_hit_ms": med([r["llama_restart"]["disk_restart_hit_ms"]
                                          for r in rounds]),
        "kvtier_cold_ms": med([r["kvtier_cold"]["prefill_ms"] for r in rounds]),
        "kvtier_ssd_restart_hit_ms": med([r["kvtier_restart"]["prefill_ms"] for r in rounds]),
        "kvtier_host_hit_ms": med([r["kvtier_cold"]["repeats"][0]["ttft_ms"] for r in rounds]),
    }
    parts = _hit_parts(rounds)
    wall = _process_walls(rounds)
    bytes_per_token = {
        "raw_kv_f32": layers * 2 * kv_dim * 4,
        "raw_kv_f16": layers * 2 * kv_dim * 2,
        "llama_state": l0["llama_state_bytes"] / l0["state_tokens"],
        "llama_pickled_state": l0["pickled_state_bytes"] / l0["state_tokens"],
        "llama_disk_cache_dir": l0["disk_dir_bytes"] / l0["state_tokens"],
        "kvtier_cache_dir": rounds[0]["kvtier_cache_dir_bytes"] / max(1, kv_cached),
    }
    checks = _checks(rounds)
    ratios = {
        "kvtier_ssd_restart_hit_vs_llama_disk_restart_hit":
            peerlib.ratio(ttft["kvtier_ssd_restart_hit_ms"], ttft["llama_disk_restart_hit_ms"]),
        "kvtier_ssd_restart_hit_vs_llama_ram_hit":
            peerlib.ratio(ttft["kvtier_ssd_restart_hit_ms"], ttft["llama_ram_hit_ms"]),
        "kvtier_host_hit_vs_llama_ram_hit":
            peerlib.ratio(ttft["kvtier_host_hit_ms"], ttft["llama_ram_hit_ms"]),
        "kvtier_host_hit_vs_llama_disk_hit":
            peerlib.ratio(ttft["kvtier_host_hit_ms"], ttft["llama_disk_hit_ms"]),
        "kvtier_cold_vs_llama_cold": peerlib.ratio(ttft["kvtier_cold_ms"], ttft["llama_cold_ms"]),
        "kvtier_bytes_per_token_vs_llama_disk":
            peerlib.ratio(bytes_per_token["kvtier_cache_dir"],
                          bytes_per_token["llama_disk_cache_dir"]),
    }
    return {"prompt_tokens": {"llama": l0["tokens"], "kvtier": k0["prompt_tokens"],
                              "kvtier_cached": kv_cached, "llama_state_tokens": l0["state_tokens"]},
            "ttft_ms_median": ttft, "speedup_hit_over_cold": {
                "llama_ram": peerlib.ratio(ttft["llama_cold_ms"], ttft["llama_ram_hit_ms"]),
                "llama_disk_restart": peerlib.ratio(ttft["llama_cold_ms"],
                                                    ttft["llama_disk_restart_hit_ms"]),
                "kvtier_ssd_restart": peerlib.ratio(ttft["kvtier_cold_ms"],
                                                    ttft["kvtier_ssd_restart_hit_ms"]),
                "kvtier_host": peerlib.ratio(ttft["kvtier_cold_ms"], ttft["kvtier_host_hit_ms"])},
            "hit_parts_ms_median": parts, "process_wall_ms_median": wall,
            "bytes_per_token": bytes_per_token,
            "ratios": ratios, "checks": checks,
            "llama_n_threads": l0["n_threads"], "llama_type_k": l0["type_k"]}


def main() -> None:
    args = parse_args()
    if args.worker:
        out = worker_inproc(args) if args.worker == "inproc" else worker_restart(args)
        print(json.dumps(out))
        return
    if not Path(args.model).is_file():
        sys.exit(f"llama_prompt_cache: no model at {args.model}. The default is "
                 f"../shared/models/stories260K.gguf relative to the repository root (see that "
                 f"folder's README.md); pass --model PATH to use another GGUF file.")
    if not Path(args.kvtier_cli).is_file():
        sys.exit(f"llama_prompt_cache: no kvtier CLI at {args.kvtier_cli}; build it or pass "
                 f"--kvtier-cli PATH")
    peerlib.ensure_venv([("llama_cpp", "llama-cpp-python")], Path(args.kvtier_python),
                        pip_env={"CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)},
                        note="pip builds llama.cpp from source: 10-20 minutes on 2 cores")
    run_dir = Path(tempfile.mkdtemp(prefix="kvtier-peers-llama-"))
    prompt = make_prompt(args.prompt_words)
    if args.prompt_tokens:
        prompt = cut_prompt(args.model, prompt, args.prompt_tokens)
    prompt_file = run_dir / "prompt.txt"
    prompt_file.write_text(prompt)
    rounds = []
    t0 = time.monotonic()
    try:
        for r in range(args.rounds):
            res = one_round(args, r, prompt, prompt_file, run_dir)
            rounds.append(res)
            log(f"round {r + 1}/{args.rounds}: llama cold {res['llama']['cold_ms']:.2f} ms, "
                f"ram hit {res['llama']['ram_hit_ms']:.2f}, disk hit "
                f"{res['llama']['disk_hit_ms']:.2f}, disk hit after restart "
                f"{res['llama_restart']['disk_restart_hit_ms']:.2f} | kvtier cold "
                f"{res['kvtier_cold']['prefill_ms']:.2f} ms, SSD hit after restart "
                f"{res['kvtier_restart']['prefill_ms']:.2f} "
                f"({res['kvtier_restart']['cached_tokens']} tokens cached)")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    s = summarize(rounds)
    report = {"benchmark": "llama_prompt_cache",
              "versions": {"llama-cpp-python": peerlib.package_version("llama-cpp-python"),
                           "kvtier_cli": peerlib.report_path(args.kvtier_cli)},
              "config": {"rounds": args.rounds, "model": Path(args.model).name,
                         "prompt_tokens_cut": args.prompt_tokens,
                         "context_tokens": CONTEXT_TOKENS, "prompt_words": args.prompt_words,
                         "cpus": os.cpu_count()},
              "summary": s,
              "rounds": [{"llama": {k: v for k, v in r["llama"].items()
                                    if k.endswith("_ms")},
                          "llama_restart": {k: v for k, v in r["llama_restart"].items()
                                            if k.endswith("_ms")},
                          "kvtier_cold": {k: v for k, v in r["kvtier_cold"].items()
                                          if k != "text"},
                          "kvtier_restart": {k: v for k, v in r["kvtier_restart"].items()
                                             if k != "text"}} for r in rounds],
              "elapsed_s": time.monotonic() - t0}
    if args.json:
        print(peerlib.dump_json(report))
    else:
        print(peerlib.dump_json(s))


if __name__ == "__main__":
    main()
