"""Goal: the engine's counters reach Python from the one stats table (docs/stats.md): every row is
an attribute of EngineStats or TierStats with the row's help as its docstring, the classes have no
counter outside the table, as_dict() holds the same values, counters that used to be missing
(staged_copy_bytes, remote_not_admitted, ...) are there, and the Prometheus text names every
exported row; the remote store's rows (scope "remote store") are the attributes of stats.remote
(a RemoteStats with a remote tier, None without).
Method: list the rows with kvtier._stats_fields(), compare them with the public attributes of a
live engine's stats after a store, a lookup and a load (one engine with a remote tier on a
redis-server of the test's own), and search metrics_text() for each row's family."""

import numpy as np

import kvtier


_TIER_SCOPES = ("tier", "age-limited tier")
_ENGINE_SCOPES = ("engine", "remote")


def _rows(per_tier):
    scopes = _TIER_SCOPES if per_tier else _ENGINE_SCOPES
    return [r for r in kvtier._stats_fields() if r["scope"] in scopes]


def _remote_store_rows():
    return [r for r in kvtier._stats_fields() if r["scope"] == "remote store"]


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
    assert _attributes(stats) == engine_rows | {"tiers", "remote"}
    assert stats.remote is None  # No remote tier.
    for tier in stats.tiers:
        assert _attributes(tier) == tier_rows | {"kind", "name"}
    for name in ("staged_copy_bytes", "remote_not_admitted", "remote_over_budget",
                 "background_writebacks", "ratio_samples", "ratio_cv_events"):
        assert name in engine_rows and isinstance(getattr(stats, name), int), name
    assert stats.store_blocks == 2 * engine.layers


def test_rows_are_well_formed_and_documented():
    rows = kvtier._stats_fields()
    assert len(rows) == len(_rows(per_tier=False)) + len(_rows(per_tier=True)) + len(
        _remote_store_rows())
    assert len({r["name"] for r in rows if r["scope"] in ("engine", "remote")}) == len(
        _rows(per_tier=False))
    for r in rows:
        assert r["kind"] in ("counter", "gauge", "ratio", "timestamp"), r
        assert r["type"] in ("int", "float"), r
        assert r["help"].endswith("."), r
        owner = (kvtier.TierStats if r in _rows(per_tier=True) else
                 kvtier.RemoteStats if r["scope"] == "remote store" else kvtier.EngineStats)
        assert r["help"] in getattr(owner, r["name"]).__doc__, r


def test_as_dict_holds_every_row(engine):
    stats = _exercised(engine)
    d = stats.as_dict()
    assert set(d) == {r["name"] for r in _rows(per_tier=False)} | {"tiers", "remote"}
    assert d["remote"] is None
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
        if r["kind"] == "timestamp" or r["scope"] in ("remote", "age-limited tier",
                                                      "remote store"):
            continue  # Timestamps are not exported; the others need a remote tier or an age limit.
        family = ("tier_" if r["scope"] == "tier" else "") + r["name"]
        family += "_total" if r["kind"] == "counter" else ""
        assert f"# HELP kvtier_{family} {r['help']}\n" in text, family


def test_remote_store_rows_reach_python_and_prometheus(make_engine, redis_endpoint):
    engine = make_engine(remote_endpoints=[redis_endpoint], remote_insecure_plaintext=True)
    stats = _exercised(engine)
    rows = _remote_store_rows()
    names = {r["name"] for r in rows}
    assert "breaker_state" in names and "topology_refreshes" in names
    assert isinstance(stats.remote, kvtier.RemoteStats)
    assert _attributes(stats.remote) == names
    d = stats.as_dict()["remote"]
    assert d == dict(stats.remote.as_dict())
    for r in rows:
        assert isinstance(getattr(stats.remote, r["name"]), int), r["name"]
        assert d[r["name"]] == getattr(stats.remote, r["name"]), r["name"]
    assert stats.remote.breaker_state == 0  # Closed.
    text = engine.metrics_text()
    for r in rows:
        family = "remote_" + r["name"] + ("_total" if r["kind"] == "counter" else "")
        assert f"# TYPE kvtier_{family} {'counter' if r['kind'] == 'counter' else 'gauge'}\n" \
            in text, family
