"""KvtierConnector never raises into vLLM's scheduler, and its lookup socket keeps serving.

Goal: the scheduler-side hooks run inside vLLM's engine core, where one exception stops the
server; the lookup socket is reachable by any process of the serving user. So: a request without
cache_salt under a tenant secret is a counted non-cached request (or uses default_tenant), a tenant
secret shorter than 16 bytes is refused at startup, so is a secret file that is not a private
regular file of at most 64 KiB (a FIFO is refused without waiting for a writer) and a config key
that is unknown (naming the nearest) or whose value is of the wrong kind, an unexpected
error in any scheduler hook is a miss / no store (logged, counted in scheduler_errors), and the
socket answers malformed or deeply nested messages with an error, drops clients that never answer
the handshake without holding up the others, and keeps serving.

Method: the connector is built with the scheduler role on a stand-in vllm_config (no vLLM engine
runs: these are the connector's own logic, cheap enough for every run), requests are plain
objects with the attributes the connector reads, and the worker's lookup server (_LookupServer)
runs in the test process with a stub handler. Every wait is bounded: a regression is a failure,
not a hang.
"""

import json
import os
import re
import socket
import threading
import time
from multiprocessing.connection import Client
from types import SimpleNamespace

import pytest

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(scripts/setup_vllm_venv.sh)")

BLOCK = 16
SECRET = b"0123456789abcdef0123456789abcdef"


def make_config(extra):
    transfer = SimpleNamespace(kv_connector_extra_config=extra, engine_id="safety-test",
                               kv_load_failure_policy="recompute", is_kv_producer=True,
                               is_kv_consumer=True)
    return SimpleNamespace(
        kv_transfer_config=transfer, cache_config=SimpleNamespace(block_size=BLOCK),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
        model_config=SimpleNamespace(model="stub-model", revision=None, dtype="bfloat16",
                                     max_model_len=1024))


def scheduler(tmp_path, **extra):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvtier.vllm import KvtierConnector

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    config = dict(runtime_dir=str(runtime))
    config.update(extra)
    return KvtierConnector(make_config(config), KVConnectorRole.SCHEDULER, None)


def secret_file(tmp_path, data=SECRET):
    path = tmp_path / "tenant.secret"
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def request(req_id, tokens=100, cache_salt=None):
    return SimpleNamespace(request_id=req_id, prompt_token_ids=list(range(3, 3 + tokens)),
                           cache_salt=cache_salt, lora_request=None)


def step_output(req, computed=0):
    """A scheduler output that schedules all of req's remaining prompt as a new request."""
    new = SimpleNamespace(req_id=req.request_id, block_ids=([1, 2, 3, 4, 5, 6, 7],),
                          num_computed_tokens=computed)
    cached = SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                             resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=[new], scheduled_cached_reqs=cached,
                           num_scheduled_tokens={req.request_id: len(req.prompt_token_ids)})


class Blocks:
    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (self.ids,)


def start_server(connector, handle):
    """The worker's lookup server on the scheduler connector's socket path, with a stub handler."""
    from kvtier.vllm import _LookupServer

    return _LookupServer(connector._clients[0].path, handle)


