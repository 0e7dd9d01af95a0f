"""Shared fixtures for the kvtier Python tests (run by CTest as `python_tests`).

CTest sets PYTHONPATH to <build>/python, where the kvtier package and its _kvtier extension are
assembled. KVTIER_PYTEST_MIN_TESTS makes a run that collected fewer tests fail loudly instead of
passing with a handful (pytest's own "no tests ran" already exits 5, which CTest counts as failure).
KVTIER_REQUIRE_RESOURCES=1 (set by CI) turns every skip into a failure, except a skip whose reason
names a GPU or CUDA: a run without redis-server cannot pass by skipping.
"""

import os
import shutil
import socket
import subprocess
import time

import pytest

import kvtier

LAYOUT = "layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"


# Skip reasons that stay skips under KVTIER_REQUIRE_RESOURCES=1: CI machines have no GPU.
GPU_WORDS = ("GPU", "CUDA")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("KVTIER_REQUIRE_RESOURCES") != "1":
        return
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(word in reason for word in GPU_WORDS):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped ({reason}), but KVTIER_REQUIRE_RESOURCES=1 makes a missing "
                       "resource fail")


def pytest_collection_finish(session):
    minimum = int(os.environ.get("KVTIER_PYTEST_MIN_TESTS", "0"))
    if minimum and len(session.items) < minimum:
        raise pytest.UsageError(
            f"collected {len(session.items)} tests, expected at least {minimum}")


@pytest.fixture
def make_engine(tmp_path):
    """Engine factory: a small host tier and an SSD tier under the test's temporary directory."""
    engines = []

    def make(**overrides):
        options = dict(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(tmp_path / "ssd")],
                       ssd_bytes=16 << 20, ssd_segment_bytes=1 << 20)
        options.update(overrides)
        (tmp_path / "ssd").mkdir(exist_ok=True)
        engine = kvtier.Engine(**options)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def engine(make_engine):
    return make_engine()


# A redis-server of the test's own on a free loopback port, no persistence; killed afterwards.
@pytest.fixture
def key_file(tmp_path):
    """A 0600 file of deployment keys (kvtier.generate_remote_key) for the remote tier."""
    path = tmp_path / "remote.keys"
    path.write_text(kvtier.generate_remote_key(1))
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def redis_endpoint(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
