"""The kvtier Python module: round trips through numpy without copies, argument validation,
error classes, handles, pins, statistics and persistence."""

import numpy as np
import pytest

import kvtier


def blocks_for(engine, chunks, seed):
    rng = np.random.default_rng(seed)
    shape = (chunks, engine.layers) + engine.block_shape
    return rng.standard_normal(shape).astype(engine.numpy_dtype)


def test_version():
    assert kvtier.__version__ == kvtier._kvtier.__version__
    assert kvtier.__version__.count(".") == 2


def test_error_hierarchy():
    for cls in (kvtier.NotFoundError, kvtier.CorruptionError, kvtier.IoError,
                kvtier.InvalidArgumentError, kvtier.NotSupportedError, kvtier.NoSpaceError,
                kvtier.BusyError, kvtier.AbortedError, kvtier.TimedOutError,
                kvtier.UnavailableError):
        assert issubclass(cls, kvtier.Error)
    assert issubclass(kvtier.InvalidArgumentError, ValueError)
    assert issubclass(kvtier.TimedOutError, TimeoutError)
    assert issubclass(kvtier.NotFoundError, LookupError)


def test_round_trip_single_array(engine):
    ns = engine.make_namespace("tenant-a")
    tokens = np.arange(1000, 1000 + 4 * 16 + 7, dtype=np.uint32)  # 4 full chunks + a tail
    assert engine.lookup(ns, tokens).matched_tokens == 0

    src = blocks_for(engine, 4, seed=1)
    with engine.store(ns, tokens, src) as store:
        store.wait()
        assert store.chunks_stored == 4

    hit = engine.lookup(ns, tokens)
    assert hit.matched_tokens == 64
    assert hit.chunk_tiers == [kvtier.Tier.HOST] * 4

    dst = kvtier.empty_blocks(engine, 4)
    with engine.load(ns, tokens, dst) as load:
        assert load.chunks == 4
        for layer in range(engine.layers):
            load.wait_layer(layer)
            assert load.layer_ready(layer)
            np.testing.assert_array_equal(dst[:, layer], src[:, layer])
    np.testing.assert_array_equal(dst, src)


def test_blocks_as_sequence_and_zero_copy(engine):
    """Destinations are views into a larger 'paged' cache: the bytes land in place."""
    ns = engine.make_namespace("paged")
    tokens = list(range(32))
    src = blocks_for(engine, 2, seed=2)
    engine.store(ns, tokens, [src[c, l] for c in range(2) for l in range(engine.layers)]).wait()

    pages = np.zeros((engine.layers, 8) + engine.block_shape, dtype=engine.numpy_dtype)
    page_ids = [5, 2]
    dst = [pages[l, page_ids[c]] for c in range(2) for l in range(engine.layers)]
    engine.load(ns, tokens, dst).wait()
    for c, page in enumerate(page_ids):
        for l in range(engine.layers):
            np.testing.assert_array_equal(pages[l, page], src[c, l])
    assert not pages[:, [0, 1, 3, 4, 6, 7]].any()

    # Other buffer-protocol objects: bytearray / memoryview.
    raw = [bytearray(engine.block_bytes) for _ in range(engine.layers)]
    engine.load(ns, tokens[:16], [memoryview(b) for b in raw]).wait()
    assert bytes(raw[1]) == src[0, 1].tobytes()


def test_tokens_forms(engine):
    ns = engine.make_namespace()
    src = blocks_for(engine, 1, seed=3)
    engine.store(ns, np.arange(16, dtype=np.int64), src).wait()
    for tokens in (list(range(16)), tuple(range(16)), np.arange(16, dtype=np.uint32),
                   np.arange(16, dtype=np.int32), [np.uint32(i) for i in range(16)]):
        assert engine.lookup(ns, tokens).matched_tokens == 16
    with pytest.raises(kvtier.InvalidArgumentError):
        engine.lookup(ns, [1, 2, -3])
    with pytest.raises(kvtier.InvalidArgumentError):
        engine.lookup(ns, np.array([1, 1 << 40], dtype=np.int64))
    with pytest.raises(kvtier.InvalidArgumentError):
        engine.lookup(ns, np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError):
        engine.lookup(ns, 17)


