"""Write errors reach Python: once the SSD tier's filesystem is full, StoreHandle.wait() of a
write-through store and Engine.flush() raise NoSpaceError naming the segment file, the SSD tier's
write_failures counts the blocks, and every store that wait() acknowledged is found again after a
reopen. Method: the SSD directory is a real 3 MiB tmpfs mounted for the test (root only; the test
says why it skips elsewhere), filled by 1 MiB segments of 2 KiB blocks."""

import os
import subprocess

import numpy as np
import pytest

import kvtier

from test_engine import blocks_for


@pytest.fixture
def small_fs(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


def ssd_tier(engine):
    return next(t for t in engine.stats().tiers if t.kind == kvtier.Tier.SSD)


def test_full_disk_fails_wait_and_flush(small_fs):
    options = dict(layout="layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16",
                   host_bytes=8 << 20, ssd_dirs=[str(small_fs / "ssd")], ssd_bytes=64 << 20,
                   ssd_segment_bytes=1 << 20, write_policy="through")
    (small_fs / "ssd").mkdir()
    engine = kvtier.Engine(**options)
    ns = engine.make_namespace("full")
    acknowledged, failed = [], []
    for chunk in range(400):  # 400 chunks x 3 layers x 8 KiB records: far more than 3 MiB.
        tokens = np.arange(chunk * 16, chunk * 16 + 16, dtype=np.uint32)
        src = blocks_for(engine, 1, seed=chunk)
        try:
            engine.store(ns, tokens, src).wait()
            acknowledged.append((tokens, src))
        except kvtier.NoSpaceError as error:
            assert ".kvs" in str(error)
            failed.append(chunk)
    assert acknowledged and failed
    # Every store after the first failure fails too: nothing is acknowledged that is not on disk.
    assert failed == list(range(failed[0], 400))
    assert ssd_tier(engine).write_failures >= 3 * len(failed)
    with pytest.raises(kvtier.NoSpaceError):
        engine.flush()
    engine.close()

    reopened = kvtier.Engine(**options)
    ns = reopened.make_namespace("full")
    for tokens, src in acknowledged:
        dst = kvtier.empty_blocks(reopened, 1)
        reopened.load(ns, tokens, dst).wait()
        np.testing.assert_array_equal(dst, src)
    reopened.close()


def test_sealed_ssd_needs_its_key(tmp_path):
    """SSD records sealed at rest: read back with the key, a miss without it, nothing of the
    block in the segment files."""
    keys = tmp_path / "ssd.keys"
    keys.write_text(kvtier.generate_remote_key(1))
    keys.chmod(0o600)
    (tmp_path / "ssd").mkdir()
    options = dict(layout="layers=3,kv_heads=2,head_dim=16,dtype=f16,block_tokens=16",
                   host_bytes=1 << 20, ssd_dirs=[str(tmp_path / "ssd")], ssd_bytes=16 << 20,
                   ssd_segment_bytes=1 << 20, write_policy="through")
    engine = kvtier.Engine(**options, ssd_key_file=str(keys))
    ns = engine.make_namespace("sealed")
    tokens = np.arange(32, dtype=np.uint32)
    src = blocks_for(engine, 2, seed=5)
    engine.store(ns, tokens, src).wait()
    engine.close()
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "ssd").glob("seg-*.kvs"))
    assert src.tobytes()[1000:1064] not in on_disk

    reopened = kvtier.Engine(**options, ssd_key_file=str(keys))
    ns = reopened.make_namespace("sealed")
    dst = kvtier.empty_blocks(reopened, 2)
    reopened.load(ns, tokens, dst).wait()
    np.testing.assert_array_equal(dst, src)
    reopened.close()

    # Without its keys a sealed cache is refused (never written in plain records beside the
    # sealed ones), with a message that says why.
    with pytest.raises(kvtier.InvalidArgumentError, match="sealed cache") as refused:
        kvtier.Engine(**options)
    # The refused Engine, as a traceback holds it, has no engine behind it: its repr says so
    # instead of reading memory never constructed (it used to hang pytest's failure report).
    tb = refused.tb
    while tb is not None and not isinstance(tb.tb_frame.f_locals.get("self"), kvtier.Engine):
        tb = tb.tb_next
    assert tb is not None
    assert repr(tb.tb_frame.f_locals["self"]) == "<kvtier.Engine (not opened)>"
