"""Goal: the remote-tier keyword arguments reach kvtier::EngineOptions: two engines sharing one
real redis-server share a prefix (node A stores, node B, without an SSD, finds it in the remote
tier and loads identical bytes), and a bad remote_write_policy is refused by name.
Method: a redis-server on a free loopback port without persistence, started and killed by the
test; skipped when redis-server is not installed."""

import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

import kvtier

LAYOUT = "layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"


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


def test_two_engines_share_a_prefix_through_redis(redis_endpoint, tmp_path):
    (tmp_path / "ssd").mkdir()
    a = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(tmp_path / "ssd")],
                      ssd_bytes=16 << 20, ssd_segment_bytes=1 << 20,
                      remote_endpoints=[redis_endpoint])
    b = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, remote_endpoints=[redis_endpoint])
    with a, b:
        tokens = np.arange(500, 500 + 2 * 16, dtype=np.uint32)
        rng = np.random.default_rng(3)
        src = kvtier.empty_blocks(a, 2)
        src[...] = rng.standard_normal(src.shape).astype(src.dtype)
        a.store(a.make_namespace("t"), tokens, src).wait()

        ns = b.make_namespace("t")
        hit = b.lookup(ns, tokens)
        assert hit.matched_tokens == 32
        assert hit.chunk_tiers == [kvtier.Tier.REMOTE] * 2
        assert b.lookup(b.make_namespace("other"), tokens).matched_tokens == 0
        dst = kvtier.empty_blocks(b, 2)
        b.load(ns, tokens, dst).wait()
        np.testing.assert_array_equal(dst, src)
        stats = b.stats()
        assert stats.tiers[-1].kind == kvtier.Tier.REMOTE
        assert stats.tiers[-1].hits == 6
        assert stats.remote_lookup_errors == 0


def test_bad_remote_write_policy_is_refused():
    with pytest.raises(kvtier.InvalidArgumentError, match="remote_write_policy"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, remote_endpoints=["127.0.0.1:1"],
                      remote_write_policy="sideways")
