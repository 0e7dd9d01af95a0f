"""Hits that survive a restart of `vllm serve`, however the server was stopped.

Goal: a user's `vllm serve` with the kvtier connector (32-token pages, one SSD directory, a
stats_file) that stored a prompt's KV and is then stopped finds that KV on the SSD after a
restart, loads it instead of recomputing it, and answers the same text:
  1. Ctrl-C: SIGINT to the server's whole process group (what a terminal sends). The worker's
     signal handler flushes kvtier and logs how many chunks it wrote;
  2. systemctl stop: SIGTERM to every process of the server at once (systemd's default
     KillMode); the same flush;
  3. SIGKILL of the worker (what the OOM killer does), then of the rest of the server, after the
     write-back age limit: nothing flushes, the age limit has put the chunks on the SSD;
  4. the README's command as it is (vLLM's --shutdown-timeout 0: at Ctrl-C vLLM force-kills its
     worker at once, "[shutdown] force killing sub process VLLM::Worker"), Ctrl-C 2 s after the
     response: the age limit has put the chunks on the SSD before the kill.
In 1 and 2 writeback_age_ms_max is an hour, so only the flush on the signal can have written the
chunks, and the servers run with --shutdown-timeout 30 (as a service should: systemd waits 90 s
before its SIGKILL), so that vLLM waits for the worker instead of killing it while it flushes: a
race whose outcome depends on the machine's speed, which a test must not depend on. In 3 and 4
the age limit is 1 s and the kill comes 5 s (3) or 2 s (4) after the response: the guarantee is
1.1 s.

Method: one SSD directory through five servers (tests/vllm/vllm_server.py starts the real
`vllm serve` of this virtual environment, vLLM's prefix cache off so every reuse comes from
kvtier). Server A stores prompt 1 and gets Ctrl-C; B loads prompt 1 from the SSD (the stats
file's loaded_tokens and the SSD tier's hits), stores prompt 2 and gets SIGTERM; C loads prompt
2, stores prompt 3 and is SIGKILLed; D loads prompt 3, stores prompt 4 and gets Ctrl-C; E loads
prompt 4. Each prompt has 1,100 tokens (byte tokens of tests/vllm/make_model.py's random model),
so at least 32 whole pages are stored and loaded. Texts are greedy (temperature 0) and compared
exactly. This assumes make_model.py's model is decisive: a prefill over loaded KV and a full
prefill round differently in the last bits, which must not change its greedy tokens (the
end-to-end tests assume the same).

Requires vLLM (scripts/setup_vllm_venv.sh installs it into .venv-vllm); a missing one is a
skip, which KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BLOCK = 32
PROMPT_TOKENS = 1100
# Whole pages of a prompt that are stored and loaded: at least 32 of its 34 (how vLLM rounds
# the last ones is its business: the one holding the last token is always computed).
MIN_CHUNKS = 32
HOUR_MS = 3_600_000
AGE_MS = 1000
GRACE_S = 30  # vllm serve --shutdown-timeout in tests 1 and 2.

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(scripts/setup_vllm_venv.sh)")


def prompt(seed):
    rng = random.Random(seed)
    return [rng.randrange(3, 259) for _ in range(PROMPT_TOKENS)]


def connector(work, stats_file, age_ms):
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {
                "host_bytes": 256 << 20, "ssd_dirs": [str(work["cache"])],
                "ssd_bytes": 512 << 20, "ssd_segment_bytes": 8 << 20,
                "stats_file": str(stats_file), "runtime_dir": str(work["runtime"]),
                "writeback_age_ms_max": age_ms}}


def start(work, name, age_ms, shutdown_timeout_s=None):
    from vllm_server import VllmServer

    stats_file = work["tmp"] / f"{name}.stats.json"
    extra = [] if shutdown_timeout_s is None else ["--shutdown-timeout", str(shutdown_timeout_s)]
    server = VllmServer(work["model"], work["tmp"] / f"{name}.log",
                        connector=connector(work, stats_file, age_ms), block_size=BLOCK,
                        extra_args=extra)
    work["servers"].append(server)
    server.wait_ready()
    return server, stats_file


def wait_stats(stats_file, done, timeout_s=60.0):
    """The stats file once `done(stats)` holds (the worker writes it after each step)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = json.loads(Path(stats_file).read_text())
            if done(last):
                return last
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"stats file {stats_file} never showed it; last: {last}")