def test_buffer_validation(engine):
    ns = engine.make_namespace()
    tokens = list(range(32))
    src = blocks_for(engine, 2, seed=4)
    engine.store(ns, tokens, src).wait()

    readonly = kvtier.empty_blocks(engine, 2)
    readonly.flags.writeable = False
    with pytest.raises(kvtier.InvalidArgumentError, match="read-only"):
        engine.load(ns, tokens, readonly)
    with pytest.raises(kvtier.InvalidArgumentError, match="read-only"):
        engine.load(ns, tokens, [bytes(engine.block_bytes)] * engine.layers)
    strided = np.zeros((2, engine.layers) + engine.block_shape + (2,), dtype=engine.numpy_dtype)
    with pytest.raises(kvtier.InvalidArgumentError, match="contiguous"):
        engine.load(ns, tokens, strided[..., 0])
    with pytest.raises(kvtier.InvalidArgumentError, match="bytes"):
        engine.load(ns, tokens, np.zeros(engine.block_bytes * engine.layers + 2, dtype=np.uint8))
    with pytest.raises(kvtier.InvalidArgumentError, match="layers"):
        engine.load(ns, tokens, [np.zeros(engine.block_bytes, np.uint8)] * (engine.layers + 1))
    with pytest.raises(kvtier.InvalidArgumentError, match=r"src\[1\]"):
        engine.store(ns, tokens, [src[0, 0], object(), src[0, 2]])
    # A read-only source is fine for a store.
    src.flags.writeable = False
    engine.store(ns, tokens, src).wait()


def test_bad_options(make_engine, tmp_path):
    with pytest.raises(kvtier.InvalidArgumentError, match="block_tokens"):
        make_engine(layout="layers=2,kv_heads=2,head_dim=16,dtype=f16,block_tokens=17")
    with pytest.raises(kvtier.InvalidArgumentError):
        make_engine(layout="layers=2")
    with pytest.raises(kvtier.InvalidArgumentError, match="write_policy"):
        make_engine(write_policy="sideways")
    with pytest.raises(kvtier.InvalidArgumentError, match="ssd_codec"):
        make_engine(ssd_codec="gzip")
    with pytest.raises(kvtier.InvalidArgumentError):
        make_engine(host_bytes=0)
    with pytest.raises(kvtier.InvalidArgumentError, match="weights_digest"):
        make_engine(weights_digest=b"short")
    with pytest.raises(TypeError):
        make_engine(no_such_option=1)
    # A dict layout and a bf16 dtype (numpy carries bf16 bits as uint16).
    engine = make_engine(layout=dict(layers=2, kv_heads=1, head_dim=64, dtype="bf16",
                                     block_tokens=32), ssd_codec="shuffle-zstd")
    assert engine.layers == 2 and engine.block_tokens == 32
    assert engine.block_bytes == 2 * 32 * 64 * 2
    assert kvtier.empty_blocks(engine, 1).dtype == np.uint16


def test_namespaces_isolate(engine):
    a = engine.make_namespace("a")
    b = engine.make_namespace("b")
    lora = engine.make_namespace("a", extra_keys=["lora-7"])
    assert a != b and a != lora and a == engine.make_namespace(b"a")
    assert len(a.digest) == 32 and kvtier.Namespace(a.digest) == a
    tokens = list(range(16))
    engine.store(a, tokens, blocks_for(engine, 1, seed=5)).wait()
    assert engine.lookup(a, tokens).matched_tokens == 16
    assert engine.lookup(b, tokens).matched_tokens == 0
    assert engine.lookup(lora, tokens).matched_tokens == 0


def test_load_errors(engine):
    ns = engine.make_namespace()
    tokens = list(range(16))
    with pytest.raises(kvtier.Error):  # Nothing cached: the load (or its wait) fails.
        engine.load(ns, tokens, kvtier.empty_blocks(engine, 1)).wait()
    engine.store(ns, tokens, blocks_for(engine, 1, seed=6)).wait()
    load = engine.load(ns, tokens, kvtier.empty_blocks(engine, 1))
    with pytest.raises(kvtier.InvalidArgumentError, match="out of range"):
        load.wait_layer(engine.layers)
    load.close()
    with pytest.raises(kvtier.AbortedError, match="closed"):
        load.wait()


