"""Goal: the engine's counters reach Python from the one stats table (docs/stats.md): every row is
an attribute of EngineStats or TierStats with the row's help as its docstring, the classes have no
counter outside the table, as_dict() holds the same values, counters that used to be missing
(staged_copy_bytes, remote_not_admitted, ...) are there, and the Prometheus text names every
exported row.
Method: list the rows with kvtier._stats_fields(), compare them with the public attributes of a
live engine's stats after a store, a lookup and a load, and search metrics_text() for each row's
family."""

import numpy as np

import kvtier


def _rows(per_tier):
    tier_scopes = ("tier", "age-limited tier")
    return [r for r in kvtier._stats_fields() if (r["scope"] in tier_scopes) == per_tier]


def _attributes(obj):
    return {n for n in dir(obj) if not n.startswith("_") and not callable(getattr(obj, n))}


def _exercised(engine):
    ns = engine.make_namespace(salt="stats")
    tokens = np.arange(2 * engine.block_tokens, dtype=np.uint32)
    blocks = kvtier.empty_blocks(engine, 2)
    engine.store(ns, tokens, blocks).wait()
    assert engine.lookup(ns, tokens).matched_tokens == len(tokens)
    engine.load(ns, tokens, blocks).wait()
    return engine.stats()


def test_rows_are_the_attributes(engine):
    stats = _exercised(engine)
    engine_rows = {r["name"] for r in _rows(per_tier=False)}
    tier_rows = {r["name"] for r in _rows(per_tier=True)}
    assert _attributes(stats) == engine_rows | {"tiers"}
    for tier in stats.tiers:
        assert _attributes(tier) == tier_rows | {"kind"}
    for name in ("staged_copy_bytes", "remote_not_admitted", "remote_over_budget",
                 "background_writebacks", "ratio_samples", "ratio_cv_events"):
        assert name in engine_rows and isinstance(getattr(stats, name), int), name
    assert stats.store_blocks == 2 * engine.layers


def test_rows_are_well_formed_and_documented():
    rows = kvtier._stats_fields()
    assert len({r["name"] for r in rows if r["scope"] in ("engine", "remote")}) == len(
        _rows(per_tier=False))
    for r in rows:
        assert r["kind"] in ("counter", "gauge", "ratio", "timestamp"), r
        assert r["type"] in ("int", "float"), r
        assert r["help"].endswith("."), r
        owner = kvtier.TierStats if r in _rows(per_tier=True) else kvtier.EngineStats
        assert r["help"] in getattr(owner, r["name"]).__doc__, r


def test_as_dict_holds_every_row(engine):
    stats = _exercised(engine)
    d = stats.as_dict()
    assert set(d) == {r["name"] for r in _rows(per_tier=False)} | {"tiers"}
    for r in _rows(per_tier=False):
        assert d[r["name"]] == getattr(stats, r["name"]), r["name"]
    assert [t["kind"] for t in d["tiers"]] == [str(t.kind).split(".")[-1].lower()
                                               for t in stats.tiers]
    for td, t in zip(d["tiers"], stats.tiers):
        assert td == dict(t.as_dict())
        for r in _rows(per_tier=True):
            assert td[r["name"]] == getattr(t, r["name"]), r["name"]


def test_prometheus_names_every_exported_row(engine):
    _exercised(engine)
    text = engine.metrics_text()
    for r in kvtier._stats_fields():
        if r["kind"] == "timestamp" or r["scope"] in ("remote", "age-limited tier"):
            continue  # Timestamps are not exported; the others need a remote tier or an age limit.
        family = ("tier_" if r["scope"] == "tier" else "") + r["name"]
        family += "_total" if r["kind"] == "counter" else ""
        assert f"# HELP kvtier_{family} {r['help']}\n" in text, family
