#!/usr/bin/env python3
"""What gathering vLLM's CPU pages into canonical blocks costs: a save and a load of one document
through the host tier, with the pages moved byte for byte (backend vllm_cpu) and with the keys
transposed from the "vec" ISA's [head_dim][tokens] to one row per token (backend vllm_cpu_vec,
which the vLLM connector uses for a lossy codec; docs/integration.md).

The document of bench/paged_load_staging.py: 4096 tokens of a TinyLlama-shaped model (22 layers,
4 KV heads of 64, bf16, 32-token pages). Each round saves it (gather, store into the host tier)
and loads it back (host-tier hit, scatter) with each backend in turn, alternating; medians.

  PYTHONPATH=build/python .venv-vllm/bin/python bench/paged_gather.py [--rounds 7]
(torch is needed only to hold the pages; any venv with torch works.)
"""

import argparse
import statistics
import time

import kvtier
from paged_load_staging import CHUNKS, HEAD_DIM, HEADS, LAYERS, PAGE, paged_cache

BACKENDS = ("vllm_cpu", "vllm_cpu_vec")


def save_and_load(engine, cache, namespace) -> tuple[float, float]:
    tokens = list(range(CHUNKS * PAGE))
    t0 = time.perf_counter()
    save = engine.save_pages(cache, list(range(CHUNKS)), CHUNKS)
    save.commit(namespace, tokens)
    save.wait()
    save.close()
    t1 = time.perf_counter()
    load = engine.load_pages(namespace, tokens, cache, list(range(CHUNKS)), 0, CHUNKS)
    load.wait()
    load.close()
    return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds is at least 1")
    layout = dict(layers=LAYERS, kv_heads=HEADS, head_dim=HEAD_DIM, dtype="bf16", block_tokens=PAGE)
    engines = {b: kvtier.Engine(layout=layout, host_bytes=1 << 30) for b in BACKENDS}
    caches = {b: paged_cache(engines[b], b) for b in BACKENDS}
    namespaces = {b: engines[b].make_namespace(salt="bench") for b in BACKENDS}
    times = {b: ([], []) for b in BACKENDS}
    for _ in range(args.rounds):
        for b in BACKENDS:
            save_ms, load_ms = save_and_load(engines[b], caches[b], namespaces[b])
            times[b][0].append(save_ms)
            times[b][1].append(load_ms)
    for b in BACKENDS:
        print(f"{b:<13} save {statistics.median(times[b][0]):6.1f} ms, load "
              f"{statistics.median(times[b][1]):6.1f} ms (medians of {args.rounds})")
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
