"""Goal: the fs tier's keyword arguments reach the engine: an engine in another process stores a
prefix into a shared directory with the deployment keys; this process, with the same keys and no
SSD, finds it in the remote tier and loads identical bytes; another tenant finds nothing; the
directory holds only sealed files (mode 0600, no block bytes in the clear); every fs_* keyword
reaches the tier (file mode, key prefix, the bound in the tier's stats row); the tier without
keys or the plaintext choice, beside Redis, or on a directory others may write is refused by
name.
Method: a child Python process (subprocess) writes; the files are read back from the directory."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kvtier

LAYOUT = "layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16"


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import kvtier
    shared, key_file = sys.argv[1], sys.argv[2]
    e = kvtier.Engine(layout=sys.argv[3], host_bytes=1 << 20, fs_dir=shared,
                      fs_bytes_max=64 << 20, fs_max_age_s=3600, remote_key_file=key_file)
    with e:
        tokens = np.arange(500, 500 + 2 * 16, dtype=np.uint32)
        src = kvtier.empty_blocks(e, 2)
        src[...] = np.random.default_rng(3).standard_normal(src.shape).astype(src.dtype)
        e.store(e.make_namespace("t"), tokens, src).wait()
        e.flush()
        src.tofile(sys.argv[4])
""")


def test_a_prefix_stored_by_another_process_is_found_in_the_shared_directory(tmp_path,
                                                                            key_file):
    shared = str(tmp_path / "shared")
    expected = tmp_path / "expected.bin"
    subprocess.run([sys.executable, "-c", WRITER, shared, key_file, LAYOUT, str(expected)],
                   check=True, env=dict(os.environ), timeout=120)
    b = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=shared,
                      remote_key_file=key_file)
    with b:
        tokens = np.arange(500, 500 + 2 * 16, dtype=np.uint32)
        ns = b.make_namespace("t")
        hit = b.lookup(ns, tokens)
        assert hit.matched_tokens == 32
        assert hit.chunk_tiers == [kvtier.Tier.REMOTE] * 2
        assert b.lookup(b.make_namespace("other"), tokens).matched_tokens == 0
        dst = kvtier.empty_blocks(b, 2)
        b.load(ns, tokens, dst).wait()
        src = np.fromfile(expected, dtype=dst.dtype).reshape(dst.shape)
        np.testing.assert_array_equal(dst, src)
        stats = b.stats()
        assert stats.tiers[-1].kind == kvtier.Tier.REMOTE
        assert stats.tiers[-1].name == "fs"  # The store's registered name.
        assert stats.tiers[-1].as_dict()["name"] == "fs"
        assert stats.tiers[-1].hits == 6
    files = [os.path.join(d, f) for d, _, fs in os.walk(shared) for f in fs]
    assert len(files) == 6
    plain = src.tobytes()
    for path in files:
        assert os.stat(path).st_mode & 0o077 == 0, path
        with open(path, "rb") as f:
            assert plain[:64] not in f.read(), path


def test_the_fs_tier_needs_keys_and_is_alone(tmp_path, key_file):
    shared = str(tmp_path / "shared")
    with pytest.raises(kvtier.InvalidArgumentError, match="remote_key_file"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=shared)
    with pytest.raises(kvtier.InvalidArgumentError, match="fs_dir"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=shared,
                      remote_endpoints=["127.0.0.1:1"], remote_key_file=key_file)
    kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=shared,
                  remote_insecure_plaintext=True).close()
    os.chmod(shared, 0o777)
    with pytest.raises(kvtier.InvalidArgumentError, match="fs_dir"):
        kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=shared,
                      remote_insecure_plaintext=True)


def test_every_fs_keyword_reaches_the_tier(tmp_path):
    shared = tmp_path / "shared"
    e = kvtier.Engine(layout=LAYOUT, host_bytes=1 << 20, fs_dir=str(shared),
                      fs_bytes_max=1 << 20, fs_max_age_s=60, fs_sweep_interval_ms=5,
                      fs_fsync=False, fs_group_shared=True, remote_key_prefix="kt2",
                      remote_insecure_plaintext=True)
    with e:
        ns = e.make_namespace("t")
        e.store(ns, list(range(16)), kvtier.empty_blocks(e, 1)).wait()
        remote = e.stats().tiers[-1]
        assert remote.kind == kvtier.Tier.REMOTE
        assert remote.capacity_bytes == 1 << 20
    files = [p for p in shared.rglob("*") if p.is_file()]
    assert len(files) == 3
    for p in files:
        assert p.name.startswith("kt2."), p
        assert p.stat().st_mode & 0o777 == 0o660, p
