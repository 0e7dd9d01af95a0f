"""End to end against a real vLLM split over two tensor-parallel ranks: each rank caches its own
shard of the KV, a restart with the same parallelism hits, another parallelism or a lost shard
misses cleanly.

Goal: with tensor_parallel_size=2 each vLLM worker holds half of the KV heads; KvtierConnector
stores each rank's shard under keys that carry the rank and the world size (the model name
"<model>|tp<rank>/<size>" enters every key, and each rank's SSD directory is <dir>/tp<rank>).
After a restart with TP=2 both ranks load every token but the last from the SSD tier and the
pages they load are, byte for byte, the pages vLLM computed without kvtier for that rank; the
greedy tokens equal vLLM's without kvtier. A restart with TP=1 on the same directory loads
nothing (another parallelism never meets the TP=2 keys) and so does a TP=2 restart after one
rank's shard was deleted: the scheduler's hit is the least over the ranks, so no rank loads a
prefix another rank lacks (no partial load).

Method: vLLM's CPU build runs one worker process per rank (VLLM_CPU_OMP_THREADS_BIND gives each
its own CPUs; two CPUs suffice); tests/vllm/run_vllm.py --tensor-parallel-size and the dump
connector (tests/vllm/dump_connector.py, each rank's pages under dump_dir/tp<rank>/), with the
decisive random Llama of test_vllm_e2e.py (4 KV heads: 2 per rank) and its byte comparisons:
  1. baseline: TP=2, the dump connector with kvtier off (each rank's pages, the tokens);
  2. store: TP=2 on an empty cache directory: the tokens and every rank's pages equal the
     baseline's; each rank's directory holds records;
  3. load: a new TP=2 process: both ranks load the prompts' prefixes from their SSD directory
     (each rank's stats_file, <stats_file>.tp<rank>, counts the loads and its SSD hits) and the
     loaded rows equal the baseline's rank by rank; the tokens equal the baseline's;
  4. TP=1 on the same directory: the first prompt loads nothing and its tokens equal the
     baseline's;
  5. rank 1's directory emptied, TP=2 again: neither rank loads anything (rank 0's shard is
     still there), the tokens equal the baseline's.

Requires vLLM (scripts/setup_vllm_venv.sh installs it into .venv-vllm); a missing one is a skip,
which KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import os
import shutil
import subprocess
import sys

import pytest

from test_vllm_e2e import (HERE, assert_same_pages, connector, loadable_chunks,  # noqa: F401
                           pages, prompts, pytestmark, run, stats)

TP = 2


def rank_cpus() -> str:
    """VLLM_CPU_OMP_THREADS_BIND for TP ranks: the CPUs this process may use, split evenly
    ("0|1" on two CPUs); with fewer CPUs than ranks, ranks share them."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < TP:
        return "|".join(str(cpus[0]) for _ in range(TP))
    per = len(cpus) // TP
    groups = [cpus[r * per:(r + 1) * per] for r in range(TP)]
    return "|".join(",".join(str(c) for c in g) for g in groups)


TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": rank_cpus(), "VLLM_CPU_KVCACHE_SPACE": "1"}


def rank_pages(tmp, name, rank):
    """One rank's page dumps of a run, in the order its prompts completed."""
    import torch

    return [torch.load(p) for p in sorted((tmp / f"{name}.pages" / f"tp{rank}").glob("*.pt"))]


def run_tp(work, name, extra):
    """Runs vLLM with TP ranks and the dump connector on every prompt; their tokens."""
    return run(work["model"], work["tmp"], name, work["prompts"], connector(extra), env=TP_ENV,
               tp=TP)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_tp")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model)], check=True,
                   capture_output=True)
    runtime = tmp / "run"
    runtime.mkdir(mode=0o700)
    return {"tmp": tmp, "model": model, "prompts": prompts(), "cache": tmp / "cache",
            "runtime": runtime}


def kvtier_extra(work):
    return {"host_bytes": 64 << 20, "ssd_dirs": [str(work["cache"])], "ssd_bytes": 256 << 20,
            "runtime_dir": str(work["runtime"]), "write_policy": "through"}


def test_tensor_parallel_ranks(work):
    tmp, ps = work["tmp"], work["prompts"]

    # 1. Baseline: each rank's pages as vLLM computes them.
    base_tokens = run_tp(work, "base", {"kvtier": False})
    base = [rank_pages(tmp, "base", r) for r in range(TP)]
    for r in range(TP):
        assert len(base[r]) == len(ps), f"rank {r}: {len(base[r])} dumps for {len(ps)} prompts"
        assert all(d["loaded"] is None for d in base[r])
    assert base[0][0]["layers"][0].shape[1] == 2, "each rank holds 2 of the 4 KV heads"

    # 2. Store on an empty directory; the first prompt computes everything (the others may hit
    # its prefix in the host tier, which test_vllm_e2e.py covers for one rank).
    assert run_tp(work, "store", kvtier_extra(work)) == base_tokens
    log = (tmp / "store.log").read_text()
    for r in range(TP):
        assert f"rank {r} of {TP}" in log, f"the startup line of rank {r} is missing:\n{log[-3000:]}"
        stored = rank_pages(tmp, "store", r)
        assert_same_pages(base[r][0], stored[0], loadable_chunks(ps[0]), f"store, rank {r}")
        shard = work["cache"] / f"tp{r}"
        assert shard.is_dir() and any(shard.iterdir()), f"rank {r} stored nothing in {shard}"

    # 3. Restart with TP=2: each rank loads its shard from the SSD tier.
    extra = dict(kvtier_extra(work), stats_file=str(tmp / "load.stats.json"))
    assert run_tp(work, "load", extra) == base_tokens
    for r in range(TP):
        counters = stats(tmp / f"load.stats.json.tp{r}")
        assert counters["loads"] == len(ps), (r, counters)
        assert counters["tiers"]["ssd"]["hits"] > 0, (r, counters["tiers"])
        loaded = rank_pages(tmp, "load", r)
        assert len(loaded) == len(ps)
        for i, (expected, got) in enumerate(zip(base[r], loaded)):
            assert got["loaded"] == [0, len(loadable_chunks(ps[i]))], (r, i, got["loaded"])
            assert not got["failed"], f"rank {r}, prompt {i}: a loaded page failed"
            assert_same_pages(expected, got, loadable_chunks(ps[i]), f"load, rank {r}, prompt {i}")

    # 4. Another parallelism: TP=1 on the same directory misses (the first prompt only: the
    # others would hit its prefix in the host tier of this very run).
    conn = connector(kvtier_extra(work))
    assert run(work["model"], tmp, "tp1", ps[:1], conn) == base_tokens[:1]
    got = pages(tmp, "tp1")
    assert len(got) == 1 and got[0]["loaded"] is None, f"TP=1 loaded {got[0]['loaded']}"

    # 5. Rank 1's shard lost: no rank loads anything.
    shard = work["cache"] / "tp1"
    shutil.rmtree(shard)
    shard.mkdir()
    assert run(work["model"], tmp, "lost", ps[:1], connector(kvtier_extra(work)), env=TP_ENV,
               tp=TP) == base_tokens[:1]
    for r in range(TP):
        got = rank_pages(tmp, "lost", r)
        assert len(got) == 1 and got[0]["loaded"] is None, (
            f"rank {r} loaded {got[0]['loaded'] if got else None} while rank 1's shard is gone")
