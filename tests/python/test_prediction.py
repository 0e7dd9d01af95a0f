"""Access prediction from Python: the options (validated, defaults), lookup with a session id,
hint, and the statistics that tell whether prediction pays (docs/engine.md, "Access prediction").
Sessions visit in turn over a host tier too small for all of them, so without prediction every
returning session would be on the SSD only."""

import time

import numpy as np
import pytest

import kvtier

from conftest import LAYOUT


def blocks_for(engine, chunks, seed):
    rng = np.random.default_rng(seed)
    shape = (chunks, engine.layers) + engine.block_shape
    return rng.standard_normal(shape).astype(engine.numpy_dtype)


def wait_for_promotions(engine):
    for _ in range(5000):
        if engine.stats().prediction_tasks_pending == 0:
            return
        time.sleep(0.001)
    raise AssertionError("promotions still pending after 5 s")


def session_tokens(session, chunks=2):
    return np.arange(chunks * 16, dtype=np.uint32) + 10_000 * (session + 1)


def request(engine, ns, tokens, session_id, seed):
    """Lookup, load the cached prefix, store the rest; then the background work settles."""
    hit = engine.lookup(ns, tokens, session_id=session_id)
    chunks = len(tokens) // engine.block_tokens
    src = blocks_for(engine, chunks, seed)
    if hit.matched_tokens:
        dst = kvtier.empty_blocks(engine, len(hit.chunk_tiers))
        engine.load(ns, tokens, dst).wait()
        np.testing.assert_array_equal(dst, src[: len(hit.chunk_tiers)])
    if len(hit.chunk_tiers) < chunks:
        engine.store(ns, tokens, src).wait()
    wait_for_promotions(engine)
    return hit


def test_prediction_options(make_engine):
    with pytest.raises(kvtier.InvalidArgumentError, match="prediction"):
        make_engine(prediction=True, prediction_window=17)
    with pytest.raises(kvtier.InvalidArgumentError, match="prediction"):
        make_engine(prediction_blocks_max=1 << 20)  # Checked also while disabled.
    engine = make_engine(prediction=True, prediction_window=3, prediction_predict_k=2,
                         prediction_sessions_max=16, prediction_session_chunks_max=8,
                         prediction_successors_max=4, prediction_blocks_max=64)
    stats = engine.stats()
    for name in ("prediction_accesses", "prediction_scored", "prediction_hits",
                 "prediction_promoted_blocks", "prediction_useful_blocks", "hints",
                 "hint_promoted_blocks", "hint_useful_blocks", "prediction_dropped_blocks",
                 "prediction_sessions", "prediction_tasks_pending"):
        assert getattr(stats, name) == 0, name
    assert stats.prediction_accuracy == 0.0
    # The old call form still works; a request without a full chunk is no access.
    assert engine.lookup(engine.make_namespace(), list(range(5))).matched_tokens == 0
    assert engine.stats().prediction_accesses == 0


def test_hint_promotes_and_session_lookup_counts(make_engine):
    options = dict(prediction=True, write_policy="through", ssd_sync="none")
    engine = make_engine(**options)
    ns = engine.make_namespace("t")
    tokens = session_tokens(0)
    engine.store(ns, tokens, blocks_for(engine, 2, seed=0)).wait()
    engine.close()  # Write-through: the blocks are on the SSD; memory starts empty below.

    engine = make_engine(**options)
    engine.hint(ns, tokens, session_id=5)
    wait_for_promotions(engine)
    hit = request(engine, ns, tokens, session_id=5, seed=0)
    assert hit.chunk_tiers == [kvtier.Tier.HOST] * 2
    stats = engine.stats()
    assert stats.hints == 1
    assert stats.hint_promoted_blocks == 2 * engine.layers
    assert stats.hint_useful_blocks == 2 * engine.layers
    assert stats.prediction_accesses == 1
    assert stats.prediction_sessions == 1
    with pytest.raises(kvtier.InvalidArgumentError):
        engine.hint(ns, [-1])


def test_round_robin_sessions_are_promoted_ahead(make_engine):
    sessions = 6
    block_bytes = 2 * 16 * 2 * 16 * 2  # LAYOUT: 2 * block_tokens * kv_heads * head_dim * f16.
    assert LAYOUT.endswith("block_tokens=16")
    # Room for three sessions' blocks (2 chunks x 3 layers each) of six.
    engine = make_engine(prediction=True, write_policy="through", ssd_sync="none",
                         host_bytes=3 * 2 * 3 * block_bytes)
    assert engine.block_bytes == block_bytes
    ns = engine.make_namespace("t")
    in_host = 0
    rounds = 6
    for r in range(rounds):
        for s in range(sessions):
            hit = request(engine, ns, session_tokens(s), session_id=s + 1, seed=s)
            if r >= 2 and hit.chunk_tiers == [kvtier.Tier.HOST] * 2:
                in_host += 1
    stats = engine.stats()
    assert in_host == (rounds - 2) * sessions
    assert stats.prediction_accuracy > 0.8
    assert stats.prediction_accesses == rounds * sessions
    assert stats.prediction_useful_blocks > 0
    assert stats.prediction_useful_blocks <= stats.prediction_promoted_blocks
