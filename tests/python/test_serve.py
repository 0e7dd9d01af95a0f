"""kvtier.connect: Engines served by kvtier's node service. Two clients of one service share its
cache (one stores, the other looks the chunks up and loads the same bytes, compared exactly); a
client naming the same tenant shares, another tenant id misses; a client given a layout starts
before the service, misses and has its stores refused while the service is down (also after a
SIGKILL of the service), and works again once a service is back; bad arguments are refused.

Method: the service is a separate process on a socket in the test's temporary directory
(service_command below), started and killed by the test.
"""

import os
import signal
import subprocess
import time

import numpy as np
import pytest

import kvtier

LAYOUT = "layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"


def service_command(socket_path, layout=LAYOUT, host_bytes=8 << 20):
    """The command line of `kvtier serve` on socket_path (KVTIER_SERVE_BIN: the kvtier CLI, set by
    CTest)."""
    fixture = os.environ.get("KVTIER_SERVE_BIN")
    if not fixture or not os.path.exists(fixture):
        pytest.fail("KVTIER_SERVE_BIN names no kvtier CLI (build the kvtier target)")
    return [fixture, "serve", "--layout", layout, "--host-bytes", str(host_bytes),
            "--host-prefault=false", "--socket",
            str(socket_path)]


class Service:
    """A node service process; start() waits (bounded) until it listens."""

    def __init__(self, socket_path):
        self.socket_path = str(socket_path)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(service_command(self.socket_path), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # "listening on ..." once clients can connect.
        if "listening" not in line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"the service did not start: {line}{self.proc.stderr.read()}")
        return self

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


@pytest.fixture
def service(tmp_path):
    s = Service(tmp_path / "kvtier.sock")
    yield s
    s.kill()


def blocks(engine, chunks, seed):
    rng = np.random.default_rng(seed)
    shape = (chunks, engine.layers) + engine.block_shape
    return rng.standard_normal(shape).astype(engine.numpy_dtype)


def eventually(fn, seconds=10.0):
    """fn() until it returns without raising kvtier.Error, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except kvtier.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_two_clients_share_one_service(service):
    service.start()
    writer = kvtier.connect(service.socket_path, name="writer")
    reader = kvtier.connect(service.socket_path, name="reader", layout=LAYOUT)
    assert writer.layout == reader.layout
    assert writer.block_bytes == reader.block_bytes and writer.layers == 3
    assert writer.connected

    tokens = np.arange(7000, 7000 + 3 * 16 + 5, dtype=np.uint32)
    src = blocks(writer, 3, seed=11)
    ns_w = writer.make_namespace("tenant-a")
    with writer.store(ns_w, tokens, src) as store:
        store.wait()
        assert store.chunks_stored == 3

    ns_r = reader.make_namespace("tenant-a")
    hit = reader.lookup(ns_r, tokens)
    assert hit.matched_tokens == 48
    assert hit.chunk_tiers == [kvtier.Tier.HOST] * 3
    dst = kvtier.empty_blocks(reader, 3)
    with reader.load(ns_r, tokens, dst) as load:
        for layer in range(reader.layers):
            load.wait_layer(layer)
    assert dst.tobytes() == src.tobytes()

    # A third client naming the same tenant (same uid) shares it; another tenant id misses.
    third = kvtier.connect(service.socket_path, name="third")
    assert third.lookup(third.make_namespace("tenant-a"), tokens).matched_tokens == 48
    assert third.lookup(third.make_namespace("tenant-b"), tokens).matched_tokens == 0

    # stats() are the service engine's; the service's own view names its clients.
    assert reader.stats().stores >= 1
    assert reader.stats().load_blocks >= 3 * reader.layers
    assert isinstance(reader.service_stats(), dict)
    assert reader.connection_state()["connects"] >= 1
    for e in (writer, reader, third):
        e.close()


def test_local_engine_is_not_connected(engine):
    with pytest.raises(kvtier.NotSupportedError, match="not connected"):
        engine.connection_state()


def test_client_with_layout_outlives_the_service(service):
    client = kvtier.connect(service.socket_path, layout=LAYOUT, name="early", timeout_ms=2000,
                            reconnect_interval_ms=50)
    tokens = list(range(100, 100 + 2 * 16))
    ns = client.make_namespace("t")
    src = blocks(client, 2, seed=5)
    # No service yet: a miss, and stores and loads refused as unavailable (never a hang).
    assert client.lookup(ns, tokens).matched_tokens == 0
    with pytest.raises(kvtier.UnavailableError):
        client.store(ns, tokens, src).wait()
    with pytest.raises(kvtier.UnavailableError):
        client.load(ns, tokens, kvtier.empty_blocks(client, 2)).wait()

    service.start()
    eventually(lambda: client.store(ns, tokens, src).wait())
    assert client.lookup(ns, tokens).matched_tokens == 32

    # SIGKILL: the next calls miss or fail within the timeout, then the client reconnects to a
    # new service by itself (whose host tier starts empty).
    service.kill()
    start = time.monotonic()
    assert client.lookup(ns, tokens).matched_tokens == 0
    with pytest.raises(kvtier.Error):
        client.store(ns, tokens, src).wait()
    assert time.monotonic() - start < 10
    assert client.connection_state()["disconnects"] >= 1
    service.start()
    eventually(lambda: client.store(ns, tokens, src).wait())
    dst = kvtier.empty_blocks(client, 2)
    client.load(ns, tokens, dst).wait()
    assert dst.tobytes() == src.tobytes()
    client.close()


def test_connect_refuses_bad_arguments(tmp_path):
    missing = str(tmp_path / "nobody.sock")
    with pytest.raises(kvtier.Error):  # No layout: the service must answer.
        kvtier.connect(missing, timeout_ms=500)
    with pytest.raises(kvtier.InvalidArgumentError, match="block_tokens"):
        kvtier.connect(missing, layout=LAYOUT.replace("block_tokens=16", "block_tokens=17"))
    with pytest.raises(kvtier.InvalidArgumentError, match="timeout_ms"):
        kvtier.connect(missing, layout=LAYOUT, timeout_ms=0)
    with pytest.raises(kvtier.InvalidArgumentError, match="path"):
        kvtier.connect("", layout=LAYOUT)
