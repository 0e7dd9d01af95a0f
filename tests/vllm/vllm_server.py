"""`vllm serve` (vLLM's OpenAI API server) as a user runs it, for the tests and bench/vllm_ttft.py.

VllmServer starts the `vllm` command of the running interpreter's environment in a process
group of its own, so that a stop can reach every process of the server at once as a terminal's
Ctrl-C does (SIGINT to the foreground process group) and systemd's `systemctl stop` does (SIGTERM
to every process of the unit); kill_worker() SIGKILLs the worker process only, as the OOM killer
would. Requests go over HTTP with the standard library; prompts are token ids.

Thread safety: none; one test drives one server. Ownership: the server's processes belong to the
VllmServer, which stops them (SIGKILL to its process group) in close().
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MODEL_NAME = "kvtier-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    def __init__(self, model, log_path, connector=None, block_size=32, max_model_len=2048,
                 env=None, extra_args=()):
        self.port = free_port()
        self.log_path = Path(log_path)
        vllm = Path(sys.executable).parent / "vllm"
        # An environment layered over vLLM's (bench/peers/peerlib.ensure_overlay_venv) has no
        # `vllm` script of its own: its Python runs vLLM's command line module.
        launch = [str(vllm)] if vllm.exists() else [sys.executable, "-m",
                                                    "vllm.entrypoints.cli.main"]
        cmd = launch + ["serve", str(model), "--host", "127.0.0.1", "--port", str(self.port),
               "--served-model-name", MODEL_NAME, "--dtype", "bfloat16",
               "--block-size", str(block_size), "--max-model-len", str(max_model_len),
               "--max-num-batched-tokens", str(max_model_len), "--enforce-eager", "--seed", "0",
               "--no-enable-prefix-caching"]
        if connector is not None:
            cmd += ["--kv-transfer-config", json.dumps(connector)]
        cmd += list(extra_args)
        full_env = dict(os.environ)
        full_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # vLLM's CPU worker reserves cores for its scheduler; on a small machine none would be
        # left to compute on.
        full_env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        full_env.update(env or {})
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=full_env, start_new_session=True)

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def _fail(self, what: str):
        raise AssertionError(f"vllm serve: {what}; log {self.log_path}:\n" +
                             self.log_text()[-4000:])

    def wait_ready(self, timeout_s=600.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with {self.proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(1)
        self._fail(f"not ready after {timeout_s:.0f} s")

    def complete(self, tokens, max_tokens=12, logprobs=None, timeout_s=600.0) -> dict:
        """One /v1/completions request, greedy; returns the first choice and the wall time."""
        body = {"model": MODEL_NAME, "prompt": list(tokens), "max_tokens": max_tokens,
                "temperature": 0}
        if logprobs is not None:
            body["logprobs"] = logprobs
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                out = json.loads(r.read())
        except urllib.error.HTTPError as e:
            self._fail(f"request failed: HTTP {e.code} {e.read()[:2000]!r}")
        choice = out["choices"][0]
        choice["wall_s"] = time.perf_counter() - start
        return choice

    def stop(self, sig, timeout_s=120.0) -> int:
        """Sends `sig` to every process of the server and waits for the server to exit."""
        os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            self._fail(f"still running {timeout_s:.0f} s after signal {sig}")

    def worker_pids(self) -> list:
        """The server's processes that run the model (vLLM's VLLM::Worker processes)."""
        import psutil

        pids = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                title = " ".join(child.cmdline()) or child.name()
            except psutil.Error:
                continue
            if "Worker" in title:
                pids.append(child.pid)
        return pids

    def kill_worker(self):
        pids = self.worker_pids()
        if not pids:
            self._fail("no VLLM::Worker process to kill")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def close(self):
        """SIGKILL to whatever is left of the server's process group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