def test_pin_prefetch_flush_stats(engine):
    ns = engine.make_namespace()
    tokens = list(range(48))
    engine.store(ns, tokens, blocks_for(engine, 3, seed=7)).wait()
    with engine.pin(ns, tokens) as pin:
        assert pin.chunks == 3
    engine.prefetch(ns, tokens)
    engine.flush()
    stats = engine.stats()
    assert stats.stores >= 1 and stats.store_blocks == 3 * engine.layers
    assert stats.lookups == 0
    kinds = [t.kind for t in stats.tiers]
    assert kvtier.Tier.HOST in kinds and kvtier.Tier.SSD in kinds
    assert [t.name for t in stats.tiers] == [str(k).split(".")[-1].lower() for k in kinds]
    host = stats.tiers[kinds.index(kvtier.Tier.HOST)]
    assert host.capacity_bytes > 0 and host.blocks >= 3 * engine.layers


def test_close_and_handles_outliving_engine(engine):
    ns = engine.make_namespace()
    tokens = list(range(16))
    engine.store(ns, tokens, blocks_for(engine, 1, seed=8)).wait()
    dst = kvtier.empty_blocks(engine, 1)
    load = engine.load(ns, tokens, dst)
    pin = engine.pin(ns, tokens)
    engine.close()
    assert engine.closed
    with pytest.raises(kvtier.AbortedError):
        engine.lookup(ns, tokens)
    load.wait()  # The handle keeps the engine alive until it goes.
    del load
    pin.release()
    engine.close()  # Idempotent.


def test_write_through_survives_reopen(make_engine):
    engine = make_engine(write_policy="through")
    ns = engine.make_namespace("persist")
    tokens = np.arange(64, dtype=np.uint32)
    src = blocks_for(engine, 4, seed=9)
    engine.store(ns, tokens, src).wait()
    engine.close()

    reopened = make_engine(write_policy="through")
    ns = reopened.make_namespace("persist")
    hit = reopened.lookup(ns, tokens)
    assert hit.matched_tokens == 64
    assert hit.chunk_tiers[0] == kvtier.Tier.SSD
    dst = kvtier.empty_blocks(reopened, 4)
    reopened.load(ns, tokens, dst).wait()
    np.testing.assert_array_equal(dst, src)


def test_handles_dropped_without_wait(make_engine):
    """A handle garbage-collected before wait() waits in its destructor (without the GIL)."""
    with make_engine() as engine:
        ns = engine.make_namespace()
        tokens = list(range(32))
        src = blocks_for(engine, 2, seed=10)
        engine.store(ns, tokens, src)  # Dropped at once.
        assert engine.lookup(ns, tokens).matched_tokens == 32
        dst = kvtier.empty_blocks(engine, 2)
        engine.load(ns, tokens, dst)  # Dropped at once: the copies are complete afterwards.
        np.testing.assert_array_equal(dst, src)
    assert engine.closed


class DlpackOnly:
    """Exposes an array through DLPack only, as a torch tensor does (no buffer protocol)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_objects(engine):
    ns = engine.make_namespace("dlpack")
    tokens = list(range(32))
    src = blocks_for(engine, 2, seed=11)
    engine.store(ns, tokens, DlpackOnly(src)).wait()
    dst = kvtier.empty_blocks(engine, 2)
    with engine.load(ns, tokens, [DlpackOnly(dst[c, l]) for c in range(2)
                                  for l in range(engine.layers)]) as load:
        load.wait()
    np.testing.assert_array_equal(dst, src)
    strided = np.zeros((2, engine.layers) + engine.block_shape + (2,), dtype=engine.numpy_dtype)
    with pytest.raises(kvtier.InvalidArgumentError, match="contiguous"):
        engine.load(ns, tokens, DlpackOnly(strided[..., 0]))
    with pytest.raises(kvtier.InvalidArgumentError, match="bytes"):
        engine.load(ns, tokens, DlpackOnly(np.zeros(7, dtype=np.float32)))
