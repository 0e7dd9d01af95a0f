"""The LMCache comparisons' smoke modes run: the scripts users reproduce docs/benchmarks.md with.

Goal: bench/peers/lmcache_vllm.py (kvtier and LMCache in the same vLLM), bench/serve_trace.py
with its lmcache mode (vllm serve under a chat trace) and bench/peers/lmcache_l2.py (the storage
below each cache, without an engine) keep working as the code changes: each starts LMCache's
server or benchmark from .venv-lmcache (scripts/setup_lmcache_venv.sh, run by `./run.sh test`),
passes its correctness gate where it has one (tokens equal recompute's, a foreign prompt misses,
LMCache's own round trips verified byte for byte), and reports every key docs/benchmarks.md
reads. Not measurements: a 2-layer model, one 512-token document, two users of two turns, 8 keys.

Method: each script in a subprocess of this interpreter (the vLLM environment), which re-runs
itself inside .venv-lmcache; its JSON parsed. Without .venv-lmcache the tests skip, which
KVTIER_REQUIRE_RESOURCES=1 (CI) turns into failures.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# pytestmark: skipped (a failure in CI) without vLLM, as every test here.
from test_connector_safety import pytestmark  # noqa: F401

REPO = Path(__file__).resolve().parent.parent.parent
LMCACHE_VENV = REPO / ".venv-lmcache"


def run_script(args, timeout_s):
    if not (LMCACHE_VENV / "bin" / "lmcache").exists():
        pytest.skip("no .venv-lmcache (scripts/setup_lmcache_venv.sh makes it)")
    proc = subprocess.run([sys.executable, *args], env=dict(os.environ), capture_output=True,
                          text=True, timeout=timeout_s)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout)


def kvtier_paths():
    """The build under test: its kvtier CLI and Python package (as the other vLLM tests use)."""
    args = []
    if os.environ.get("KVTIER_SERVE_BIN"):
        args += ["--kvtier-cli", os.environ["KVTIER_SERVE_BIN"]]
    return args


def test_lmcache_vllm_smoke():
    # A short work directory: the connector's lookup socket lives in it, and a Unix socket path
    # has at most 107 bytes (pytest's tmp_path can be longer).
    work = Path(tempfile.mkdtemp(prefix="lmc-smoke-"))
    args = [str(REPO / "bench" / "peers" / "lmcache_vllm.py"), "--smoke", "--json",
            "--cells", "lmcache_l1,kvtier_host", "--work-dir", str(work)] + kvtier_paths()
    python_dir = next((p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p), None)
    if python_dir:
        args += ["--kvtier-python", python_dir]
    try:
        report = run_script(args, 1500)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cells = report["cells"]
    for cell in ("recompute", "lmcache_l1", "kvtier_host"):
        assert cells[cell]["status"] == "passed", (cell, cells[cell])
    # Both caches hit every token but the last of the 512-token document.
    for cell in ("lmcache_l1", "kvtier_host"):
        doc = cells[cell]["lengths"]["512"]
        assert doc["cached_tokens"] and set(doc["cached_tokens"]) == {511}, (cell, doc)
        assert doc["ttft_s_median"] > 0, (cell, doc)
    row = report["comparisons"][0]
    assert (row["lmcache_cell"], row["kvtier_cell"]) == ("lmcache_l1", "kvtier_host"), row
    assert row["kvtier_over_lmcache"] > 0, row


def test_serve_trace_smoke_with_lmcache(tmp_path):
    report = run_script([str(REPO / "bench" / "serve_trace.py"), "--smoke", "--json",
                         "--modes", "recompute,lmcache", "--work-dir", str(tmp_path),
                         # The smoke's prompts (100-200 tokens) are shorter than LMCache's default
                         # 256-token chunk, below which it stores nothing.
                         "--lmcache-chunk-tokens", "64"], 900)
    rows = report["rows"]
    assert [(r["mode"], r["concurrency"]) for r in rows] == [("recompute", 2), ("lmcache", 2)]
    for r in rows:
        assert r["correct"] is True and r["errors"] == [] and r["requests"] == 4, r
        assert r["ttft_p50_s"] > 0 and r["output_tokens_per_s"] > 0, r
    # LMCache's server counted what vLLM's connector wrote into it.
    assert rows[1]["lmcache"]["l1_write_chunks"] > 0, rows[1]


def test_lmcache_l2_smoke():
    report = run_script([str(REPO / "bench" / "peers" / "lmcache_l2.py"), "--smoke", "--json"]
                        + kvtier_paths(), 600)
    rows = report["sizes"]["256KiB"]["comparisons"]
    assert len(rows) == 14  # disk (4), files against the fs tier and plain files (6), Redis (4)
    for row in rows:
        assert row["kvtier_GBps"] > 0 and row["lmcache_GBps"] > 0, row
        assert row["kvtier_over_lmcache"] > 0, row
