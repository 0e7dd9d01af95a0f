"""The vLLM tests share tests/python/conftest.py's rules: under KVTIER_REQUIRE_RESOURCES=1 (CI) a
skip for a missing resource (vLLM, redis-server) fails, and a run that collected fewer tests than
KVTIER_PYTEST_MIN_TESTS fails; and its redis_endpoint fixture."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "kvtier_python_conftest", Path(__file__).resolve().parent.parent / "python" / "conftest.py")
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

pytest_runtest_makereport = _shared.pytest_runtest_makereport
pytest_collection_finish = _shared.pytest_collection_finish
redis_endpoint = _shared.redis_endpoint
