"""The module from several Python threads: correctness under concurrency, and proof that a
blocking call releases the GIL (another Python thread keeps running during it)."""

import threading
import time

import numpy as np

import kvtier


def test_concurrent_store_load(make_engine):
    engine = make_engine(host_bytes=4 << 20)
    threads, rounds = 4, 25
    errors = []

    def worker(index):
        try:
            rng = np.random.default_rng(index)
            ns = engine.make_namespace(f"thread-{index}")
            for r in range(rounds):
                tokens = np.arange(2 * 16, dtype=np.uint32) + np.uint32(100000 * index + r * 64)
                src = rng.standard_normal((2, engine.layers) + engine.block_shape).astype(
                    engine.numpy_dtype)
                engine.store(ns, tokens, src).wait()
                hit = engine.lookup(ns, tokens)
                assert hit.matched_tokens == 32, hit.matched_tokens
                dst = kvtier.empty_blocks(engine, 2)
                with engine.load(ns, tokens, dst) as load:
                    for layer in range(engine.layers):
                        load.wait_layer(layer)
                np.testing.assert_array_equal(dst, src)
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append((index, repr(e)))

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    stats = engine.stats()
    assert stats.stores == threads * rounds


def test_blocking_call_releases_gil():
    """Opening an engine with a large pre-faulted host tier blocks in C++ for a while. Had the
    call kept the GIL, the main thread could not run between the call's start and end: the longest
    gap between its loop iterations inside that window would be the whole call. With the GIL
    released it stays a small fraction of it (the switch interval plus scheduler noise)."""
    for host_mib in (128, 256, 512, 1024):
        window = {}

        def opener():
            window["start"] = time.perf_counter()
            engine = kvtier.Engine(
                layout="layers=2,kv_heads=8,head_dim=128,dtype=f16,block_tokens=16",
                host_bytes=host_mib << 20)
            window["end"] = time.perf_counter()
            engine.close()

        thread = threading.Thread(target=opener)
        stamps = []
        thread.start()
        while thread.is_alive():
            stamps.append(time.perf_counter())
        thread.join()
        assert "end" in window, "the engine failed to open"
        duration = window["end"] - window["start"]
        if duration >= 0.15:
            break
    inside = [window["start"]] + [t for t in stamps if window["start"] < t < window["end"]]
    inside.append(window["end"])
    longest = float(np.diff(np.array(inside)).max())
    assert longest < 0.5 * duration, (longest, duration, len(inside))
