"""The connector's stats_file writer (KvtierConnector._maybe_write_stats) goes through
kvtier.files.replace_regular_file: a link planted at the old temporary name "<path>.tmp<pid>" is
not followed, and a stats_file that is a FIFO is refused with one logged warning instead of an
exception raised into vLLM's step loop; with several tensor-parallel ranks each rank writes
"<path>.tp<rank>" and never the shared path; the engine's counters in the file are every row of
the stats table (kvtier._stats_fields()) by name, the keys it had before among them. Method: the
writer is called on a stand-in object that has only the attributes it reads, and the counters
are taken from stand-in stats with a value per row, so no vLLM engine is started."""

import json
import os
import threading
import types

import pytest

import kvtier

vllm_connector = pytest.importorskip("kvtier.vllm", reason="vLLM is not installed")


def writer_for(path, tp_size=1, rank=0):
    counters = {"saves": 1, "rank": rank}
    return types.SimpleNamespace(
        _config={"stats_file": str(path)}, _stats_lock=threading.Lock(),
        _stats_write_lock=threading.Lock(), _counters=counters,
        _stats_written=None, stats=lambda: dict(counters), _tp_size=tp_size, _rank=rank)


def test_each_tensor_parallel_rank_writes_its_own_file(tmp_path):
    path = tmp_path / "stats.json"
    for rank in (0, 1):
        vllm_connector.KvtierConnector._maybe_write_stats(writer_for(path, 2, rank), force=True)
    assert not path.exists()
    for rank in (0, 1):
        assert json.loads((tmp_path / f"stats.json.tp{rank}").read_text())["rank"] == rank


def test_planted_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("data")
    path = tmp_path / "stats.json"
    os.symlink(victim, f"{path}.tmp{os.getpid()}")
    vllm_connector.KvtierConnector._maybe_write_stats(writer_for(path), force=True)
    assert path.read_text().strip().startswith("{")
    assert victim.read_text() == "data"


def test_fifo_is_refused_with_a_warning(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    w = writer_for(fifo)
    vllm_connector.KvtierConnector._maybe_write_stats(w, force=True)
    vllm_connector.KvtierConnector._maybe_write_stats(w, force=True)
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    assert w._stats_file_error.startswith(f"stats_file {fifo} is a FIFO")


def test_engine_counters_are_the_stats_table_rows():
    rows = kvtier._stats_fields()
    tier_rows = [r["name"] for r in rows if r["scope"] in ("tier", "age-limited tier")]
    engine_rows = [r["name"] for r in rows if r["scope"] in ("engine", "remote")]
    remote_rows = [r["name"] for r in rows if r["scope"] == "remote store"]
    tier = types.SimpleNamespace(kind="Tier.HOST", **{n: i for i, n in enumerate(tier_rows)})
    remote = types.SimpleNamespace(as_dict=lambda: {n: 7 for n in remote_rows})
    es = types.SimpleNamespace(tiers=[tier], remote=None,
                               **{n: 100 + i for i, n in enumerate(engine_rows)})
    out = vllm_connector.engine_stats_dict(es)
    assert set(out) == {"tiers", "engine"}
    assert out["tiers"]["host"] == {n: i for i, n in enumerate(tier_rows)}
    assert out["engine"] == {n: 100 + i for i, n in enumerate(engine_rows)}
    # The keys the file had before the rows were taken from the table.
    assert {"hits", "blocks", "used_bytes", "write_failures"} <= set(out["tiers"]["host"])
    assert {"lookups", "lookup_hit_tokens", "loads", "load_blocks", "load_failures", "stores",
            "store_blocks", "corrupt_blocks", "busy_rejections"} <= set(out["engine"])
    es.remote = remote
    assert vllm_connector.engine_stats_dict(es)["remote_store"] == {n: 7 for n in remote_rows}
