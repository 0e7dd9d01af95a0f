"""The connector's stats_file writer (KvtierConnector._maybe_write_stats) goes through
kvtier.files.replace_regular_file: a link planted at the old temporary name "<path>.tmp<pid>" is
not followed, and a stats_file that is a FIFO is refused with one logged warning instead of an
exception raised into vLLM's step loop; with several tensor-parallel ranks each rank writes
"<path>.tp<rank>" and never the shared path. Method: the writer is called on a stand-in object
that has only the attributes it reads, so no vLLM engine is started."""

import json
import os
import threading
import types

import pytest

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
