#!/usr/bin/env python3
"""How long Engine.load_pages takes to return, and a whole load, with a fresh staging buffer and
with one faulted in beforehand (PagedCache.warm_staging, what KvtierConnector does at startup).

A 4096-token document of a TinyLlama-shaped model (22 layers, 4 KV heads of 64, bf16, pages of
32 tokens in vLLM's CPU layout) is stored once to an SSD tier; then, in each round, a restarted
engine loads it into fresh pages, alternately without and with a warmed staging buffer. Medians.

  PYTHONPATH=build/python .venv-vllm/bin/python bench/paged_load_staging.py [--rounds 3]
(torch is needed only to hold the pages; any venv with torch works.)
"""

import argparse
import shutil
import statistics
import tempfile
import time

import torch

import kvtier

LAYERS, HEADS, HEAD_DIM, PAGE, CHUNKS = 22, 4, 64, 32, 128


def open_engine(cache_dir):
    return kvtier.Engine(layout=dict(layers=LAYERS, kv_heads=HEADS, head_dim=HEAD_DIM, dtype="bf16",
                                     block_tokens=PAGE),
                         host_bytes=1 << 30, ssd_dirs=[cache_dir], ssd_bytes=2 << 30)


def paged_cache(engine, backend="vllm_cpu"):
    pages = [torch.randn(CHUNKS + 8, HEADS, PAGE, 2 * HEAD_DIM).to(torch.bfloat16)
             for _ in range(LAYERS)]
    layers = [(t, t.data_ptr(), t.untyped_storage().nbytes(), list(t.shape), list(t.stride()), 2)
              for t in pages]
    return engine.paged_cache(backend, layers)


def one_load(cache_dir, warm):
    engine = open_engine(cache_dir)
    cache = paged_cache(engine)
    if warm:
        cache.warm_staging(CHUNKS * LAYERS * engine.block_bytes)
    ns = engine.make_namespace(salt="bench")
    t0 = time.perf_counter()
    load = engine.load_pages(ns, list(range(CHUNKS * PAGE)), cache, list(range(CHUNKS)), 0, CHUNKS)
    t1 = time.perf_counter()
    load.wait()
    t2 = time.perf_counter()
    load.close()
    engine.close()
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cache_dir = tempfile.mkdtemp(prefix="kvtier-staging-bench-")
    try:
        engine = open_engine(cache_dir)
        cache = paged_cache(engine)
        save = engine.save_pages(cache, list(range(CHUNKS)), CHUNKS)
        save.commit(engine.make_namespace(salt="bench"), list(range(CHUNKS * PAGE)))
        save.wait()
        save.close()
        engine.flush()
        engine.close()
        results = {False: [], True: []}
        for _ in range(args.rounds):
            for warm in (False, True):
                results[warm].append(one_load(cache_dir, warm))
        for warm in (False, True):
            starts = [r[0] for r in results[warm]]
            totals = [r[1] for r in results[warm]]
            print(f"{'warmed' if warm else 'fresh '} staging: load_pages returns after "
                  f"{statistics.median(starts):.1f} ms (median of {args.rounds}), whole load "
                  f"{statistics.median(totals):.1f} ms")
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
