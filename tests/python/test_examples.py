"""Runs examples/vllm_style_connector.py as a user would (a separate process)."""

import os
import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(os.environ.get(
    "KVTIER_EXAMPLES_DIR", pathlib.Path(__file__).resolve().parents[2] / "examples"))


def test_vllm_style_connector(tmp_path):
    script = EXAMPLES / "vllm_style_connector.py"
    assert script.is_file(), script
    run = subprocess.run([sys.executable, str(script), "--cache-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "vllm_style_connector: OK" in run.stdout, run.stdout
