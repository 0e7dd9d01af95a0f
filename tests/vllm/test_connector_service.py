"""KvtierConnector's scheduler side on kvtier's node service ("server" in the config), without
starting vLLM.

Goal: in server mode the scheduler asks the service itself: a request's cache_salt is its tenant
id on the service (the chunks another client stored under that tenant, with the connector's
model and rank keys, are a hit; another tenant misses); a service that is not running yet, or
was SIGKILLed, is a miss counted in lookup_errors, never an exception and never a long wait; and
configurations the mode cannot honour are refused at startup naming the key.

Method: the connector is built with the scheduler role on a stand-in vllm_config (as
test_connector_safety.py does); the service is `kvtier serve` (KVTIER_SERVE_BIN) on a
socket in the test's directory, and the test stores chunks in it with kvtier.connect. Every wait
is bounded.
"""

import os
import subprocess
import time

import numpy as np
import pytest

from test_connector_safety import make_config, request

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(scripts/setup_vllm_venv.sh)")

BLOCK = 16
LAYOUT = f"layers=2,kv_heads=1,head_dim=16,dtype=bf16,block_tokens={BLOCK}"
MODEL_KEY = "model:stub-model||bfloat16"  # make_config's model, revision and dtype.


def scheduler(**extra):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvtier.vllm import KvtierConnector

    return KvtierConnector(make_config(extra), KVConnectorRole.SCHEDULER, None)


def start_service(socket_path):
    fixture = os.environ.get("KVTIER_SERVE_BIN")
    if not fixture or not os.path.exists(fixture):
        pytest.fail("KVTIER_SERVE_BIN names no kvtier CLI (build the kvtier target)")
    proc = subprocess.Popen([fixture, "serve", "--layout", LAYOUT, "--host-bytes", str(8 << 20),
                             "--socket", str(socket_path)], stdout=subprocess.PIPE, text=True)
    assert "listening" in proc.stdout.readline()
    return proc


def test_server_mode_refuses_what_it_cannot_honour(tmp_path):
    with pytest.raises(RuntimeError, match="server must be"):
        scheduler(server=str(tmp_path / "kvtier.sock"))
    secret = tmp_path / "secret"
    secret.write_bytes(b"0123456789abcdef0123")
    secret.chmod(0o600)
    with pytest.raises(RuntimeError, match="tenant_secret"):
        scheduler(server=f"unix:{tmp_path}/kvtier.sock", tenant_secret_file=str(secret))
    with pytest.raises(RuntimeError, match="server_timeout_ms"):
        scheduler(server=f"unix:{tmp_path}/kvtier.sock", server_timeout_ms=0)


def test_scheduler_asks_the_service(tmp_path):
    import kvtier

    sock = tmp_path / "kvtier.sock"
    conn = scheduler(server=f"unix:{sock}", server_timeout_ms=2000,
                     server_reconnect_interval_ms=100)
    # No service yet: a miss, at once, counted.
    start = time.monotonic()
    assert conn.get_num_new_matched_tokens(request("r0", cache_salt="tenant-a"), 0) == (0, False)
    assert time.monotonic() - start < 5
    assert conn.scheduler_stats()["lookup_errors"] == 1

    proc = start_service(sock)
    try:
        # Another client stores the first 6 chunks under tenant-a, with the connector's keys.
        client = kvtier.connect(str(sock), layout=LAYOUT)
        tokens = list(range(3, 3 + 6 * BLOCK))
        ns = client.make_namespace("tenant-a", [MODEL_KEY, "tp:0/1"])
        src = np.ones((6, client.layers) + client.block_shape, dtype=client.numpy_dtype)
        client.store(ns, tokens, src).wait()

        time.sleep(0.2)  # Past the scheduler's reconnect interval.
        # 100 prompt tokens: at most 96 (never the last token), all of them cached.
        assert conn.get_num_new_matched_tokens(request("r1", cache_salt="tenant-a"), 0) == (
            96, False)
        # With the prompt's partial last chunk (4 tokens, padded as the connector stores it)
        # cached too: every token but the last.
        import kvtier.vllm as kvtier_vllm

        tail = kvtier_vllm.chunk_tokens(request("r", cache_salt="tenant-a").prompt_token_ids, 7,
                                        BLOCK)
        assert tail[100:] == [kvtier_vllm.TAIL_PAD_TOKEN] * (7 * BLOCK - 100)
        client.store(ns, tail, np.ones((7, client.layers) + client.block_shape,
                                       dtype=client.numpy_dtype)).wait()
        assert conn.get_num_new_matched_tokens(request("r5", cache_salt="tenant-a"), 0) == (
            99, False)
        assert conn.get_num_new_matched_tokens(request("r2", cache_salt="tenant-b"), 0) == (
            0, False)
        assert conn.get_num_new_matched_tokens(request("r3"), 0) == (0, False)

        # SIGKILL: a miss within the timeout, never an exception.
        proc.kill()
        proc.wait(timeout=10)
        start = time.monotonic()
        assert conn.get_num_new_matched_tokens(request("r4", cache_salt="tenant-a"), 0) == (
            0, False)
        assert time.monotonic() - start < 5
        assert conn.scheduler_stats()["scheduler_errors"] == 0
        client.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    conn.shutdown()