def counters(stats_file):
    try:
        return json.loads(Path(stats_file).read_text())
    except (OSError, ValueError):
        return {}


def store(server, stats_file, tokens):
    """A request whose prefix is not cached: computed, and stored."""
    before = counters(stats_file)
    out = server.complete(tokens)
    wait_stats(stats_file, lambda s: s.get("stored_chunks", 0) >=
               before.get("stored_chunks", 0) + MIN_CHUNKS)
    return out["text"]


def load(server, stats_file, tokens, expected_text):
    """The same request after a restart: its prefix comes from the SSD, the text is the same."""
    before = counters(stats_file)
    out = server.complete(tokens)
    stats = wait_stats(stats_file, lambda s: s.get("loaded_tokens", 0) >=
                       before.get("loaded_tokens", 0) + MIN_CHUNKS * BLOCK)
    assert stats["load_failures"] == 0, stats
    assert stats["tiers"]["ssd"]["hits"] >= MIN_CHUNKS, stats
    assert out["text"] == expected_text


def flushed_chunks(server, signame):
    """The chunks the worker's log says it flushed on `signame`."""
    import re

    m = re.search(rf"kvtier: {signame}: flushed (\d+) chunks to the SSD in [\d.]+ ms",
                  server.log_text())
    assert m, f"no flush on {signame} in {server.log_path}"
    return int(m.group(1))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_serve")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model)], check=True,
                   capture_output=True)
    state = {"tmp": tmp, "model": model, "cache": tmp / "cache", "runtime": tmp / "run",
             "servers": [], "texts": {}}
    state["runtime"].mkdir(mode=0o700)
    yield state
    for server in state["servers"]:
        server.close()


def test_1_ctrl_c_keeps_the_stored_prefix(work):
    a, stats_a = start(work, "a", HOUR_MS, GRACE_S)
    work["texts"][1] = store(a, stats_a, prompt(1))
    a.stop(signal.SIGINT)
    a.close()
    assert flushed_chunks(a, "SIGINT") >= MIN_CHUNKS
    b, stats_b = start(work, "b", HOUR_MS, GRACE_S)
    work["b"] = (b, stats_b)
    load(b, stats_b, prompt(1), work["texts"][1])


def test_2_sigterm_keeps_the_stored_prefix(work):
    b, stats_b = work["b"]
    work["texts"][2] = store(b, stats_b, prompt(2))
    b.stop(signal.SIGTERM)
    b.close()
    assert flushed_chunks(b, "SIGTERM") >= MIN_CHUNKS
    c, stats_c = start(work, "c", AGE_MS)
    work["c"] = (c, stats_c)
    load(c, stats_c, prompt(2), work["texts"][2])


def test_3_sigkill_after_the_age_limit_keeps_the_stored_prefix(work):
    c, stats_c = work["c"]
    work["texts"][3] = store(c, stats_c, prompt(3))
    time.sleep(5)  # The age limit plus the cleaner's period is 1.1 s.
    c.kill_worker()
    c.close()
    assert "kvtier: SIG" not in c.log_text()  # No flush on a signal: the age limit did it.
    d, stats_d = start(work, "d", AGE_MS)
    work["d"] = (d, stats_d)
    load(d, stats_d, prompt(3), work["texts"][3])


def test_4_readme_command_ctrl_c_after_the_age_limit_keeps_the_stored_prefix(work):
    d, stats_d = work["d"]
    work["texts"][4] = store(d, stats_d, prompt(4))
    time.sleep(2)
    d.stop(signal.SIGINT)
    d.close()
    e, stats_e = start(work, "e", AGE_MS)
    load(e, stats_e, prompt(4), work["texts"][4])
    e.stop(signal.SIGINT)