def call_with_deadline(fn, seconds):
    """fn() in a thread; its result, or a failure when it has not returned within seconds."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


# ------------------------------------------------------------------ tenants

def test_request_without_cache_salt_under_a_tenant_secret_is_not_cached(tmp_path):
    conn = scheduler(tmp_path, tenant_secret_file=secret_file(tmp_path))
    req = request("r1")
    assert conn.get_num_new_matched_tokens(req, 0) == (0, False)
    conn.update_state_after_alloc(req, Blocks([1, 2, 3, 4, 5, 6, 7]), 0)
    meta = conn.build_connector_meta(step_output(req))
    assert meta.loads == [] and meta.saves == [], "an unsalted request was loaded or stored"
    assert conn.request_finished(req, []) == (False, None)
    stats = conn.scheduler_stats()
    assert stats["unsalted_requests"] == 1 and stats["scheduler_errors"] == 0, stats
    assert conn.get_kv_connector_stats().data["unsalted_requests"] == 1


def test_default_tenant_serves_requests_without_cache_salt(tmp_path):
    import kvtier

    conn = scheduler(tmp_path, tenant_secret_file=secret_file(tmp_path),
                     default_tenant="public")
    seen = []
    server = start_server(conn, lambda r: seen.append(r["salt"]) or 2 * BLOCK)
    try:
        req = request("r1")
        assert conn.get_num_new_matched_tokens(req, 0) == (2 * BLOCK, False)
        assert seen == ["|" + kvtier.derive_tenant_salt("public", SECRET)]
        conn.update_state_after_alloc(req, Blocks([1, 2, 3, 4, 5, 6, 7]), 2 * BLOCK)
        meta = conn.build_connector_meta(step_output(req))
        assert [load.chunks for load in meta.loads] == [2]
        # 6 whole chunks and the partial last one (4 tokens, its key's tokens padded).
        assert [(save.chunks, save.tail_tokens) for save in meta.saves] == [(7, 4)]
        assert meta.saves[0].tokens == req.prompt_token_ids + [0xFFFFFFFF] * (BLOCK - 4)
        assert conn.scheduler_stats()["unsalted_requests"] == 0
    finally:
        server.close()


@pytest.mark.parametrize("secret", [b"", b"short", b"15 bytes secret"])
def test_short_tenant_secret_is_refused_at_startup(tmp_path, secret):
    with pytest.raises(RuntimeError, match="at least 16"):
        scheduler(tmp_path, tenant_secret_file=secret_file(tmp_path, secret))


def _group_readable(tmp_path):
    path = secret_file(tmp_path)
    os.chmod(path, 0o640)
    return path


def _too_large(tmp_path):
    return secret_file(tmp_path, b"s" * (64 * 1024 + 1))


@pytest.mark.parametrize("make, message", [
    (lambda tmp_path: str(tmp_path), "is a directory, not a regular file"),
    (lambda tmp_path: "/dev/zero", "is a character device, not a regular file"),
    (_group_readable, "must not be readable by group or others .mode 0o640; chmod 600"),
    (_too_large, "65537 bytes, more than a secret file's 64 KiB"),
    (lambda tmp_path: str(tmp_path / "absent"), "No such file or directory"),
])
def test_a_tenant_secret_file_that_is_not_one_is_refused(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(RuntimeError, match=f"tenant_secret_file {path}.*{message}"):
        scheduler(tmp_path, tenant_secret_file=path)


def test_a_tenant_secret_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    # Opening a FIFO without a writer waits for one: vLLM would hang at startup. A thread plays
    # the writer once a reader waits (for at most 10 s), so a regression fails instead of hanging.
    path = str(tmp_path / "secret.fifo")
    os.mkfifo(path, 0o600)
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader waits.
            except OSError:
                stop.wait(0.01)
                continue
            os.write(fd, SECRET)
            os.close(fd)
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    timer = threading.Timer(10, stop.set)
    timer.start()
    try:
        # A regression reads the writer's secret and raises nothing: no timing is needed.
        with pytest.raises(RuntimeError, match=f"tenant_secret_file {path} is a FIFO, not a "
                           "regular file"):
            scheduler(tmp_path, tenant_secret_file=path)
    finally:
        stop.set()
        timer.cancel()
        thread.join(timeout=10)


def test_a_tenant_secret_file_behind_a_symbolic_link_is_read(tmp_path):
    # Orchestrators mount secrets as links to the file; the file itself is checked.
    link = tmp_path / "mounted.secret"
    link.symlink_to(secret_file(tmp_path, SECRET + b"\n"))
    conn = scheduler(tmp_path, tenant_secret_file=str(link))
    assert conn._tenant_secret == SECRET


@pytest.mark.parametrize("extra, message", [
    ({"host_byte": 1 << 30}, "unknown key 'host_byte' in kv_connector_extra_config; did you "
                             "mean 'host_bytes'"),
    ({"ssd_dir": "/tmp/x"}, "did you mean 'ssd_dirs'"),
    ({"host_bytes": "2GB"}, "host_bytes must be an integer, got '2GB'"),
    ({"remote_insecure_plaintext": "no"}, "remote_insecure_plaintext must be true or false"),
    ({"fs_fsync": 0}, "fs_fsync must be true or false"),
    ({"ssd_dirs": ["/a", 7]}, "ssd_dirs must be a string or a list of strings"),
    ({"codec": 8}, "codec must be a string, got 8"),
    ({"stats_file": ["s.json"]}, "stats_file must be a string"),
])
def test_a_config_key_that_is_unknown_or_of_the_wrong_kind_is_refused(tmp_path, extra, message):
    # A typo must not leave a setting at its default silently, nor a value of the wrong kind be
    # read as another (bool("false") is True: "remote_insecure_plaintext": "false" would have
    # turned sealing off).
    with pytest.raises(RuntimeError, match=re.escape(message)):
        scheduler(tmp_path, **extra)


def test_config_values_written_by_hand_are_read_as_meant(tmp_path):
    conn = scheduler(tmp_path, remote_insecure_plaintext="false", remote_cluster="True",
                     host_bytes="1073741824", remote_endpoints="redis-a:6379", ssd_dirs="/ssd",
                     salt=42)
    c = conn._config
    assert c["remote_insecure_plaintext"] is False and c["remote_cluster"] is True
    assert c["host_bytes"] == 1 << 30
    assert c["remote_endpoints"] == ["redis-a:6379"]  # Not its characters one by one.
    assert c["ssd_dirs"] == ["/ssd"] and c["salt"] == "42"


def test_short_tenant_secret_from_the_environment_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTIER_TEST_TENANT_SECRET", "tiny")
    with pytest.raises(RuntimeError, match="KVTIER_TEST_TENANT_SECRET.*at least 16"):
        scheduler(tmp_path, tenant_secret_env="KVTIER_TEST_TENANT_SECRET")


# ------------------------------------------------------------------ scheduler hooks

def test_an_error_in_each_scheduler_hook_degrades_to_a_miss(tmp_path, monkeypatch):
    import kvtier

    conn = scheduler(tmp_path, tenant_secret_file=secret_file(tmp_path))

    def broken(*args, **kwargs):
        raise kvtier.Error("injected")

    monkeypatch.setattr(kvtier, "derive_tenant_salt", broken)
    req = request("r1", cache_salt="tenant-a")
    assert conn.get_num_new_matched_tokens(req, 0) == (0, False)

    class BadBlocks:
        def get_block_ids(self):
            raise RuntimeError("injected")

    conn.update_state_after_alloc(req, BadBlocks(), 0)
    meta = conn.build_connector_meta(SimpleNamespace())  # Missing every attribute
    assert meta.loads == [] and meta.saves == []
    assert conn.request_finished(SimpleNamespace(), []) == (False, None)
    assert conn.scheduler_stats()["scheduler_errors"] >= 4, conn.scheduler_stats()


def test_a_lost_load_is_sent_as_failed_so_vllm_recomputes(tmp_path):
    """A hit was promised to vLLM, then update_state_after_alloc failed: the pages vLLM expects
    to be loaded are sent to the worker as a failed load (it reports them; vLLM recomputes)."""
    conn = scheduler(tmp_path)
    server = start_server(conn, lambda r: 3 * BLOCK)
    try:
        req = request("r1")
        assert conn.get_num_new_matched_tokens(req, 0) == (3 * BLOCK, False)
        conn._ns_of = None  # update_state_after_alloc fails on it
        conn.update_state_after_alloc(req, Blocks([9, 8, 7, 6, 5, 4, 3]), 3 * BLOCK)
        del conn._ns_of
        meta = conn.build_connector_meta(step_output(req))
        assert len(meta.loads) == 1 and meta.loads[0].failed, meta.loads
        assert meta.loads[0].pages[meta.loads[0].first_chunk:meta.loads[0].chunks] == [9, 8, 7]
        assert conn.scheduler_stats()["scheduler_errors"] == 1
    finally:
        server.close()


def test_lookup_with_a_wrong_key_is_a_miss(tmp_path):
    conn = scheduler(tmp_path)
    server = start_server(conn, lambda r: 3 * BLOCK)
    try:
        with open(server.path + ".key", "wb") as f:
            f.write(os.urandom(32))
        req = request("r1")
        assert call_with_deadline(lambda: conn.get_num_new_matched_tokens(req, 0), 30) == \
            (0, False)
        assert conn.scheduler_stats()["lookup_errors"] == 1
        assert conn.scheduler_stats()["scheduler_errors"] == 0
    finally:
        server.close()


def test_a_silent_worker_is_a_miss_within_the_reply_deadline(tmp_path, monkeypatch):
    import kvtier.vllm as kv
    from kvtier.vllm import _LookupClient

    monkeypatch.setattr(kv, "_LOOKUP_REPLY_SECONDS", 0.5, raising=False)
    conn = scheduler(tmp_path)
    release = threading.Event()
    server = start_server(conn, lambda r: release.wait(30) and 0)
    try:
        client = _LookupClient(server.path)
        start = time.monotonic()
        assert call_with_deadline(lambda: client.lookup(("", []), [1, 2, 3]), 20) == 0
        assert time.monotonic() - start < 10
    finally:
        release.set()
        server.close()


# ------------------------------------------------------------------ the lookup socket

def connect(server):
    with open(server.path + ".key", "rb") as f:
        return Client(server.path, family="AF_UNIX", authkey=f.read())


def ask(conn, payload: bytes, seconds=20):
    conn.send_bytes(payload)
    assert conn.poll(seconds), "the lookup server did not answer"
    return json.loads(conn.recv_bytes())


VALID = json.dumps({"salt": "s", "extra": [], "tokens": [1, 2, 3]}).encode()


@pytest.mark.parametrize("payload", [
    b"[" * 200000,
    b'{"salt": "s", "extra": [], "tokens": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    b"{" + b'"a":{' * 50000 + b"}" * 50001,
    b"not json",
    b"\xff\xfe",
    b"[1, 2, 3]",
    b'{"salt": 1, "extra": [], "tokens": []}',
    b'{"salt": "s", "extra": [[]], "tokens": []}',
    b'{"salt": "s", "extra": [], "tokens": [-1]}',
    b'{"salt": "s", "extra": [], "tokens": [1.5]}',
    b'{"salt": "s", "extra": [], "tokens": ["7"]}',
])
def test_malformed_messages_get_an_error_and_the_connection_keeps_serving(tmp_path, payload):
    conn = scheduler(tmp_path)
    server = start_server(conn, lambda r: len(r["tokens"]))
    try:
        client = connect(server)
        reply = ask(client, payload)
        assert reply["matched"] == 0 and "malformed" in reply["error"], reply
        assert ask(client, VALID) == {"matched": 3}
        client.close()
    finally:
        server.close()


def test_a_client_that_never_answers_the_challenge_blocks_no_one(tmp_path, monkeypatch):
    import kvtier.vllm as kv

    monkeypatch.setattr(kv, "_LOOKUP_AUTH_SECONDS", 1.0, raising=False)
    conn = scheduler(tmp_path)
    server = start_server(conn, lambda r: len(r["tokens"]))
    try:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(server.path)
        # Another client is served while the silent one holds its handshake open.
        assert call_with_deadline(lambda: ask(connect(server), VALID), 20) == {"matched": 3}
        # And the silent one is dropped after the handshake deadline: EOF after the challenge.
        silent.settimeout(20)
        received = b""
        while True:
            chunk = silent.recv(4096)
            if not chunk:
                break
            received += chunk
        assert b"#CHALLENGE#" in received
        silent.close()
    finally:
        server.close()


def test_an_oversized_message_closes_only_its_connection(tmp_path, monkeypatch):
    import kvtier.vllm as kv

    monkeypatch.setattr(kv, "_LOOKUP_MAX_BYTES", 1024)
    conn = scheduler(tmp_path)
    server = start_server(conn, lambda r: len(r["tokens"]))
    try:
        client = connect(server)
        client.send_bytes(b" " * 4096)
        assert client.poll(20)
        with pytest.raises((EOFError, OSError)):
            client.recv_bytes()
        assert ask(connect(server), VALID) == {"matched": 3}
    finally:
        server.close()
