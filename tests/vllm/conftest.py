"""The vLLM tests share tests/python/conftest.py's rules: under KVTIER_REQUIRE_RESOURCES=1 (CI) a
skip for a missing resource (vLLM, redis-server) fails, and a run that collected fewer tests than
KVTIER_PYTEST_MIN_TESTS fails; and its redis_endpoint fixture.

CTest runs these files on two pytest-xdist workers, one file per worker at a time (`-n 2 --dist
loadfile`), which hand out the files in collection order: the files that take longest come first
(LONGEST_FIRST, measured), so that no worker starts a long file while the other has nothing left.
Within a file the order is unchanged: its tests build on each other."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "kvtier_python_conftest", Path(__file__).resolve().parent.parent / "python" / "conftest.py")
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

pytest_runtest_makereport = _shared.pytest_runtest_makereport
pytest_collection_finish = _shared.pytest_collection_finish
redis_endpoint = _shared.redis_endpoint

# The files by their wall time on two workers, longest first (seconds: 2-core machine, 2026-12-06);
# a file not named here runs after these, in collection order.
LONGEST_FIRST = (
    "test_vllm_e2e.py",           # 555
    "test_peer_lmcache_smoke.py",  # 303
    "test_vllm_kv_events.py",      # 252
    "test_vllm_serve.py",          # 219
    "test_vllm_hybrid.py",         # 175
    "test_vllm_tp.py",             # 169
    "test_vllm_mla.py",            # 156
    "test_bench_smoke.py",         # 88
    "test_vllm_service.py",        # 86
    "test_vllm_quality.py",        # 75 (alone, 2026-12-07)
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # sorted() is stable: the tests of one file keep their order.
    items[:] = sorted(items, key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
