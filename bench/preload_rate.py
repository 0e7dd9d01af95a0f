#!/usr/bin/env python3
"""`kvtier preload` against the model's own prefill rate, measured in the same run.

A trace of distinct prompts (random story words, about 300 tokens each, no two sharing a chunk)
is preloaded into a fresh cache directory: every chunk computed, stored (written through to the
SSD) and flushed. The limit is the model's prefill rate in that same process: computed tokens over
the time spent in the model (preload's compute_seconds); the ratio says how much of a preload
goes to computing and how much to caching. The same trace is then preloaded again (every chunk
found by lookup, nothing computed). Medians over rounds.

  python3 bench/preload_rate.py [--kvtier build/tools/cli/kvtier] [--models ../shared/models]
                                [--prompts 200] [--rounds 5]
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile

WORDS = ("once upon a time there was a little girl named lily she loved to play outside in the "
         "park one day saw big red ball under tree ran kicked it high into sky her friend tom came "
         "with and they laughed all long dog cat bird sun happy sad went home mom said good night "
         "toy box fun jump run walk look found gave smiled").split()


def story(rng, index, words):
    return f"{index} " + " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def kvtier(args, exe):
    out = subprocess.run([exe] + args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--kvtier", default=os.path.join(here, "..", "build", "tools", "cli", "kvtier"))
    p.add_argument("--models", default=os.path.join(here, "..", "..", "shared", "models"))
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--words", type=int, default=150)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    model = ["-m", os.path.join(a.models, "stories260K.bin"),
             "--tokenizer", os.path.join(a.models, "tok512.bin")]
    rng = random.Random(7)
    prompts = [story(rng, i, a.words) for i in range(a.prompts)]
    tmp = tempfile.mkdtemp(prefix="kvtier-preload-bench-")
    trace = os.path.join(tmp, "trace.jsonl")
    with open(trace, "w") as f:
        f.write("".join(json.dumps({"prompt": t}) + "\n" for t in prompts))
    rows = []
    try:
        for r in range(a.rounds):
            cache = os.path.join(tmp, f"cache{r}")
            args = ["preload"] + model + ["--cache-dir", cache, "--trace", trace, "--json", "-q"]
            cold = kvtier(args, a.kvtier)
            warm = kvtier(args, a.kvtier)
            shutil.rmtree(cache)
            assert warm["chunks_present"] == cold["chunks_stored"] == cold["chunks"], (cold, warm)
            rows.append({"limit": cold["computed_tokens"] / cold["compute_seconds"],
                         "cold": cold["computed_tokens_per_s"], "cold_s": cold["seconds"],
                         "compute_s": cold["compute_seconds"], "store_s": cold["store_seconds"],
                         "flush_s": cold["flush_seconds"], "warm_s": warm["seconds"],
                         "warm": warm["tokens"] / warm["seconds"], "tokens": cold["tokens"],
                         "chunks": cold["chunks"], "mib": cold["bytes_written"] / 2**20})
    finally:
        shutil.rmtree(tmp)
    print(f"{a.prompts} prompts, {rows[0]['tokens']} tokens, {rows[0]['chunks']} chunks, "
          f"{rows[0]['mib']:.1f} MiB written per cold preload")
    print("| round | prefill limit (tok/s) | cold preload (tok/s) | ratio | compute s | store s | "
          "flush s | total s | all cached (tok/s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, x in enumerate(rows, 1):
        print(f"| {i} | {x['limit']:.0f} | {x['cold']:.0f} | {x['cold'] / x['limit']:.2f}x | "
              f"{x['compute_s']:.3f} | {x['store_s']:.3f} | {x['flush_s']:.3f} | "
              f"{x['cold_s']:.3f} | {x['warm']:.0f} |")
    med = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
    ratio = statistics.median(x["cold"] / x["limit"] for x in rows)
    print(f"| **median** | **{med['limit']:.0f}** | **{med['cold']:.0f}** | **{ratio:.2f}x** | "
          f"**{med['compute_s']:.3f}** | **{med['store_s']:.3f}** | **{med['flush_s']:.3f}** | "
          f"**{med['cold_s']:.3f}** | **{med['warm']:.0f}** |")


if __name__ == "__main__":
    main()
