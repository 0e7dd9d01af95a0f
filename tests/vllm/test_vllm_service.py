"""vLLM on kvtier's node service: `"server": "unix:..."` in kv_connector_extra_config.

Goal: with the connector in server mode (no kvtier engine and no lookup socket in vLLM: the
scheduler and the worker each connect to the service), the service's cache is shared by every
vLLM of the node and outlives their restarts, and a service that dies costs hits, never answers:
  1. two `vllm serve` processes share one service: A computes and stores a prompt, B (running
     at the same time) loads its prefix from the service, and B's text equals A's;
  2. vLLM restarted, service kept: a new vLLM (C) loads a prompt B stored from the service's host
     tier (the service's stats: host-tier hits, and no SSD tier at all), with the same text;
  3. the service SIGKILLed around a load (tests/vllm/kill_connector.py): once just before the
     worker sends it (the load fails, vLLM recomputes its pages), once right after the service
     accepted it (layers may still be arriving); each time vLLM answers the same text within a
     bounded time, and after the service is started again the prompt is stored again and a
     later request loads it from the service again.
Texts are greedy and compared exactly (make_model.py's decisive model: see test_vllm_serve.py).

Method: the service is a separate process on a socket in the test's directory (service_command:
`kvtier serve`, the CLI CTest names in KVTIER_SERVE_BIN), holding a host tier only; vLLM's prefix
cache is off, so every reuse comes from the service. What each vLLM's worker did is read from
its stats file (loaded_tokens, stored_chunks, load_failures, service_errors), what the service
did from its stats through kvtier.connect.

Requires vLLM (scripts/setup_vllm_venv.sh); a missing one is a skip, which
KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import json
import os
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
MIN_CHUNKS = 32  # Whole pages of a prompt stored and loaded (see test_vllm_serve.py).
LAYERS = 4
# make_model.py's tiny model in vLLM's bf16 pages of BLOCK tokens.
LAYOUT = f"layers={LAYERS},kv_heads=4,head_dim=64,dtype=bf16,block_tokens={BLOCK}"
# A request whose service died under it is answered within this (the connections' timeout is 2 s;
# the rest is the recomputation on a slow CPU).
DEAD_SERVICE_ANSWER_S = 120

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


def service_command(socket_path):
    fixture = os.environ.get("KVTIER_SERVE_BIN")
    if not fixture or not os.path.exists(fixture):
        pytest.fail("KVTIER_SERVE_BIN names no kvtier CLI (build the kvtier target)")
    return [fixture, "serve", "--layout", LAYOUT, "--host-bytes", str(256 << 20),
            "--host-prefault=false", "--socket",
            str(socket_path)]


class Service:
    def __init__(self, socket_path, log_path):
        self.socket_path = str(socket_path)
        self.log_path = log_path
        self.proc = None

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(service_command(self.socket_path), stdout=subprocess.PIPE,
                                     stderr=log, text=True)
        line = self.proc.stdout.readline()
        assert "listening" in line, f"the service did not start: {line!r}; see {self.log_path}"

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stats(self):
        import kvtier

        client = kvtier.connect(self.socket_path, name="test")
        try:
            return client.stats()
        finally:
            client.close()


def connector(work, stats_file, kill_file=None):
    extra = {"server": "unix:" + work["service"].socket_path, "stats_file": str(stats_file),
             "server_timeout_ms": 2000, "server_reconnect_interval_ms": 200}
    if kill_file is not None:
        extra["kill_file"] = str(kill_file)
    return {"kv_connector": "KillServiceConnector", "kv_connector_module_path": "kill_connector",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra}


def start(work, name):
    from vllm_server import VllmServer

    stats_file = work["tmp"] / f"{name}.stats.json"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    server = VllmServer(work["model"], work["tmp"] / f"{name}.log",
                        connector=connector(work, stats_file, work["kill_file"]),
                        block_size=BLOCK, env=env)
    work["servers"].append(server)
    return server, stats_file


def counters(stats_file):
    try:
        return json.loads(Path(stats_file).read_text())
    except (OSError, ValueError):
        return {}


def wait_stats(stats_file, done, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = counters(stats_file)
        if last and done(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"stats file {stats_file} never showed it; last: {last}")


def store(server, stats_file, tokens):
    """A prompt the service does not have: computed, and stored on the service."""
    before = counters(stats_file)
    text = server.complete(tokens)["text"]
    wait_stats(stats_file, lambda s: s.get("stored_chunks", 0) >=
               before.get("stored_chunks", 0) + MIN_CHUNKS)
    return text


def load(server, stats_file, tokens, expected_text):
    """A prompt the service has: its prefix is loaded from the service, the text is the same."""
    before = counters(stats_file)
    text = server.complete(tokens)["text"]
    stats = wait_stats(stats_file, lambda s: s.get("loaded_tokens", 0) >=
                       before.get("loaded_tokens", 0) + MIN_CHUNKS * BLOCK)
    assert stats["load_failures"] == before.get("load_failures", 0), stats
    assert text == expected_text


def host_hits(stats):
    return sum(t.hits for t in stats.tiers if str(t.kind).endswith("HOST"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_service")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model)], check=True,
                   capture_output=True)
    state = {"tmp": tmp, "model": model, "servers": [], "texts": {},
             "service": Service(tmp / "kvtier.sock", tmp / "service.log"),
             "kill_file": tmp / "kill.pid"}
    yield state
    for server in state["servers"]:
        server.close()
    state["service"].kill()


def test_1_two_vllms_share_one_service(work):
    work["service"].start()
    a, stats_a = start(work, "a")
    b, stats_b = start(work, "b")
    a.wait_ready()
    b.wait_ready()
    work["texts"][1] = store(a, stats_a, prompt(1))
    load(b, stats_b, prompt(1), work["texts"][1])
    a.stop(signal.SIGINT)
    a.close()
    work["b"] = (b, stats_b)


def test_2_restarted_vllm_hits_the_service_host_tier(work):
    b, stats_b = work["b"]
    work["texts"][2] = store(b, stats_b, prompt(2))
    b.stop(signal.SIGINT)
    b.close()
    before = work["service"].stats()
    c, stats_c = start(work, "c")
    c.wait_ready()
    work["c"] = (c, stats_c)
    load(c, stats_c, prompt(2), work["texts"][2])
    after = work["service"].stats()
    kinds = [str(t.kind) for t in after.tiers]
    assert not any(k.endswith("SSD") for k in kinds), kinds
    assert host_hits(after) - host_hits(before) >= MIN_CHUNKS * LAYERS


def kill_during_load(work, server, stats_file, tokens, when):
    """Requests `tokens` (cached on the service) with the service SIGKILLed `when` ("before" or
    "after") the worker sends the load; the text must be the stored one, within the bound."""
    service = work["service"]
    before = counters(stats_file)
    work["kill_file"].write_text(f"{service.proc.pid} {when}")
    start_s = time.monotonic()
    text = server.complete(tokens)["text"]
    assert time.monotonic() - start_s < DEAD_SERVICE_ANSWER_S
    assert not work["kill_file"].exists(), "the worker never started a load to kill the service in"
    assert service.proc.wait(timeout=30) == -signal.SIGKILL
    assert text == work["texts"][3]
    return before, wait_stats(stats_file, lambda s: s.get("loads", 0) + s.get(
        "load_failures", 0) > before.get("loads", 0) + before.get("load_failures", 0))


def restart_and_hit_again(work, server, stats_file, tokens):
    """A new (empty) service: the connections come back by themselves; the prompt is stored
    again, then loaded from the service again, with the same text."""
    work["service"].start()
    deadline = time.monotonic() + 120
    while True:
        before = counters(stats_file)
        assert server.complete(tokens)["text"] == work["texts"][3]
        time.sleep(1)
        now = counters(stats_file)
        if now.get("loaded_tokens", 0) >= before.get("loaded_tokens", 0) + MIN_CHUNKS * BLOCK:
            break
        assert time.monotonic() < deadline, f"no load from the restarted service: {now}"
    assert host_hits(work["service"].stats()) >= MIN_CHUNKS * LAYERS


def test_3_service_killed_mid_load(work):
    c, stats_c = work["c"]
    work["texts"][3] = store(c, stats_c, prompt(3))
    # Killed before the load is sent: the load fails, its pages are recomputed.
    before, after = kill_during_load(work, c, stats_c, prompt(3), "before")
    assert after["load_failures"] > before["load_failures"], after
    assert after["service_errors"] > before.get("service_errors", 0), after
    restart_and_hit_again(work, c, stats_c, prompt(3))
    # Killed right after the service accepted the load: what arrived is used, what did not is
    # recomputed (which of the two depends on timing; the text may not).
    before, after = kill_during_load(work, c, stats_c, prompt(3), "after")
    assert after["loaded_tokens"] + after["load_failures"] > (
        before["loaded_tokens"] + before["load_failures"]), after
    restart_and_hit_again(work, c, stats_c, prompt(3))
