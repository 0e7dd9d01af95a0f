"""Goal: KVTIER_REQUIRE_RESOURCES=1 turns a test skipped for a missing resource into a failure (a
GPU skip stays a skip), and without the variable the same test still skips cleanly.
Method: run pytest in a subprocess on a throwaway directory holding a copy of this directory's
conftest.py and a test file whose tests skip, once with the variable and once without, and read
the exit status and the summary line."""

import os
import pathlib
import shutil
import subprocess
import sys

SKIPPING_TESTS = '''
import pytest

def test_needs_redis():
    pytest.skip("redis-server is not installed")

def test_needs_gpu():
    pytest.skip("no usable CUDA GPU")
'''


def run_pytest(tmp_path, require):
    shutil.copy(pathlib.Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING_TESTS)
    env = dict(os.environ)
    env.pop("KVTIER_REQUIRE_RESOURCES", None)
    env.pop("KVTIER_PYTEST_MIN_TESTS", None)
    if require:
        env["KVTIER_REQUIRE_RESOURCES"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_required_resource_skip_fails(tmp_path):
    result = run_pytest(tmp_path, require=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 skipped" in result.stdout, result.stdout
    assert "KVTIER_REQUIRE_RESOURCES=1" in result.stdout, result.stdout


def test_without_the_variable_skips_pass(tmp_path):
    result = run_pytest(tmp_path, require=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout, result.stdout
