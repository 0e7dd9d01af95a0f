"""Goal: the remote-tier keyword arguments reach kvtier::EngineOptions: two engines sharing one
real redis-server share a prefix (node A stores, node B, without an SSD, finds it in the remote
tier and loads identical bytes, both holding the deployment key, one from a 0600 key file and
one from an environment variable); a remote tier without a key or the explicit
remote_insecure_plaintext is refused, so is a key file others can read; a bad
remote_write_policy is refused by name; tenant salts derive deterministically.
Method: a redis-server on a free loopback port without persistence, started and killed by the
test (conftest.py's redis_endpoint); skipped when redis-server is not installed."""

import numpy as np
import pytest

import kvtier

LAYOUT = "layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"


def test_two_engines_share_a_prefix_through_redis(redis_endpoint, tmp_path, key_file,
                                                  monkeypatch):
    (tmp_path / "ssd").mkdir()
    a = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, ssd_dirs=[str(tmp_path / "ssd")],
                      ssd_bytes=16 << 20, ssd_segment_bytes=1 << 20,
                      remote_endpoints=[redis_endpoint], remote_key_file=key_file)
    # The same deployment key through an environment variable.
    with open(key_file) as f:
        monkeypatch.setenv("KVTIER_TEST_REMOTE_KEY", f.read())
    b = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, remote_endpoints=[redis_endpoint],
                      remote_key_env="KVTIER_TEST_REMOTE_KEY")
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
                      remote_write_policy="sideways", remote_insecure_plaintext=True)


def test_remote_key_is_required_and_checked(tmp_path, key_file, monkeypatch):
    remote = dict(layout=LAYOUT, host_bytes=1 << 20, remote_endpoints=["127.0.0.1:1"])
    with pytest.raises(kvtier.InvalidArgumentError, match="insecure_plaintext"):
        kvtier.Engine(**remote)
    kvtier.Engine(**remote, remote_insecure_plaintext=True).close()  # The explicit choice.
    kvtier.Engine(**remote, remote_key_file=key_file).close()
    open_to_all = tmp_path / "open.keys"
    open_to_all.write_text(kvtier.generate_remote_key(1))
    open_to_all.chmod(0o644)
    with pytest.raises(kvtier.InvalidArgumentError, match="0644"):
        kvtier.Engine(**remote, remote_key_file=str(open_to_all))
    monkeypatch.delenv("KVTIER_TEST_UNSET_KEY", raising=False)
    with pytest.raises(kvtier.InvalidArgumentError, match="KVTIER_TEST_UNSET_KEY"):
        kvtier.Engine(**remote, remote_key_env="KVTIER_TEST_UNSET_KEY")
    with pytest.raises(kvtier.InvalidArgumentError, match="one of them"):
        kvtier.Engine(**remote, remote_key_file=key_file, remote_key_env="X")


def test_derive_tenant_salt():
    secret = b"s" * 32
    salt = kvtier.derive_tenant_salt("tenant-a", secret)
    assert len(salt) == 64 and salt == kvtier.derive_tenant_salt("tenant-a", secret)
    assert salt != kvtier.derive_tenant_salt("tenant-b", secret)
    with pytest.raises(kvtier.InvalidArgumentError, match="16 bytes"):
        kvtier.derive_tenant_salt("tenant-a", b"short")
